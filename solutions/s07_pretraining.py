"""Worked solutions of notebook 07's exercises (pre-training): cosine against linear decay beside the seed noise,
gradient accumulation measured exact (and the naive average measured wrong), and weight decay on every parameter.

`python solutions/s07_pretraining.py` runs them all; `BERTLIB_QUICK=1` trains `tiny` for a few dozen steps,
without it `mini` trains for longer.
"""

import torch
from common import QUICK, cli, documents, header, mean_mlm_loss, pair_batches, static_batches, tokenizer, train
from torch import nn

from bertlib import BertConfig, BertForPreTraining, PretrainConfig, PretrainingDataset
from bertlib.recipes.objectives import train as library_train

PRESET, STEPS, BATCH, LENGTH = ("tiny", 20, 8, 64) if QUICK else ("mini", 1000, 16, 128)


def fresh_model(seed: int, **overrides) -> BertForPreTraining:
    "A model of the size these exercises train, initialised from `seed`."
    torch.manual_seed(seed)
    return BertForPreTraining(BertConfig.from_preset(PRESET, vocab_size=8192, **overrides))


def exercise_1() -> None:
    "The library's loop with a linear and a cosine schedule, and the linear one again with another seed."
    header("exercise 1: cosine against linear decay, beside the run-to-run noise")
    dataset = PretrainingDataset(documents("train", 60), tokenizer(), LENGTH, seed=0)
    valid = static_batches(documents("validation", 20), 32, LENGTH, 6)
    losses = {}
    for schedule, seed in (("linear", 0), ("cosine", 0), ("linear", 1)):
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
        losses[schedule, seed] = mean_mlm_loss(model, valid)
        print(f"{schedule:<6} seed {seed}: validation MLM loss {losses[schedule, seed]:.4f}")
    schedules = abs(losses["cosine", 0] - losses["linear", 0])
    seeds = abs(losses["linear", 1] - losses["linear", 0])
    print(
        f"cosine - linear: {schedules:.4f}; seed 1 - seed 0 (same schedule): {seeds:.4f} -> the schedule's effect "
        f"is {'larger' if schedules > seeds else 'not larger'} than the noise of one change of seed; to claim it, "
        f"run several seeds of each and compare the spread"
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
    print(f"masked tokens in the 4 micro-batches: {masked}")
    print(
        f"gradient of the big batch against: micro-batches weighted by their share of masked tokens "
        f"{(exact - reference).abs().max():.1e}; the plain mean of the micro-batch means "
        f"{(naive - reference).abs().max():.1e} (relative {(naive - reference).norm() / reference.norm():.1%})"
    )
    print(
        "the MLM loss is a mean over masked tokens; the mean of per-micro-batch means gives a token of a "
        "micro-batch with few masks more weight than one with many, so unless every micro-batch has the same "
        "number of masks it is another gradient"
    )


def exercise_3() -> None:
    "Two runs that differ only in whether biases and LayerNorm gains are decayed."
    header("exercise 3: weight decay on every parameter, LayerNorm gains and biases included")
    batches = list(zip(range(STEPS), pair_batches(documents("train", 60), BATCH, LENGTH), strict=False))
    weight_decay = 0.1  # ten times BERT's, so that a short run shows what decay does to the gains
    for decay_everything in (False, True):
        model = fresh_model(0)
        losses = train(
            model, (b for _, b in batches), STEPS, lr=2e-3, weight_decay=weight_decay, decay_everything=decay_everything
        )
        gains = torch.cat([m.weight for m in model.modules() if isinstance(m, nn.LayerNorm)]).detach()
        biases = torch.cat([p.flatten() for n, p in model.named_parameters() if n.endswith("bias")]).detach()
        print(
            f"{'decay everything' if decay_everything else 'matrices only':<16}: LayerNorm gains mean "
            f"{gains.mean():.5f} (norm {gains.norm():.3f}), biases mean |b| {biases.abs().mean():.5f}; "
            f"last loss {losses[-1]:.3f}"
        )
    print(
        "decaying the gains pulls them from 1 towards 0, which shrinks every normalised output; the optimiser "
        "has to keep pushing them back, against a force that has nothing to do with the data"
    )


if __name__ == "__main__":
    cli(__name__)
