"""Worked solutions of notebook 02's exercises (embeddings): where BERT-base's embedding parameters are, fixed
sinusoids against a learned position table past the training length, why `[CLS]` may share segment 0, and the
course model's trained position table.

`python solutions/s02_embeddings.py` runs them all; `BERTLIB_QUICK=1` trains the models of exercise 2 for fewer
steps.
"""

import math
import statistics

import torch
import torch.nn.functional as F
from common import (
    QUICK,
    BertEmbeddings,
    cli,
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
from verdict import compare

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
    largest = max(parts, key=lambda name: parameters(parts[name]))  # exact: counts of parameters
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
    "A learned table and frozen sinusoids, trained on short sequences from the same seeds, scored at twice the length."
    header("exercise 2: fixed sinusoids instead of the learned position table, past the training length")
    length, steps, batch = (32, 30, 8) if QUICK else (64, 1500, 16)
    seeds = (0, 1) if QUICK else (0, 1, 2)  # one run a side cannot tell a change of 0.01 from the seed's noise
    docs, valid = documents("train", 60), documents("validation", 20)
    scores = {length: static_batches(valid, 16, length, 8), 2 * length: static_batches(valid, 16, 2 * length, 8)}
    rise, moved_past = {"learned": [], "sinusoids": []}, []
    for seed in seeds:
        for kind in rise:  # a seed draws the same weights (but the position table) and text order for both
            torch.manual_seed(seed)
            model = BertForPreTraining(BertConfig.from_preset("tiny" if QUICK else "mini", vocab_size=8192))
            table = model.bert.embeddings.position_embeddings.weight
            if kind == "sinusoids":  # scaled to the learned table's initial size, and frozen
                table.data = sinusoids(*table.shape) * 0.02 * math.sqrt(2)
                table.requires_grad_(False)
            start = table.detach().clone()
            train(model, pair_batches(docs, batch, length, seed=seed), steps, lr=1e-3)
            moved = (table.detach() - start).norm(dim=1)
            losses = {n: mean_mlm_loss(model, batches) for n, batches in scores.items()}
            rise[kind].append(losses[2 * length] - losses[length])
            if kind == "learned":
                moved_past.append((moved[length : 2 * length].mean() / moved[:length].mean()).item())
            print(
                f"seed {seed}, {kind:<9}: rows moved by training, mean norm: positions < {length}: "
                f"{moved[:length].mean():.4f}, {length}..{2 * length - 1}: {moved[length : 2 * length].mean():.4f}; "
                f"validation MLM loss at {length} tokens {losses[length]:.3f}, at {2 * length} tokens "
                f"{losses[2 * length]:.3f} ({rise[kind][-1]:+.3f})"
            )
    verdict = compare(rise["sinusoids"], rise["learned"], paired=True)
    print(
        f"the learned table's rows past {length} moved {statistics.mean(moved_past):.1%} as far as the rows it "
        f"trained (weight decay alone reaches them), so past the training length it reads vectors close to their "
        f"random start; at twice the length the loss changes by {statistics.mean(rise['learned']):+.3f} with the "
        f"learned table and by {statistics.mean(rise['sinusoids']):+.3f} with the sinusoids (means over "
        f"{len(seeds)} seeds); the sinusoids' change against the learned table's: "
        + verdict.says(
            lower="the sinusoids, defined at every position, carry over better",
            higher="the sinusoids carry over worse",
        )
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
    if diff < 1e-4:  # exact: one computation two ways, equal up to float rounding
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

    def cosines(table: torch.Tensor, rows: range, offset: int) -> torch.Tensor:
        "The cosine of each of `rows` with the row `offset` further."
        unit = F.normalize(table, dim=-1)
        return (unit[rows.start : rows.stop] * unit[rows.start + offset : rows.stop + offset]).sum(-1)

    inside, past = range(0, trained - 32), range(trained, size - 32)
    print(f"the course model was trained on sequences of up to {trained} tokens; its table has {size} rows")
    near = {}
    for name, label, table, rows in (
        ("inside", f"positions 0..{trained - 1}", weight, inside),
        ("past", f"positions {trained}..{size - 1}", weight, past),
        ("untrained", "untrained table", fresh, range(0, size - 32)),
    ):
        near[name] = cosines(table, rows, 1)
        print(
            f"{label:<20}: mean cosine with the next position {near[name].mean():+.3f}, with the one 8 further "
            f"{cosines(table, rows, 8).mean():+.3f}, 32 further {cosines(table, rows, 32).mean():+.3f}"
        )
    norms, fresh_norms = weight.norm(dim=1), fresh.norm(dim=1)
    print(
        f"row norms: positions 0..{trained - 1} {norms[:trained].mean():.3f}, {trained}..{size - 1} "
        f"{norms[trained:].mean():.3f}, untrained {fresh_norms.mean():.3f}"
    )
    band = compare(near["inside"], near["untrained"], unit="rows")
    rest = compare(near["past"], near["untrained"], unit="rows")
    shrink = compare(norms[trained:], fresh_norms, unit="rows")
    print(
        f"cosine with the next row, the first {trained} rows against an untrained table's: "
        + band.says(lower="lower: no band", higher="higher: the band of neighbours alike")
    )
    print(
        f"the same, the rows past {trained} against an untrained table's: "
        + rest.says(lower="lower than an untrained table's", higher="higher: training reached them too")
    )
    print(
        f"the norm of the rows past {trained} is {norms[trained:].mean() / fresh_norms.mean():.0%} of an untrained "
        "row's; against the untrained rows: "
        + shrink.says(lower="smaller: weight decay shrank them", higher="larger: training reached them")
    )


if __name__ == "__main__":
    cli(__name__)
