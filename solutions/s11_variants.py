"""Worked solutions of notebook 11's exercises (variants): Post-LN and Pre-LN without warm-up, the position rows
past the training length against rotary positions, ALBERT's shared layer at twice the depth, and NSP against
sentence-order prediction.

`python solutions/s11_variants.py` runs them all; `BERTLIB_QUICK=1` trains small models for a few dozen steps,
which shows what each switch touches but not yet the size of its effect; without it the runs are longer.
"""

import time

import torch
from common import (
    QUICK,
    cli,
    documents,
    header,
    mean_mlm_loss,
    pair_batches,
    parameters,
    static_batches,
    tokenizer,
    train,
)

from bertlib import BertConfig, BertForPreTraining, PretrainingDataset, pretraining_dataloader, validation_metrics

STEPS, BATCH = (20, 8) if QUICK else (1500, 16)


def model_of(seed: int = 0, **switches) -> BertForPreTraining:
    "A fresh model of the size these exercises train (`tiny` in quick mode, else `mini`) with `switches`."
    torch.manual_seed(seed)
    return BertForPreTraining(BertConfig.from_preset("tiny" if QUICK else "mini", vocab_size=8192, **switches))


def exercise_1() -> None:
    "Four runs: Post-LN and Pre-LN, each with and without warm-up, at a high peak learning rate."
    header("exercise 1: Post-LN and Pre-LN without warm-up")
    docs, valid = documents("train", 60), static_batches(documents("validation", 20), 32, 64, 4)
    deep = dict(num_hidden_layers=6)  # deeper than the preset, where the placement of LayerNorm matters more
    for style in ("post", "pre"):
        for warmup in (0.1, 0.0):
            model = model_of(norm_style=style, **deep)
            losses = train(model, pair_batches(docs, BATCH, 64), STEPS, lr=5e-3, warmup_ratio=warmup)
            print(
                f"{style}-LN, warm-up {warmup:.0%} of the steps, peak lr 5e-3: first losses "
                f"{', '.join(f'{x:.2f}' for x in losses[1:4])}; last {losses[-1]:.3f}; validation MLM loss "
                f"{mean_mlm_loss(model, valid):.3f}"
            )
    print(
        "Xiong et al.'s prediction: without warm-up Post-LN's first large updates throw it off its path and it "
        "ends worse, while Pre-LN barely notices"
    )


def exercise_2() -> None:
    "Which rows of a learned table get a gradient, and the loss at twice the training length, learned against rope."
    header("exercise 2: the rows past the training length, learned table against rotary positions")
    docs, valid = documents("train", 60), documents("validation", 20)
    length = 32 if QUICK else 64
    scores = {n: static_batches(valid, 16, n, 4) for n in (length, 2 * length)}
    absolute = model_of()
    batch = next(pair_batches(docs, BATCH, length))
    absolute(
        batch["input_ids"],
        token_type_ids=batch["token_type_ids"],
        attention_mask=batch["attention_mask"],
        labels=batch["labels"],
        next_sentence_label=batch["next_sentence_label"],
    ).loss.backward()
    grad = absolute.bert.embeddings.position_embeddings.weight.grad
    touched = int((grad.abs().sum(1) > 0).sum())
    print(
        f"one step on sequences of {length}: {touched} rows of the {grad.shape[0]}-row table get a gradient, "
        f"the largest gradient past row {length - 1} is {grad[length:].abs().max():.1e}"
    )
    for name, switches in (("learned table", {}), ("rope", {"position_embedding_type": "rope"})):
        model = model_of(**switches)
        train(model, pair_batches(docs, BATCH, length), STEPS, lr=1e-3)
        at = {n: mean_mlm_loss(model, b) for n, b in scores.items()}
        print(
            f"{name:<13}: validation MLM loss at {length} tokens {at[length]:.3f}, at {2 * length} tokens "
            f"{at[2 * length]:.3f} ({at[2 * length] - at[length]:+.3f})"
        )
    print(
        "the learned model reads untrained rows past the training length; the rotary model has no rows, only "
        "offsets, some of which it has not seen so far apart"
    )


def exercise_3() -> None:
    "Parameters and step time of mini unshared, shared, and shared at twice the depth."
    header("exercise 3: share_layers at twice the depth")
    batch = next(pair_batches(documents("train", 40), 4 if QUICK else 8, 128))
    for name, switches in (
        ("4 layers", {}),
        ("4 layers, shared", {"share_layers": True}),
        ("8 layers, shared", {"share_layers": True, "num_hidden_layers": 8}),
    ):
        torch.manual_seed(0)
        model = BertForPreTraining(BertConfig.from_preset("mini", **switches))
        times = []
        for _ in range(2 if QUICK else 3):
            start = time.perf_counter()
            model(
                batch["input_ids"],
                token_type_ids=batch["token_type_ids"],
                attention_mask=batch["attention_mask"],
                labels=batch["labels"],
                next_sentence_label=batch["next_sentence_label"],
            ).loss.backward()
            model.zero_grad()
            times.append(time.perf_counter() - start)
        print(
            f"{name:<17}: {parameters(model):>9,} parameters, fastest training step "
            f"{min(times) * 1000:5.0f} ms (batch {len(batch['input_ids'])} x 128)"
        )
    print(
        "sharing saves parameters, not compute: every depth still runs its layer, so doubling the depth "
        "doubles the encoder's time and leaves the parameter count where it was"
    )


def exercise_4() -> None:
    "Two short runs, NSP pairs and sentence-order pairs, each scored on its own task's static pairs."
    header("exercise 4: NSP against sentence-order prediction")
    docs, valid = documents("train", 60), documents("validation", 20)
    for pairing in ("segments", "sop"):
        model = model_of()
        train(model, pair_batches(docs, BATCH, 64, pairing=pairing), STEPS, lr=1e-3)
        dataset = PretrainingDataset(valid, tokenizer(), 64, seed=12345, pairing=pairing, static=True)
        scores = validation_metrics(model, pretraining_dataloader(dataset, 64, shuffle=False), 4 if QUICK else None)
        task = "NSP (random B)" if pairing == "segments" else "SOP (swapped)"
        print(
            f"{task:<15} after {STEPS} steps: accuracy {scores['nsp_accuracy']:.3f} on the validation pairs, "
            f"MLM perplexity {scores['mlm_perplexity']:.1f}"
        )
    print(
        "expected with enough steps: a random B is usually about another topic, which word statistics alone give "
        "away, so NSP leaves chance early; the order of two consecutive segments of one text needs coherence, so "
        "SOP stays at chance far longer. What SOP teaches is what NSP lets a model skip"
    )


if __name__ == "__main__":
    cli(__name__)
