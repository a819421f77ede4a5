"""Worked solutions of notebook 08's exercises (evaluation): the noise of the static masks, a bigram baseline, and
sentences where a far word changes the course model's guess.

`python solutions/s08_evaluation.py` runs them all on the course model; `BERTLIB_QUICK=1` scores a slice of the
validation split.
"""

import math
import statistics
from itertools import islice

import numpy as np
from common import (
    EVAL_SEED,
    QUICK,
    attention_maps,
    cli,
    corpus,
    course_model,
    header,
    masked_token_losses,
    unigram_baseline,
)
from torch.utils.data import DataLoader
from verdict import compare

from bertlib import PretrainingDataset, fill_mask, pretraining_dataloader, validation_metrics

BATCHES = 4 if QUICK else None  # batches of 64 validation pairs; None: the whole split


def validation_loader(seed: int) -> DataLoader:
    "The validation split with static pairs and masks drawn from `seed` (the library's is `EVAL_SEED`)."
    _, tokenizer = course_model()
    dataset = PretrainingDataset(corpus("validation"), tokenizer, 128, seed=seed, static=True)
    return pretraining_dataloader(dataset, 64, shuffle=False)


def exercise_1() -> None:
    "The course model scored on masks and pairs drawn from four seeds."
    header("exercise 1: the same model on masks drawn from other seeds")
    model, _ = course_model()
    rows = {}
    for seed in (EVAL_SEED, 1, 2, 3):
        rows[seed] = validation_metrics(model, validation_loader(seed), BATCHES)
        s = rows[seed]
        print(
            f"seed {seed:>5}: perplexity {s['mlm_perplexity']:6.2f}, top-1 {s['mlm_accuracy']:.4f}, "
            f"NSP {s['nsp_accuracy']:.4f}"
        )
    spread = {}
    for metric in ("mlm_perplexity", "mlm_accuracy", "nsp_accuracy"):
        values = [r[metric] for r in rows.values()]
        spread[metric] = max(values) - min(values)
        print(f"{metric:<15} spread (largest - smallest) {spread[metric]:.4f}")
    print(
        f"that is the noise floor: between runs scored on different masks, a difference of perplexity under "
        f"{spread['mlm_perplexity']:.2f}, of top-1 accuracy under {spread['mlm_accuracy']:.2%} or of NSP accuracy "
        f"under {spread['nsp_accuracy']:.2%} means nothing; runs scored on the same static masks are compared "
        f"without it"
    )


class BigramBaseline:
    """Predicts a masked token from the token before it in the input: the count of (before, token) in the train
    ids, mixed with the add-one unigram (`weight` on the bigram), which also serves when the token before is a
    mask or was never seen."""

    def __init__(self, train_ids: np.ndarray, vocab_size: int, weight: float = 0.7):
        ids = train_ids.astype(np.int64)
        self.vocab_size, self.weight = vocab_size, weight
        unigram = np.bincount(ids, minlength=vocab_size) + 1.0
        self.unigram = unigram / unigram.sum()
        pairs, counts = np.unique(ids[:-1] * vocab_size + ids[1:], return_counts=True)
        self.pair_counts = dict(zip(pairs.tolist(), counts.tolist(), strict=True))
        self.before_counts = np.bincount(ids[:-1], minlength=vocab_size)
        self.best_after = {}  # the most frequent token after each token
        # not a verdict: the most frequent pair last, so that it wins the table
        for pair, _ in sorted(self.pair_counts.items(), key=lambda item: item[1]):
            self.best_after[pair // vocab_size] = pair % vocab_size

    def probability(self, before: int, token: int) -> float:
        seen = self.before_counts[before]
        if not seen:
            return float(self.unigram[token])
        bigram = self.pair_counts.get(before * self.vocab_size + token, 0) / seen
        return self.weight * bigram + (1 - self.weight) * float(self.unigram[token])

    def best(self, before: int) -> int:
        return self.best_after.get(before, int(self.unigram.argmax()))

    def token_losses(self, loader: DataLoader, max_batches: int | None) -> dict[str, list[float]]:
        "Per masked token of `loader`: the unigram's and the bigram's negative log-probability, the bigram's hit."
        found = {"unigram": [], "bigram": [], "hit": []}
        for batch in islice(loader, max_batches):
            rows, cols = (batch["labels"] != -100).nonzero(as_tuple=True)
            for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
                before, target = int(batch["input_ids"][r, c - 1]), int(batch["labels"][r, c])
                found["unigram"].append(-math.log(self.unigram[target]))
                found["bigram"].append(-math.log(self.probability(before, target)))
                found["hit"].append(float(self.best(before) == target))
        return found


def exercise_2() -> None:
    "Unigram, bigram and the course model on the same validation batches."
    header("exercise 2: a bigram baseline")
    model, tokenizer = course_model()
    train_ids = corpus("train").ids
    loader = validation_loader(EVAL_SEED)
    vocab_size = tokenizer.get_vocab_size()
    per_token = BigramBaseline(train_ids, vocab_size).token_losses(loader, BATCHES)
    results = {
        "unigram": unigram_baseline(train_ids, islice(loader, BATCHES), vocab_size),
        "bigram (the token before)": {
            "mlm_perplexity": math.exp(statistics.mean(per_token["bigram"])),
            "mlm_accuracy": statistics.mean(per_token["hit"]),
        },
        "course model": validation_metrics(model, loader, BATCHES),
    }
    for name, s in results.items():
        print(f"{name:<27} perplexity {s['mlm_perplexity']:8.2f}, top-1 {s['mlm_accuracy']:.3f}")
    unigram, bigram, model_scores = (s["mlm_perplexity"] for s in results.values())
    # on the same masked tokens: the mean difference of their losses is the log of the ratio of the perplexities
    before = compare(per_token["bigram"], per_token["unigram"], paired=True, unit="masked tokens")
    model_losses = masked_token_losses(model, islice(loader, BATCHES))
    both = compare(model_losses, per_token["bigram"], paired=True, unit="masked tokens")
    print(
        f"the token before alone cuts the unigram's perplexity by {1 - bigram / unigram:.0%}; the bigram's loss "
        "against the unigram's: "
        + before.says(lower="it beats the unigram", higher="it does not beat the unigram here")
    )
    print(
        f"the model, which reads both sides of the mask and both segments, cuts the bigram's by "
        f"{1 - model_scores / bigram:.0%}; the model's loss against the bigram's: "
        + both.says(
            lower="it beats the bigram",
            higher="it does not beat the bigram: it is still on the plateau where a small BERT guesses little "
            "better than word statistics",
        )
    )


SWAPS = {
    "he": "she",
    "she": "he",
    "his": "her",
    "her": "his",
    "war": "game",
    "game": "war",
    "city": "river",
    "river": "city",
    "film": "song",
    "song": "film",
    "army": "team",
    "team": "army",
    "church": "school",
    "school": "church",
    "king": "president",
    "season": "battle",
    "battle": "season",
    "ship": "album",
    "album": "ship",
    "species": "band",
    "band": "species",
}


def exercise_3() -> None:
    "Masked words whose top guess changes when one word at least eight tokens away is swapped for another."
    header("exercise 3: a far word that changes the guess")
    model, tokenizer = course_model()
    sentences = [
        " ".join(tokenizer.decode(s).split())
        for doc in corpus("validation").documents()[: 40 if QUICK else 60]
        for s in doc
        if 12 <= len(s) <= 40
    ]
    found = []
    for sentence in sentences:
        words = sentence.split()
        for j, word in enumerate(words):
            if word not in SWAPS:
                continue
            for i in range(len(words)):
                if abs(i - j) < 8 or not words[i].isalpha() or words[i] in SWAPS:
                    continue
                masked = words[:i] + ["[MASK]"] + words[i + 1 :]
                changed = masked[:j] + [SWAPS[word]] + masked[j + 1 :]
                before, after = (fill_mask(model, tokenizer, " ".join(w), top_k=1)[0][0] for w in (masked, changed))
                if before[0] != after[0]:
                    found.append((" ".join(masked), word, SWAPS[word], before, after))
                    break
            if len(found) >= 3:
                break
        if len(found) >= 3:
            break
    above = 0
    for text, old, new, before, after in found:
        maps = attention_maps(model, tokenizer, text)
        query = maps.tokens.index("[MASK]")
        key = maps.tokens.index(old)
        share = maps.attentions[:, :, query, key].mean(1)  # per layer, averaged over heads
        uniform = 1 / len(maps.tokens)
        above += bool((share > uniform).any())
        print(
            f"{text}\n   '{old}' -> '{new}': top guess {before[0]} ({before[1]:.2f}) -> {after[0]} ({after[1]:.2f}); "
            f"attention of [MASK] on '{old}', mean over heads per layer: "
            + ", ".join(f"{v:.3f}" for v in share.tolist())
            + f" (uniform would be {uniform:.3f})"
        )
    if found:
        print(
            f"in {above} of the {len(found)} sentences the mask attends to the far word more than uniformly in some "
            "layer"
            + (
                ""
                if above == len(found)
                else "; where it does not, the word reaches the mask through other tokens' vectors, layer by layer, "
                "which the attention of one layer does not show"
            )
        )
    else:
        print("no swap changed a top guess in these sentences; search more of the split")


if __name__ == "__main__":
    cli(__name__)
