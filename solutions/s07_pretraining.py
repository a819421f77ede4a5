"""Worked solutions of notebook 07's exercises (pre-training): cosine against linear decay beside the seed noise,
gradient accumulation measured exact (and the naive average measured wrong), and weight decay on every parameter.

`python solutions/s07_pretraining.py` runs them all. Both modes train `tiny`, as the exercises say: `BERTLIB_QUICK=1`
for 300 steps of 8 x 64 tokens (a few minutes on one core), enough for the loss to fall well below a uniform guess
(ln 8192 = 9.0) and for the schedules and the weight decay to act (20 steps, as before, left them nothing to show);
without it for 1,000 steps of 16 x 128 (20 minutes on one core of a 2-core machine).
"""

import statistics

import torch
from common import (
    QUICK,
    cli,
    documents,
    header,
    library_train,
    mean_mlm_loss,
    pair_batches,
    static_batches,
    tokenizer,
    train,
)
from torch import nn
from verdict import compare

from bertlib import BertConfig, BertForPreTraining, PretrainConfig, PretrainingDataset

PRESET, STEPS, BATCH, LENGTH = ("tiny", 300, 8, 64) if QUICK else ("tiny", 1000, 16, 128)
SEEDS = (0, 1)


def fresh_model(seed: int, **overrides) -> BertForPreTraining:
    "A model of the size these exercises train, initialised from `seed`."
    torch.manual_seed(seed)
    return BertForPreTraining(BertConfig.from_preset(PRESET, vocab_size=8192, **overrides))


def exercise_1() -> None:
    "The library's loop with a linear and a cosine schedule, each from two seeds."
    header("exercise 1: cosine against linear decay, beside the run-to-run noise")
    dataset = PretrainingDataset(documents("train", 60), tokenizer(), LENGTH, seed=0)
    valid = static_batches(documents("validation", 20), 32, LENGTH, 6)
    losses = {"linear": [], "cosine": []}
    for schedule, seed in ((schedule, seed) for seed in SEEDS for schedule in losses):
        cfg = PretrainConfig(
            max_steps=STEPS,
            batch_size=BATCH,
            max_seq_len=LENGTH,
            lr=1e-3,
            schedule=schedule,
            seed=seed,
            log_every=STEPS,
            eval_every=STEPS,
            save_every=STEPS,
            device="cpu",
        )
        model = fresh_model(seed)
        library_train(model, dataset, cfg, show_progress=False)
        losses[schedule].append(mean_mlm_loss(model, valid))
        print(f"{schedule:<6} seed {seed}, {STEPS} steps: validation MLM loss {losses[schedule][-1]:.4f}")
    # a seed draws the same weights and text order for both schedules, so the seeds pair them
    verdict = compare(losses["cosine"], losses["linear"], paired=True, fmt=".4f")
    noise = max(max(values) - min(values) for values in losses.values())  # what a change of seed alone moved
    print(
        f"the largest change of seed within one schedule: {noise:.4f}; cosine against linear: "
        + verdict.says(lower="cosine ends lower than linear", higher="cosine ends higher than linear")
        + "; to claim it at other sizes, run more seeds of each"
    )


def exercise_2() -> None:
    "grad_accum=4 against 1 in the library's loop, then the exact weighting against the naive mean, by hand."
    header("exercise 2: gradient accumulation gives the big batch's gradient")
    dataset = PretrainingDataset(documents("train", 40), tokenizer(), LENGTH, seed=0)
    no_dropout = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    records = {}
    for accum in (1, 4):
        cfg = PretrainConfig(
            max_steps=8,
            batch_size=16,
            grad_accum=accum,
            max_seq_len=LENGTH,
            lr=1e-3,
            log_every=1,
            eval_every=8,
            save_every=8,
            device="cpu",
        )
        records[accum] = [
            r["loss"]
            for r in library_train(fresh_model(0, **no_dropout), dataset, cfg, show_progress=False)
            if "loss" in r
        ]
    diff = max(abs(a - b) for a, b in zip(records[1], records[4], strict=True))
    print(f"8 steps of 16 sequences, grad_accum 1 and 4: largest difference of the step losses {diff:.1e}")

    model = fresh_model(0, **no_dropout).eval()
    big = next(pair_batches(documents("train", 40), 16, LENGTH))
    micro = [{k: v[i : i + 4] for k, v in big.items()} for i in range(0, 16, 4)]

    def gradient(loss: torch.Tensor) -> torch.Tensor:
        model.zero_grad()
        loss.backward()
        return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    def parts(batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        out = model(
            batch["input_ids"],
            token_type_ids=batch["token_type_ids"],
            attention_mask=batch["attention_mask"],
            labels=batch["labels"],
            next_sentence_label=batch["next_sentence_label"],
        )
        return out.mlm_loss, out.nsp_loss

    masked = [int((b["labels"] != -100).sum()) for b in micro]
    reference = gradient(sum(parts(big)))
    exact = gradient(
        sum(
            mlm * m / sum(masked) + nsp * len(b["input_ids"]) / 16
            for b, m, (mlm, nsp) in ((b, m, parts(b)) for b, m in zip(micro, masked, strict=True))
        )
    )
    naive = gradient(sum(sum(parts(b)) for b in micro) / len(micro))
    exact_error = (exact - reference).abs().max().item()
    naive_error = (naive - reference).norm().item() / reference.norm().item()
    print(f"masked tokens in the 4 micro-batches: {masked}")
    print(
        f"gradient of the big batch against: micro-batches weighted by their share of masked tokens "
        f"{exact_error:.1e}; the plain mean of the micro-batch means {(naive - reference).abs().max():.1e} "
        f"(relative {naive_error:.1%})"
    )
    print(
        # exact: these three compare one computation done two ways, equal up to float rounding or not
        ("the library's accumulation matches the big batch" if diff < 1e-4 else "the library's accumulation differs")
        # exact: float rounding
        + ("; so does the weighting by masked tokens" if exact_error < 1e-5 else "; the weighting does not match")
        + (
            f", while the mean of means is off by {naive_error:.1%}: the MLM loss is a mean over masked tokens, and "
            "the mean of per-micro-batch means gives a token of a micro-batch with few masks more weight than one "
            "with many"
            if naive_error > 1e-4  # exact: float rounding
            else ", and so does the mean of means here"
        )
        # exact: counts of masks
        + ("" if len(set(masked)) > 1 else "; these micro-batches hold the same number of masks, where the two agree")
    )


def exercise_3() -> None:
    "Two runs that differ only in whether biases and LayerNorm gains are decayed."
    header("exercise 3: weight decay on every parameter, LayerNorm gains and biases included")
    batches = list(zip(range(STEPS), pair_batches(documents("train", 60), BATCH, LENGTH), strict=False))
    weight_decay = 0.1  # ten times BERT's, so that a short run shows what decay does to the gains
    found = {}
    for decay_everything in (False, True):
        model = fresh_model(0)
        losses = train(
            model, (b for _, b in batches), STEPS, lr=2e-3, weight_decay=weight_decay, decay_everything=decay_everything
        )
        gains = torch.cat([m.weight for m in model.modules() if isinstance(m, nn.LayerNorm)]).detach()
        biases = torch.cat([p.flatten() for n, p in model.named_parameters() if n.endswith("bias")]).detach()
        found[decay_everything] = gains, losses[-20:]
        print(
            f"{'decay everything' if decay_everything else 'matrices only':<16}: LayerNorm gains mean "
            f"{gains.mean():.5f} (norm {gains.norm():.3f}, {gains.numel()} gains), biases mean |b| "
            f"{biases.abs().mean():.5f}; mean loss of the last 20 steps {statistics.mean(losses[-20:]):.3f}"
        )
    (gains, last), (decayed_gains, decayed_last) = found.values()
    # one run each: the spreads are those over the gains (the same parameter in both runs) and over the last 20
    # steps (the same batches in both runs), not over seeds
    pulled = compare(decayed_gains.abs(), gains.abs(), paired=True, unit="gains", fmt=".4f")
    loss = compare(decayed_last, last, paired=True, unit="steps", fmt=".3f")
    print(
        f"decaying the gains changed their norm by {decayed_gains.norm() / gains.norm() - 1:+.2%} in {STEPS} steps; "
        "their size against the undecayed run's: "
        + pulled.says(
            lower="pulled from 1 towards 0, which shrinks every normalised output; the optimiser has to keep pushing "
            "them back, against a force that has nothing to do with the data",
            higher="not pulled towards 0",
        )
    )
    print(
        "the training loss of the last 20 steps with the gains decayed against without: "
        + loss.says(lower="lower with decay", higher="higher with decay")
    )


if __name__ == "__main__":
    cli(__name__)
