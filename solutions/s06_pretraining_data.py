"""Worked solutions of notebook 06's exercises (pre-training data): Google's fixed number of masks per sequence,
pairs without short targets, whole-word masking put to a fair test, and RoBERTa's packed rows against pairs.

`python solutions/s06_pretraining_data.py` runs them all; `BERTLIB_QUICK=1` uses the first documents of the
splits and trains the models of exercise 3 for fewer steps.
"""

from collections import Counter

import torch
from common import QUICK, documents, header, mean_mlm_loss, pair_batches, run_all, static_batches, tokenizer, train

from bertlib import BertConfig, BertForPreTraining, PretrainingDataset
from bertlib.data.batching import LengthGroupedSampler, padding_waste
from bertlib.data.packed import PackedDataset
from bertlib.data.tokenizer import MASK_ID, SPECIAL_IDS

MAX_PREDICTIONS = 20  # Google's max_predictions_per_seq for sequences of 128


def mask_exactly(
    input_ids: torch.Tensor,
    special: torch.Tensor,
    vocab_size: int,
    generator: torch.Generator,
    mlm_probability: float = 0.15,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Google's masking: exactly min(20, max(1, round(0.15 x length))) of the ordinary tokens of one sequence
    (its length counts [CLS] and [SEP], as `create_pretraining_data.py` does), then the 80/10/10 rule."""
    candidates = (~special).nonzero().flatten()
    k = min(MAX_PREDICTIONS, max(1, round(mlm_probability * len(input_ids))), len(candidates))
    picked = candidates[torch.randperm(len(candidates), generator=generator)[:k]]
    labels = torch.full_like(input_ids, -100)
    labels[picked] = input_ids[picked]
    masked = input_ids.clone()
    fate = torch.rand(k, generator=generator)
    masked[picked[fate < 0.8]] = MASK_ID
    randomised = picked[(fate >= 0.8) & (fate < 0.9)]  # the course tokenizer's special tokens are its first ids
    masked[randomised] = torch.randint(len(SPECIAL_IDS), vocab_size, (len(randomised),), generator=generator)
    return masked, labels


def _describe(name: str, counts: list[int]) -> None:
    histogram = Counter(min(c // 5, 5) for c in counts)
    bars = ", ".join(f"{5 * b}-{5 * b + 4 if b < 5 else '':<2}: {histogram[b] / len(counts):5.1%}" for b in range(6))
    t = torch.tensor(counts, dtype=torch.float)
    print(f"{name:<30} mean {t.mean():5.2f}, std {t.std():4.2f}, min {int(t.min())}, max {int(t.max())}; {bars}")


def exercise_1() -> None:
    "Masked tokens per sequence: a coin per token against Google's exact count."
    header("exercise 1: exactly round(0.15 x n) masks per sequence, at most 20")
    dataset = PretrainingDataset(documents("train", 60), tokenizer(), 128, seed=0)
    generator = torch.Generator().manual_seed(0)
    ours, google = [], []
    for i in range(min(len(dataset), 1000 if QUICK else 10000)):
        item = dataset[i]
        ours.append(int((item["labels"] != -100).sum()))
        ids = torch.tensor(
            [
                dataset.cls_id,
                *dataset.examples[i].tokens_a,
                dataset.sep_id,
                *dataset.examples[i].tokens_b,
                dataset.sep_id,
            ]
        )
        special = torch.isin(ids, torch.tensor(SPECIAL_IDS))
        google.append(int((mask_exactly(ids, special, dataset.vocab_size, generator)[1] != -100).sum()))
    print(f"{len(ours):,} sequences of up to 128 tokens; masked tokens per sequence:")
    _describe("a coin per token (ours, HF's)", ours)
    _describe("exact count (Google's)", google)
    print(
        f"about the same mean; Google's count depends only on a sequence's length and stops at {MAX_PREDICTIONS}, "
        f"while a coin per token also varies between sequences of the same length (up to {max(ours)} here), so "
        f"two sequences of the same length may teach very different amounts"
    )


def exercise_2() -> None:
    "Pairs per epoch and padding with and without the 10% of short targets."
    header("exercise 2: short_seq_prob=0")
    docs = documents("train", 120)
    for short in (0.1, 0.0):
        dataset = PretrainingDataset(docs, tokenizer(), 128, seed=0, short_seq_prob=short)
        lengths = dataset.lengths()
        random_order = LengthGroupedSampler(lengths, 32, group_by_length=False).order()
        grouped = LengthGroupedSampler(lengths, 32).order()
        print(
            f"short_seq_prob={short}: {len(dataset):,} pairs, mean length {sum(lengths) / len(lengths):.1f}; "
            f"padding at batch 32: {padding_waste(lengths, random_order, 32):.1%} in random order, "
            f"{padding_waste(lengths, grouped, 32):.1%} grouped by length"
        )
    print(
        "without short targets the pairs are fuller: fewer of them for the same text, and less padding in random "
        "order (grouping by length removes most of it either way); but the model never sees the short inputs "
        "that fine-tuning will give it"
    )


def exercise_3() -> None:
    "Two tiny models, one trained with whole-word masks: each scored on both kinds of static masks."
    header("exercise 3: whole-word masking against masking pieces, compared fairly")
    steps, batch, length = (20, 8, 64) if QUICK else (2000, 16, 128)
    docs, valid = documents("train", 60), documents("validation", 20)
    scores = {wwm: static_batches(valid, 32, length, 4, whole_word_mask=wwm) for wwm in (False, True)}
    for wwm in (False, True):
        torch.manual_seed(0)
        model = BertForPreTraining(BertConfig.from_preset("tiny" if QUICK else "mini", vocab_size=8192))
        train(model, pair_batches(docs, batch, length, whole_word_mask=wwm), steps, lr=1e-3)
        print(
            f"trained with {'whole-word' if wwm else 'piece'} masks ({steps} steps): validation MLM loss on piece "
            f"masks {mean_mlm_loss(model, scores[False]):.3f}, on whole-word masks "
            f"{mean_mlm_loss(model, scores[True]):.3f}"
        )
    print(
        "compare the models on the same masks (a column), never each on its own kind (a diagonal): whole-word "
        "masks hide the rest of a word too, which makes them harder for a model that has learned words, so a "
        "model scored on them looks worse while it may have learned more. And the masks only serve the "
        "pre-training: fine-tuning never masks, so the fairest test of the two is a fine-tuned task"
    )


def exercise_4() -> None:
    "RoBERTa's packed rows (bertlib.data.packed, notebook 11) against NSP pairs of the same text."
    header("exercise 4: packed full-length rows without NSP, against pairs")
    docs = documents("train", 60)
    pairs = PretrainingDataset(docs, tokenizer(), 128, seed=0)
    packed = PackedDataset(docs, tokenizer(), 128, seed=0)
    for name, dataset in (("pairs (NSP)", pairs), ("packed rows (RoBERTa)", packed)):
        lengths = dataset.lengths()
        item = dataset[0]
        order = LengthGroupedSampler(lengths, 32, group_by_length=False).order()
        print(
            f"{name:<22} {len(dataset):6,} rows, {sum(lengths) / len(lengths):5.1f} tokens per row, padding "
            f"{padding_waste(lengths, order, 32):5.1%} at batch 32 in random order; keys {sorted(item)}; "
            f"segment 1 used: {bool(item['token_type_ids'].any())}"
        )
    crossing = sum(bool((packed[i]["input_ids"][1:-1] == packed.sep_id).any()) for i in range(len(packed)))
    print(f"packed rows that run from one document into the next: {crossing:,}")
    print(
        "what changes: the dataset cuts one stream of tokens (documents joined by [SEP]) into full rows instead "
        "of drawing pairs, so it needs no documents to draw from and no labels; the collator drops "
        "next_sentence_label and segment 1, and pads nothing; the objective drops NSP, and the pooler is unused"
    )


def main() -> None:
    "Run every exercise of this notebook, in order."
    run_all(__name__)


if __name__ == "__main__":
    main()
