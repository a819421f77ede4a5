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
    course_model,
    documents,
    header,
    mean_mlm_loss,
    pair_batches,
    parameters,
    run_all,
    static_batches,
    train,
)

from bertlib import BertConfig, BertForPreTraining
from bertlib.model.embeddings import BertEmbeddings


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
        print(
            f"{kind:<9}: rows moved by training, mean norm: positions < {length}: {moved[:length].mean():.4f}, "
            f"{length}..{2 * length - 1}: {moved[length : 2 * length].mean():.4f}; validation MLM loss at "
            f"{length} tokens {losses[length]:.3f}, at {2 * length} tokens {losses[2 * length]:.3f}"
        )
    print(
        "a learned table trains only the rows it saw (the others move by weight decay alone), so past the "
        "training length the model reads random vectors; sinusoids are defined at every position, and a "
        "position past the training length has the same relation to its neighbours as those seen"
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
    print(
        "[CLS] is always the same token at position 0, so its segment vector is a constant that its own row can "
        "absorb: whichever segment it is given, the model can learn the same thing. The first [SEP] is always "
        "the token right after A: the segment ids still change exactly where B begins, and the two [SEP]s "
        "still differ (segment 0 after A, segment 1 after B), so no information is lost either"
    )


def exercise_4() -> None:
    "How alike neighbouring and distant position vectors of the course model are, inside and past 128 positions."
    header("exercise 4: the course model's position table (trained on sequences of up to 128 tokens)")
    model, _ = course_model()
    table = F.normalize(model.bert.embeddings.position_embeddings.weight.detach(), dim=-1)
    cosine = table @ table.T
    torch.manual_seed(0)
    fresh = F.normalize(BertForPreTraining(model.config).bert.embeddings.position_embeddings.weight.detach(), dim=-1)
    fresh_cosine = fresh @ fresh.T

    def mean_at(matrix: torch.Tensor, rows: range, offset: int) -> float:
        return torch.stack([matrix[i, i + offset] for i in rows]).mean().item()

    for name, rows in (("positions 0..127", range(0, 127 - 32)), ("positions 128..511", range(128, 511 - 32))):
        print(
            f"{name}: mean cosine with the next position {mean_at(cosine, rows, 1):+.3f}, with the one 8 further "
            f"{mean_at(cosine, rows, 8):+.3f}, 32 further {mean_at(cosine, rows, 32):+.3f}"
        )
    print(f"untrained table: mean cosine with the next position {mean_at(fresh_cosine, range(0, 480), 1):+.3f}")
    norms = model.bert.embeddings.position_embeddings.weight.detach().norm(dim=1)
    print(f"row norms: positions 0..127 {norms[:128].mean():.3f}, 128..511 {norms[128:].mean():.3f}")
    print(
        "the band (neighbours alike, far positions not) appears only in the 128 rows that training reached; "
        "the rows past them are still the random start, shrunk a little by weight decay"
    )


def main() -> None:
    "Run every exercise of this notebook, in order."
    run_all(__name__)


if __name__ == "__main__":
    main()
