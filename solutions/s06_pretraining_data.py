"""Worked solutions of notebook 06's exercises (pre-training data): Google's fixed number of masks per sequence,
pairs without short targets, whole-word masking put to a fair test, and RoBERTa's full sentences across documents
as a `pairing="full"` mode of the dataset.

`python solutions/s06_pretraining_data.py` runs them all; `BERTLIB_QUICK=1` uses the first documents of the
splits and trains the models of exercise 3 for fewer steps.
"""

import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence

import torch
from common import (
    MASK_ID,
    QUICK,
    SPECIAL_IDS,
    LengthGroupedSampler,
    PackedDataset,
    child_seed,
    cli,
    documents,
    header,
    mask_tokens,
    mean_mlm_loss,
    padding_waste,
    pair_batches,
    static_batches,
    tokenizer,
    train,
)
from verdict import against, compare

from bertlib import BertConfig, BertForPreTraining, PretrainingDataset, pretraining_dataloader

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
    tails = [str(5 * b + 4) for b in range(5)] + [""]  # the last bin is open
    bars = ", ".join(f"{5 * b}-{tail:<2}: {histogram[b] / len(counts):5.1%}" for b, tail in enumerate(tails))
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
    by_length = defaultdict(lambda: ([], []))
    for i, (coin, exact) in enumerate(zip(ours, google, strict=True)):
        by_length[dataset.examples[i].seq_len][0].append(coin)
        by_length[dataset.examples[i].seq_len][1].append(exact)
    spread = [[statistics.pstdev(counts[k]) for counts in by_length.values() if len(counts[k]) > 1] for k in range(2)]
    # the exact count is a function of the length, so its spread within a length is a fixed reference, 0
    coin = against(spread[0], statistics.mean(spread[1]), unit="lengths", fmt=".2f")
    print(
        f"means {statistics.mean(ours):.2f} (coin) and {statistics.mean(google):.2f} (exact); among sequences of the "
        f"same length the count varies with a std of {statistics.mean(spread[0]):.2f} for the coin and "
        f"{statistics.mean(spread[1]):.2f} for the exact count, whose largest is {max(google)} (cap "
        f"{MAX_PREDICTIONS}) where the coin reaches {max(ours)}; the coin's spread against the exact count's: "
        + coin.says(
            lower="the coin varies less (unexpected)",
            higher="the exact count depends on the length alone, while the coin lets two sequences of one length "
            "teach different amounts",
        )
    )


def exercise_2() -> None:
    "Pairs per epoch and padding with and without the 10% of short targets."
    header("exercise 2: short_seq_prob=0")
    docs = documents("train", 120)
    found, short_inputs = {}, {}
    for short in (0.1, 0.0):
        dataset = PretrainingDataset(docs, tokenizer(), 128, seed=0, short_seq_prob=short)
        lengths = dataset.lengths()
        random_order = LengthGroupedSampler(lengths, 32, group_by_length=False).order()
        grouped = LengthGroupedSampler(lengths, 32).order()
        found[short] = (
            len(dataset),
            padding_waste(lengths, random_order, 32),
            padding_waste(lengths, grouped, 32),
            sum(n <= 64 for n in lengths) / len(lengths),
        )
        short_inputs[short] = [float(n <= 64) for n in lengths]
        print(
            f"short_seq_prob={short}: {len(dataset):,} pairs, mean length {sum(lengths) / len(lengths):.1f}, "
            f"{found[short][3]:.1%} of them 64 tokens or shorter; padding at batch 32: {found[short][1]:.1%} in "
            f"random order, {found[short][2]:.1%} grouped by length"
        )
    (pairs, random_pad, grouped_pad, short_share), (pairs0, random_pad0, grouped_pad0, short_share0) = found.values()
    fewer = compare(short_inputs[0.0], short_inputs[0.1], unit="pairs", fmt=".2%")
    print(
        f"without short targets: {pairs0 / pairs - 1:+.1%} pairs for the same text; padding in random order from "
        f"{random_pad:.1%} to {random_pad0:.1%}, grouped by length from {grouped_pad:.1%} to {grouped_pad0:.1%}; "
        f"inputs of 64 tokens or fewer from {short_share:.1%} to {short_share0:.1%}: "
        + fewer.says(
            lower="the model sees fewer of the short inputs that fine-tuning will give it",
            higher="the model sees more short inputs (unexpected)",
        )
    )


def _kind(whole_word: bool) -> str:
    return "whole-word" if whole_word else "piece"


def exercise_3() -> None:
    "Tiny models trained with whole-word masks and with piece masks, from the same seeds, scored on both kinds."
    header("exercise 3: whole-word masking against masking pieces, compared fairly")
    steps, batch, length = (20, 8, 64) if QUICK else (2000, 16, 128)
    seeds = (0, 1) if QUICK else (0, 1, 2)  # one run a side cannot tell a difference of 0.01 from the seed's noise
    docs, valid = documents("train", 60), documents("validation", 20)
    scores = {wwm: static_batches(valid, 32, length, 4, whole_word_mask=wwm) for wwm in (False, True)}
    losses = {(wwm, kind): [] for wwm in (False, True) for kind in (False, True)}  # (trained with, scored on)
    for seed in seeds:
        for wwm in (False, True):  # a seed draws the same weights and the same text order for both
            torch.manual_seed(seed)
            model = BertForPreTraining(BertConfig.from_preset("tiny" if QUICK else "mini", vocab_size=8192))
            train(model, pair_batches(docs, batch, length, seed=seed, whole_word_mask=wwm), steps, lr=1e-3)
            for kind in (False, True):
                losses[wwm, kind].append(mean_mlm_loss(model, scores[kind]))
            print(
                f"seed {seed}, trained with {_kind(wwm)} masks ({steps} steps): validation MLM loss on piece masks "
                f"{losses[wwm, False][-1]:.3f}, on whole-word masks {losses[wwm, True][-1]:.3f}"
            )
    # the fair comparison reads a column (both models on the same masks); a diagonal mixes the model with the test
    columns = {kind: compare(losses[True, kind], losses[False, kind], paired=True) for kind in (False, True)}
    for kind, verdict in columns.items():
        print(
            f"on {_kind(kind)} masks, the whole-word model's loss against the piece model's: "
            + verdict.says(lower="lower", higher="higher")
        )
    harder = compare(losses[False, True], losses[False, False], paired=True)
    diagonal = statistics.mean(losses[True, True]) - statistics.mean(losses[False, False])
    print(
        f"each scored on its own kind (the unfair diagonal) the whole-word model is {diagonal:+.3f} off; the piece "
        "model's loss on whole-word masks against piece masks: "
        + harder.says(lower="whole-word masks are easier to predict", higher="whole-word masks are harder to predict")
    )
    outcomes = {verdict.outcome for verdict in columns.values()}
    if outcomes in ({"lower"}, {"higher"}):
        print(f"on both kinds of masks the whole-word model's loss is {outcomes.pop()}: a fair verdict at this size")
    else:
        print(
            "the columns disagree, or this run cannot tell the two models apart, so the masks alone do not decide; "
            "they only serve the pre-training (fine-tuning never masks), so the fairest test of the two is a "
            "fine-tuned task"
        )


def full_sentence_rows(docs: Sequence[Sequence[Sequence[int]]], width: int, sep_id: int) -> list[list[int]]:
    """RoBERTa's FULL-SENTENCES rows: consecutive whole sentences packed into rows of at most `width` tokens, running
    on from one document into the next with `sep_id` between them; a sentence longer than a row is cut."""
    rows, row = [], []

    def flush() -> None:
        nonlocal row
        if row and row[-1] == sep_id:  # the row's own closing [SEP] ends it
            row.pop()
        if row:
            rows.append(row)
        row = []

    for doc in docs:
        if row:  # the document before ends here
            if len(row) + 1 > width:
                flush()
            else:
                row.append(sep_id)
        for sentence in doc:
            for start in range(0, len(sentence), width):
                piece = list(sentence[start : start + width])
                if len(row) + len(piece) > width:
                    flush()
                row.extend(piece)
    flush()
    return rows


class FullSentencesDataset(PretrainingDataset):
    """`PretrainingDataset` with the mode that exercise 4 adds, `pairing="full"` (RoBERTa's FULL-SENTENCES): item `i`
    is one row of whole sentences, `[CLS] ... [SEP]`, with no segment B and no `next_sentence_label`. The three
    methods below are what the mode changes (it overrides the dataset's hook `_make_examples`, where the pairs are
    made); the masking and the collator stay as they are. Any other pairing is the library's."""

    def __init__(self, docs: Sequence[Sequence[Sequence[int]]], tokenizer, max_seq_len: int = 128, **options):
        self.docs = docs
        super().__init__(docs, tokenizer, max_seq_len, **options)

    def _make_examples(self, epoch: int) -> list:
        if self.pairing != "full":
            return super()._make_examples(epoch)
        return full_sentence_rows(self.docs, self.max_seq_len - 2, self.sep_id)  # the same rows every epoch

    def lengths(self) -> list[int]:
        if self.pairing != "full":
            return super().lengths()
        return [len(row) + 2 for row in self.examples]

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if self.pairing != "full":
            return super().__getitem__(index)
        ids = torch.tensor([self.cls_id, *self.examples[index], self.sep_id])
        special = (ids == self.cls_id) | (ids == self.sep_id)  # the [SEP]s between documents are never masked
        generator = torch.Generator().manual_seed(child_seed(self.seed, self.epoch, index))  # new masks each epoch
        masked, labels = mask_tokens(
            ids,
            special,
            mask_token_id=self.mask_id,
            vocab_size=self.vocab_size,
            special_token_ids=self.special_ids,
            mlm_probability=self.mlm_probability,
            generator=generator,
        )
        return {"input_ids": masked, "token_type_ids": torch.zeros_like(masked), "labels": labels}


FULL, PACKED = 'pairing="full"', "packed (notebook 11)"


def exercise_4() -> None:
    'The `pairing="full"` mode built, against NSP pairs and the library\'s packed rows of the same text.'
    header('exercise 4: pairing="full", whole sentences across documents without NSP, against pairs')
    docs = documents("train", 60)
    datasets = {
        "pairs (NSP)": PretrainingDataset(docs, tokenizer(), 128, seed=0),
        FULL: FullSentencesDataset(docs, tokenizer(), 128, seed=0, pairing="full"),
        PACKED: PackedDataset(docs, tokenizer(), 128, seed=0),
    }
    full, packed = datasets[FULL], datasets[PACKED]
    found = {}
    for name, dataset in datasets.items():
        lengths = dataset.lengths()
        item = dataset[0]
        order = LengthGroupedSampler(lengths, 32, group_by_length=False).order()
        found[name] = padding_waste(lengths, order, 32)
        print(
            f"{name:<21} {len(dataset):6,} rows, {sum(lengths) / len(lengths):5.1f} tokens per row, padding "
            f"{found[name]:5.1%} at batch 32 in random order; keys {sorted(item)}; segment 1 used: "
            f"{bool(item['token_type_ids'].any())}"
        )
    crossing = {
        name: sum(bool((d[i]["input_ids"][1:-1] == d.sep_id).any()) for i in range(len(d)))
        for name, d in (("full", full), ("packed", packed))
    }
    # where the rows begin in the documents' stream of tokens (each document followed by [SEP], as packed makes it)
    bounds = _sentence_bounds(docs)
    mid = {
        "full": sum(start not in bounds for start in _row_starts(full.examples, packed.stream.tolist(), full.sep_id)),
        "packed": sum(i * packed.width not in bounds for i in range(len(packed))),
    }
    for name, dataset in (("full", full), ("packed", packed)):
        print(
            f"{name:<7} rows that run from one document into the next: {crossing[name]:,}; rows that begin inside "
            f"a sentence: {mid[name]:,} of {len(dataset):,}"
        )
    batch = next(iter(pretraining_dataloader(full, 8, seed=0)))
    torch.manual_seed(0)
    out = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=full.vocab_size))(
        batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
    )
    print(
        f"the library's loader and collator, unchanged, batch the full rows: keys {sorted(batch)}; the model's loss "
        f"on them is {'MLM alone' if out.nsp_loss is None else 'MLM + NSP'} ({out.loss:.3f})"
    )
    print(
        "what the mode changed: how examples are made (rows of whole sentences, "
        f"{'crossing documents' if crossing['full'] else 'within documents'}, instead of pairs), their lengths, and "
        "the item (one segment, no next_sentence_label); what stayed: the masking and the collator, which pads the "
        "keys an item has. Against the library's packed rows, which cut the stream anywhere: "
        f"{mid['packed']:,} of its rows begin inside a sentence, {mid['full']:,} of the full rows (the rest of a "
        f"sentence longer than a row), which pay for "
        f"that with {found[FULL] - found[PACKED]:+.1%} padding"
    )


def _sentence_bounds(docs: Sequence[Sequence[Sequence[int]]]) -> set[int]:
    "The offsets in the documents' stream (each document followed by [SEP]) where a sentence or a [SEP] begins."
    bounds, position = set(), 0
    for doc in docs:
        for sentence in doc:
            bounds.add(position)
            position += len(sentence)
        bounds.add(position)
        position += 1
    return bounds


def _row_starts(rows: list[list[int]], stream: list[int], sep_id: int) -> list[int]:
    "Where each row begins in `stream`: the rows are its consecutive pieces, but for a [SEP] dropped at a row's end."
    starts, position = [], 0
    for row in rows:
        if stream[position] == sep_id and row[0] != sep_id:
            position += 1
        if stream[position : position + len(row)] != row:
            raise ValueError(f"row {len(starts)} is not the next piece of the stream")
        starts.append(position)
        position += len(row)
    return starts


if __name__ == "__main__":
    cli(__name__)
