"""Worked solutions of notebook 02's exercises (embeddings): where BERT-base's embedding parameters are, fixed
sinusoids against a learned position table past the training length, why `[CLS]` may share segment 0, and the
course model's trained position table.

`python solutions/s02_embeddings.py` runs them all; `BERTLIB_QUICK=1` trains the models of exercise 2 for fewer
steps.
"""

import math

import torch
import torch.nn.functional as F
from common import (
    QUICK,
    BertEmbeddings,
    cli,
    compared,
    course_model,
    course_trained_length,
    documents,
    header,
    mean_mlm_loss,
    pair_batches,
    parameters,
    static_batches,
    train,
)

from bertlib import BertConfig, BertForPreTraining


def exercise_1() -> None:
    "The three tables of BERT-base with Google's vocabulary, against the whole model."
    header("exercise 1: the embedding parameters of base with a 30,522-token vocabulary")
    config = BertConfig.from_preset("base", vocab_size=30522)
    with torch.device("meta"):
        embeddings, model = BertEmbeddings(config), BertForPreTraining(config)
    total = parameters(model)
    parts = {
        "token (word) table": embeddings.word_embeddings,
        "position table": embeddings.position_embeddings,
        "segment table": embeddings.token_type_embeddings,
        "LayerNorm": embeddings.layer_norm,
    }
    for name, module in parts.items():
        print(f"{name:<20} {parameters(module):>12,}  {parameters(module) / total:6.2%} of the model")
    print(
        f"{'all embeddings':<20} {parameters(embeddings):>12,}  {parameters(embeddings) / total:6.2%} of {total:,} "
        f"parameters"
    )
    largest = max(parts, key=lambda name: parameters(parts[name]))
    print(
        f"the {largest} dominates: {parameters(parts[largest]) / parameters(embeddings):.1%} of the embeddings, "
        f"{parameters(parts[largest]) / total:.1%} of the model"
    )


def sinusoids(n: int, dim: int) -> torch.Tensor:
    "The fixed position encodings of Vaswani et al. (2017), as in notebook 02."
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    freq = 10000 ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    table = torch.zeros(n, dim)
    table[:, 0::2], table[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return table


def exercise_2() -> None:
    "A learned table and frozen sinusoids, trained on short sequences, scored at twice the length."
    header("exercise 2: fixed sinusoids instead of the learned position table, past the training length")
    length, steps, batch = (32, 30, 8) if QUICK else (64, 1500, 16)
    docs, valid = documents("train", 60), documents("validation", 20)
    scores = {length: static_batches(valid, 16, length, 8), 2 * length: static_batches(valid, 16, 2 * length, 8)}
    rise, moved_past = {}, {}
    for kind in ("learned", "sinusoids"):
        torch.manual_seed(0)
        model = BertForPreTraining(BertConfig.from_preset("tiny" if QUICK else "mini", vocab_size=8192))
        table = model.bert.embeddings.position_embeddings.weight
        if kind == "sinusoids":  # scaled to the learned table's initial size, and frozen
            table.data = sinusoids(*table.shape) * 0.02 * math.sqrt(2)
            table.requires_grad_(False)
        start = table.detach().clone()
        train(model, pair_batches(docs, batch, length), steps, lr=1e-3)
        moved = (table.detach() - start).norm(dim=1)
        losses = {n: mean_mlm_loss(model, batches) for n, batches in scores.items()}
        rise[kind] = losses[2 * length] - losses[length]
        moved_past[kind] = moved[length : 2 * length].mean() / moved[:length].mean().clamp_min(1e-12)
        print(
            f"{kind:<9}: rows moved by training, mean norm: positions < {length}: {moved[:length].mean():.4f}, "
            f"{length}..{2 * length - 1}: {moved[length : 2 * length].mean():.4f}; validation MLM loss at "
            f"{length} tokens {losses[length]:.3f}, at {2 * length} tokens {losses[2 * length]:.3f}"
        )
    print(
        f"the learned table's rows past {length} moved {moved_past['learned']:.1%} as far as the rows it trained "
        f"(weight decay alone reaches them), so past the training length it reads vectors close to their random "
        f"start; at twice the length its loss changes by {rise['learned']:+.3f}, the sinusoids' by "
        f"{rise['sinusoids']:+.3f}: "
        + {
            "lower": "the sinusoids, defined at every position, carry over better",
            "higher": "the sinusoids carry over worse in this run",
            "about the same": "the two carry over alike (within 0.01): positions do not matter yet to either model",
        }[compared(rise["sinusoids"], rise["learned"], 0.01)]
    )


def exercise_3() -> None:
    "Moving [CLS] to segment 1 changes nothing that its token embedding cannot absorb."
    header("exercise 3: why [CLS] and the first [SEP] may share segment 0 with sentence A")
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=100)).eval()
    ids = torch.tensor([[2, 10, 11, 12, 3, 20, 21, 3]])
    types = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1]])
    with torch.no_grad():
        before = model.bert(ids, token_type_ids=types)
        moved = types.clone()
        moved[0, 0] = 1  # [CLS] in segment 1 ...
        segments = model.bert.embeddings.token_type_embeddings.weight
        model.bert.embeddings.word_embeddings.weight[2] += segments[0] - segments[1]  # ... and its row makes up for it
        after = model.bert(ids, token_type_ids=moved)
    diff = max(
        (before.last_hidden_state - after.last_hidden_state).abs().max().item(),
        (before.pooler_output - after.pooler_output).abs().max().item(),
    )
    print(
        f"[CLS] moved to segment 1, its token row shifted by (segment 0 - segment 1): largest change in the "
        f"encoder's outputs {diff:.1e}"
    )
    if diff < 1e-4:
        print(
            "the outputs are the same up to rounding: [CLS] is always the same token at position 0, so its segment "
            "vector is a constant that its own row absorbs, and whichever segment it is given the model can learn "
            "the same thing. The first [SEP] is always the token right after A, and the segment ids still change "
            "exactly where B begins, so nothing is lost there either"
        )
    else:
        print("the outputs changed: the segment of [CLS] is not a constant that its token row can absorb here")


def exercise_4() -> None:
    "How alike neighbouring and distant position vectors of the course model are, inside and past 128 positions."
    header("exercise 4: the course model's position table, inside and past the positions it was trained on")
    trained = course_trained_length()
    model, _ = course_model()
    weight = model.bert.embeddings.position_embeddings.weight.detach()
    torch.manual_seed(0)
    fresh = BertForPreTraining(model.config).bert.embeddings.position_embeddings.weight.detach()
    size = len(weight)

    def mean_at(table: torch.Tensor, rows: range, offset: int) -> float:
        unit = F.normalize(table, dim=-1)
        return (unit[rows.start : rows.stop] * unit[rows.start + offset : rows.stop + offset]).sum(-1).mean().item()

    inside, past = range(0, trained - 32), range(trained, size - 32)
    print(f"the course model was trained on sequences of up to {trained} tokens; its table has {size} rows")
    near = {}
    for name, table, rows in (
        (f"positions 0..{trained - 1}", weight, inside),
        (f"positions {trained}..{size - 1}", weight, past),
        ("untrained table", fresh, range(0, size - 32)),
    ):
        near[name] = mean_at(table, rows, 1)
        print(
            f"{name:<20}: mean cosine with the next position {near[name]:+.3f}, with the one 8 further "
            f"{mean_at(table, rows, 8):+.3f}, 32 further {mean_at(table, rows, 32):+.3f}"
        )
    norms = weight.norm(dim=1)
    shrink = norms[trained:].mean() / fresh.norm(dim=1).mean()
    print(
        f"row norms: positions 0..{trained - 1} {norms[:trained].mean():.3f}, {trained}..{size - 1} "
        f"{norms[trained:].mean():.3f}, untrained {fresh.norm(dim=1).mean():.3f}"
    )
    band, rest, untrained = near.values()
    print(
        (
            f"the band (neighbours alike) is only in the {trained} rows that training reached: the rows past them "
            f"are as unlike their neighbours as an untrained table's"
            if abs(rest - untrained) < abs(band - untrained) / 4
            else f"the rows past {trained} are not like an untrained table's: training reached them too"
        )
        + f", and their norm is {shrink:.0%} of an untrained row's"
        + (" (weight decay shrank them)" if shrink < 1 else "")
    )


if __name__ == "__main__":
    cli(__name__)
