"""Fine-tuning features: task examples turned into what a head reads and back. A sentence or a pair becomes
`[CLS] a [SEP] b [SEP]` with its class; a tagged sentence gets its word's tag on the first piece of each word
and -100 on the others; a SQuAD question and a long paragraph become overlapping windows, each with the
answer's first and last token (or `[CLS]` when the window does not hold the whole answer). `best_spans`
goes the other way: it searches every window of a question for the best span and maps it back to characters.

Written by hand; the fine-tuning notebook presents it.
"""

__all__ = [
    "MAX_QUERY_LEN",
    "DOC_STRIDE",
    "MAX_ANSWER_LEN",
    "N_BEST",
    "TaskFeatures",
    "truncate_pair",
    "encode_classification",
    "encode_tagging",
    "squad_windows",
    "encode_task",
    "word_predictions",
    "best_spans",
]

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tokenizers import Tokenizer
from torch.utils.data import Dataset

from ..data.tokenizer import CLS, SEP
from ..model.bert import IGNORE_INDEX
from .examples import TASKS, ClassificationExample, Example, SquadExample, TaggedSentence

MAX_QUERY_LEN = 64  # question pieces kept (BERT's run_squad.py)
DOC_STRIDE = 128  # pieces between the starts of two windows over one paragraph (run_squad.py)
MAX_ANSWER_LEN = 30  # the longest answer, in pieces, that span search proposes
N_BEST = 20  # start and end candidates per window


@dataclass
class TaskFeatures(Dataset):
    """The encoded items of one task split: `items[i]` holds lists of ints (the model's inputs and targets),
    `meta[i]` what maps predictions back to the examples (word of each piece, window offsets)."""

    items: list[dict[str, Any]]
    meta: list[dict[str, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {key: torch.tensor(value) for key, value in self.items[i].items()}

    def lengths(self) -> list[int]:
        return [len(item["input_ids"]) for item in self.items]


def _ids(tokenizer: Tokenizer, token: str) -> int:
    return tokenizer.token_to_id(token)


def truncate_pair(a: Sequence[int], b: Sequence[int], room: int) -> tuple[list[int], list[int]]:
    """Cut the pieces of a pair to `room` in all, from their ends: the shorter keeps all it has if the longer
    can give way, else half the room, rounded down (the first when they are as long). HF's `truncation=True`
    ("longest_first")."""
    if len(a) + len(b) <= room:
        return list(a), list(b)
    short = min(len(a), len(b))
    keep = short if short <= room - short else room // 2
    return (list(a[:keep]), list(b[: room - keep])) if len(a) <= len(b) else (list(a[: room - keep]), list(b[:keep]))


def encode_classification(example: ClassificationExample, tokenizer: Tokenizer, max_seq_len: int) -> dict[str, Any]:
    "`[CLS] text [SEP]` (or `[CLS] text [SEP] text_pair [SEP]`), at most `max_seq_len` pieces, and the label."
    a = tokenizer.encode(example.text, add_special_tokens=False).ids
    b = [] if example.text_pair is None else tokenizer.encode(example.text_pair, add_special_tokens=False).ids
    a, b = truncate_pair(a, b, max_seq_len - (2 if example.text_pair is None else 3))
    cls, sep = _ids(tokenizer, CLS), _ids(tokenizer, SEP)
    second = b + [sep] if example.text_pair is not None else []
    return {
        "input_ids": [cls, *a, sep, *second],
        "token_type_ids": [0] * (len(a) + 2) + [1] * len(second),
        "labels": example.label,
    }


def encode_tagging(
    sentence: TaggedSentence, tokenizer: Tokenizer, max_seq_len: int
) -> tuple[dict[str, Any], list[int | None]]:
    """`[CLS] pieces [SEP]` of a tagged sentence with the tag id on the first piece of each word and -100 on
    the others and on the special tokens; and the word of each piece (None for the special tokens). Pieces
    past `max_seq_len` are cut: their words get no prediction (`word_predictions` tags them O)."""
    encoding = tokenizer.encode(list(sentence.words), is_pretokenized=True, add_special_tokens=False)
    ids, words = encoding.ids[: max_seq_len - 2], encoding.word_ids[: max_seq_len - 2]
    tags = sentence.tag_ids
    labels = [tags[w] if w != (words[i - 1] if i else None) else IGNORE_INDEX for i, w in enumerate(words)]
    item = {
        "input_ids": [_ids(tokenizer, CLS), *ids, _ids(tokenizer, SEP)],
        "token_type_ids": [0] * (len(ids) + 2),
        "labels": [IGNORE_INDEX, *labels, IGNORE_INDEX],
    }
    return item, [None, *words, None]


def _token_span(
    offsets: Sequence[tuple[int, int]], first: int, end: int, start_char: int, end_char: int
) -> tuple[int, int] | None:
    "The pieces `first..end-1` of a context that cover the characters `start_char..end_char-1`, or None."
    if not offsets[first:end] or start_char < offsets[first][0] or end_char > offsets[end - 1][1]:
        return None
    start = next(i for i in range(first, end) if offsets[i][1] > start_char)
    last = next(i for i in reversed(range(first, end)) if offsets[i][0] < end_char)
    return start, last


def squad_windows(
    example: SquadExample,
    tokenizer: Tokenizer,
    max_seq_len: int = 384,
    doc_stride: int = DOC_STRIDE,
    max_query_len: int = MAX_QUERY_LEN,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`[CLS] question [SEP] window [SEP]` for every window of the context: windows as long as fits, each
    starting `doc_stride` pieces after the last, the final one reaching the context's end. Targets: the
    first gold answer's first and last piece in the window, or 0 (`[CLS]`) when it is not wholly inside.
    Returns the items and, per window, the character span of each piece (None outside the context)."""
    question = tokenizer.encode(example.question, add_special_tokens=False).ids[:max_query_len]
    context = tokenizer.encode(example.context, add_special_tokens=False)
    room = max_seq_len - len(question) - 3
    if room < 1:
        raise ValueError(
            f"max_seq_len={max_seq_len} leaves no room for the context after a question of "
            f"{len(question)} pieces; use a longer max_seq_len or a shorter max_query_len"
        )
    if doc_stride < 1:
        raise ValueError(f"doc_stride={doc_stride} must be at least 1")
    n, start, windows = len(context.ids), 0, []
    while True:
        windows.append((start, min(start + room, n)))
        if start + room >= n:
            break
        start += min(doc_stride, room)
    answer = example.answers[0] if example.answers else None
    cls, sep, head = _ids(tokenizer, CLS), _ids(tokenizer, SEP), len(question) + 2
    items, meta = [], []
    for first, end in windows:
        span = None if answer is None else _token_span(context.offsets, first, end, answer.start, answer.end)
        items.append(
            {
                "input_ids": [cls, *question, sep, *context.ids[first:end], sep],
                "token_type_ids": [0] * head + [1] * (end - first + 1),
                "start_positions": 0 if span is None else span[0] - first + head,
                "end_positions": 0 if span is None else span[1] - first + head,
            }
        )
        meta.append({"example_id": example.id, "offsets": [None] * head + list(context.offsets[first:end]) + [None]})
    return items, meta


def encode_task(
    task: str,
    examples: Sequence[Example],
    tokenizer: Tokenizer,
    max_seq_len: int,
    *,
    doc_stride: int = DOC_STRIDE,
    max_query_len: int = MAX_QUERY_LEN,
) -> TaskFeatures:
    "The features of a task's examples (`bertlib.tasks.load.load_task`) for its head (`TASKS[task].kind`)."
    kind = TASKS[task].kind
    items, meta = [], []
    for example in examples:
        if kind in ("sequence", "pair"):
            items.append(encode_classification(example, tokenizer, max_seq_len))
        elif kind == "token":
            item, words = encode_tagging(example, tokenizer, max_seq_len)
            items.append(item)
            meta.append({"word_ids": words})
        else:
            windows, window_meta = squad_windows(example, tokenizer, max_seq_len, doc_stride, max_query_len)
            items += windows
            meta += window_meta
    return TaskFeatures(items, meta)


def word_predictions(
    label_ids: Sequence[int],
    word_ids: Sequence[int | None],
    n_words: int,
    label_names: Sequence[str],
    outside: str = "O",
) -> list[str]:
    """One tag per word from the predictions at the pieces of one sentence: each word takes its first piece's;
    words cut off by truncation get `outside`."""
    tags = [outside] * n_words
    for i, word in enumerate(word_ids):
        if word is not None and (i == 0 or word_ids[i - 1] != word):
            tags[word] = label_names[label_ids[i]]
    return tags


def best_spans(
    start_logits: Sequence[torch.Tensor],
    end_logits: Sequence[torch.Tensor],
    meta: Sequence[dict[str, Any]],
    *,
    n_best: int = N_BEST,
    max_answer_len: int = MAX_ANSWER_LEN,
) -> dict[str, tuple[int, int]]:
    """The answer to each question as the characters `(start, end)` of its context: over all its windows,
    the span of context pieces (start <= end, at most `max_answer_len` pieces) with the highest start + end
    logit, among the `n_best` best starts and ends of each window. `meta` and the logits are per window, in the
    order `squad_windows` made them."""
    best: dict[str, tuple[float, int, int]] = {}
    for starts, ends, window in zip(start_logits, end_logits, meta, strict=True):
        offsets = window["offsets"]
        outside = torch.tensor([o is None for o in offsets] + [True] * (len(starts) - len(offsets)))
        starts = starts.float().masked_fill(outside, -math.inf)
        ends = ends.float().masked_fill(outside, -math.inf)
        k = min(n_best, int((~outside).sum()))
        for s in starts.topk(k).indices.tolist():
            for e in ends.topk(k).indices.tolist():
                score = float(starts[s] + ends[e])
                if s <= e < s + max_answer_len and score > best.get(window["example_id"], (-math.inf,))[0]:
                    best[window["example_id"]] = (score, offsets[s][0], offsets[e][1])
    return {qid: (start, end) for qid, (_, start, end) in best.items()}
