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
from verdict import against, compare

from bertlib import BertConfig, BertForPreTraining, PretrainingDataset, pretraining_dataloader, validation_metrics

STEPS, BATCH = (20, 8) if QUICK else (1500, 16)


def model_of(seed: int = 0, **switches) -> BertForPreTraining:
    "A fresh model of the size these exercises train (`tiny` in quick mode, else `mini`) with `switches`."
    torch.manual_seed(seed)
    return BertForPreTraining(BertConfig.from_preset("tiny" if QUICK else "mini", vocab_size=8192, **switches))


def exercise_1() -> None:
    "Post-LN and Pre-LN, each with and without warm-up, at a high peak learning rate, from the same seeds."
    header("exercise 1: Post-LN and Pre-LN without warm-up")
    docs, valid = documents("train", 60), static_batches(documents("validation", 20), 32, 64, 4)
    deep = dict(num_hidden_layers=6)  # deeper than the preset, where the placement of LayerNorm matters more
    seeds = (0, 1) if QUICK else (0, 1, 2)  # one run each cannot tell a change of 0.01 from the seed's noise
    loss = {(style, warmup): [] for style in ("post", "pre") for warmup in (0.1, 0.0)}
    for seed in seeds:  # a seed draws the same weights and text order for all four
        for style, warmup in loss:
            model = model_of(seed, norm_style=style, **deep)
            losses = train(model, pair_batches(docs, BATCH, 64, seed=seed), STEPS, lr=5e-3, warmup_ratio=warmup)
            loss[style, warmup].append(mean_mlm_loss(model, valid))
            print(
                f"seed {seed}, {style}-LN, warm-up {warmup:.0%} of the steps, peak lr 5e-3: first losses "
                f"{', '.join(f'{x:.2f}' for x in losses[1:4])}; last {losses[-1]:.3f}; validation MLM loss "
                f"{loss[style, warmup][-1]:.3f}"
            )
    cost = {
        style: [a - b for a, b in zip(loss[style, 0.0], loss[style, 0.1], strict=True)] for style in ("post", "pre")
    }
    for style, name in (("post", "Post-LN"), ("pre", "Pre-LN")):
        print(
            f"dropping the warm-up, {name}'s validation loss: "
            + against(cost[style], 0.0).says(lower="lower without it", higher="higher without it: it suffers")
        )
    verdict = compare(cost["post"], cost["pre"], paired=True)
    print(
        "what dropping it costs Post-LN against what it costs Pre-LN: "
        + verdict.says(
            lower="Pre-LN suffers more here, the opposite of what Xiong et al. predict",
            higher="Post-LN suffers more, as Xiong et al. predict: without warm-up its first large updates throw it "
            "off its path, while Pre-LN's normalised sub-layers shield its stream",
            unclear="so at this size and length the run does not show what Xiong et al. predict",
        )
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
    seeds = (0, 1) if QUICK else (0, 1, 2)  # one run a side cannot tell a change of 0.01 from the seed's noise
    at_twice, rise = {"learned table": [], "rope": []}, {"learned table": [], "rope": []}
    for seed in seeds:  # a seed draws the weights and the text order of both models
        for name, switches in (("learned table", {}), ("rope", {"position_embedding_type": "rope"})):
            model = model_of(seed, **switches)
            train(model, pair_batches(docs, BATCH, length, seed=seed), STEPS, lr=1e-3)
            at = {n: mean_mlm_loss(model, b) for n, b in scores.items()}
            at_twice[name].append(at[2 * length])
            rise[name].append(at[2 * length] - at[length])
            print(
                f"seed {seed}, {name:<13}: validation MLM loss at {length} tokens {at[length]:.3f}, at {2 * length} "
                f"tokens {at[2 * length]:.3f} ({rise[name][-1]:+.3f})"
            )
    longer = compare(at_twice["rope"], at_twice["learned table"], paired=True)
    change = compare(rise["rope"], rise["learned table"], paired=True)
    print(
        f"only the {touched} rows the sequences reached learn; at twice the training length the learned model reads "
        "untrained rows, the rotary model only offsets it has not seen so far apart. Its loss at twice the length, "
        "rotary against learned: "
        + longer.says(
            lower="rotary reads twice the training length better than the learned table",
            higher="the learned table reads twice the training length better than rotary",
        )
    )
    print(
        f"the change of loss from {length} to {2 * length} tokens, rotary against learned: "
        + change.says(
            lower="rotary's loss rises less (or falls more) past the training length",
            higher="rotary's loss rises more (or falls less) past the training length",
        )
    )


def exercise_3() -> None:
    "Parameters and step time of mini unshared, shared, and shared at twice the depth."
    header("exercise 3: share_layers at twice the depth")
    batch = next(pair_batches(documents("train", 40), 4 if QUICK else 8, 128))
    found = {}
    for name, switches in (
        ("4 layers", {}),
        ("4 layers, shared", {"share_layers": True}),
        ("8 layers, shared", {"share_layers": True, "num_hidden_layers": 8}),
    ):
        torch.manual_seed(0)
        model = BertForPreTraining(BertConfig.from_preset("mini", **switches))
        times = []
        for _ in range(3 if QUICK else 6):  # the first is a warm-up
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
        found[name] = parameters(model), times[1:]
        print(
            f"{name:<17}: {found[name][0]:>9,} parameters, fastest training step "
            f"{min(found[name][1]) * 1000:5.0f} ms (batch {len(batch['input_ids'])} x 128)"
        )
    (full, full_times), (shared, shared_times), (deep, deep_times) = found.values()
    full_time, shared_time, deep_time = min(full_times), min(shared_times), min(deep_times)
    slower = compare([1000 * t for t in deep_times], [1000 * t for t in shared_times], unit="timed steps", fmt=".0f")
    print(
        f"sharing cuts the parameters to {shared / full:.0%}; doubling the shared depth changes them by "
        f"{deep - shared:+,} and multiplies the step's fastest time by {deep_time / shared_time:.2f} (sharing alone: "
        f"{shared_time / full_time:.2f}); the deeper shared step's time in ms against the shallower one's: "
        + slower.says(
            lower="faster (unexpected)",
            higher="sharing saves parameters, not compute, since every depth still runs its layer",
        )
    )


def exercise_4() -> None:
    "Two short runs, NSP pairs and sentence-order pairs, each scored on its own task's static pairs."
    header("exercise 4: NSP against sentence-order prediction")
    docs, valid = documents("train", 60), documents("validation", 20)
    above = {}
    for pairing in ("segments", "sop"):
        model = model_of()
        train(model, pair_batches(docs, BATCH, 64, pairing=pairing), STEPS, lr=1e-3)
        dataset = PretrainingDataset(valid, tokenizer(), 64, seed=12345, pairing=pairing, static=True)
        batches = 4 if QUICK else None
        scores = validation_metrics(model, pretraining_dataloader(dataset, 64, shuffle=False), batches)
        pairs = min(len(dataset), 64 * batches) if batches else len(dataset)
        hits = round(scores["nsp_accuracy"] * pairs)  # the pairs' hits, from the accuracy and their count
        above[pairing] = against([1.0] * hits + [0.0] * (pairs - hits), 0.5, unit="pairs")
        task = "NSP (random B)" if pairing == "segments" else "SOP (swapped)"
        print(
            f"{task:<15} after {STEPS} steps: accuracy {scores['nsp_accuracy']:.3f} on {pairs:,} validation pairs, "
            f"MLM perplexity {scores['mlm_perplexity']:.1f}; against chance: "
            + above[pairing].says(lower="below chance", higher="above chance")
        )
    left = [name for name, pairing in (("NSP", "segments"), ("SOP", "sop")) if above[pairing].outcome == "higher"]
    print(
        {
            0: "neither task has left chance yet: train longer",
            1: f"only {''.join(left)} has left chance",
            2: "both tasks have left chance",
        }[len(left)]
        + (
            ": a random B is usually about another topic, which word statistics alone give away, while the order "
            "of two consecutive segments of one text needs coherence. What SOP teaches is what NSP lets a model skip"
            if left == ["NSP"]
            else ""
        )
    )


if __name__ == "__main__":
    cli(__name__)
