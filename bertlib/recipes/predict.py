"""What a fine-tuned run says about new text: `predict` reads one input as the run was trained to (a classifier the
start of its text or pair, a tagger a long text in windows of whole words, a reader a long paragraph in windows with a
stride) and answers with the task's labels, entities or answer span.

Written by hand; the fine-tuning notebook and the `predict` command use it.
"""

__all__ = ["predict"]

from collections.abc import Sequence
from typing import Any

from tokenizers import Tokenizer
from torch import nn

from ..data.tokenizer import pre_tokenize
from ..model.heads import HEADS
from ..tasks.examples import TASK_NAMES, TASKS, ClassificationExample, SquadExample, TaggedSentence, iob2_entities
from ..tasks.features import MAX_QUERY_LEN, best_spans, encode_task
from ..train.settings import default_doc_stride, default_seq_len
from ..utils.checks import check_choice
from .finetune import item_outputs, query_len, task_predictions

_READS = {
    "sequence": "one text",
    "token": "one text",
    "pair": "two texts (the second with --pair)",
    "span": "a paragraph and a question (--question)",
}


def _check_task(model: nn.Module, task: str) -> None:
    "Raise a one-line ValueError unless `model` was fine-tuned for `task`: the task's head, with its labels."
    check_choice("task", task, TASK_NAMES)

    def fits(name: str) -> bool:
        info = TASKS[name]
        return isinstance(model, HEADS[info.kind]) and (
            info.kind == "span" or getattr(model, "label_names", None) == info.label_names
        )

    if fits(task):
        return
    fitted = next((name for name in TASK_NAMES if fits(name)), None)
    if fitted is not None:
        raise ValueError(f"the model was fine-tuned for {fitted}, not {task}; predict with the task {fitted!r}")
    labels = getattr(model, "label_names", None)
    raise ValueError(
        f"the model is a {type(model).__name__}{f' with the labels {labels}' if labels else ''}, not one fine-tuned "
        f"for {task}; give the model of a {task} fine-tuning run (bertlib.train.factory.load_model(RUN))"
    )


def _leading_text(tokenizer: Tokenizer, text: str, pieces: int) -> tuple[str, int, bool]:
    """The start of `text` that holds its first `pieces` word pieces (all of them, if it has no more), their number,
    and whether that is all of the text; found on ever longer starts, so that a long text is never tokenized past
    what is read. Normalising and WordPiece go word by word, and the first pieces of a word are those of its start,
    so a start of the text holds the text's own pieces up to its last word, which may go on past the cut."""
    size = 8 * pieces + 64  # characters: most words are a few pieces of a few characters
    while True:
        encoding = tokenizer.encode(text[:size], add_special_tokens=False)
        words, everything = encoding.word_ids, size >= len(text)
        sure = len(words) if everything or not words else words.index(words[-1])
        if sure > pieces or (sure == pieces and not everything):
            return text[: encoding.offsets[pieces - 1][1]], pieces, False
        if everything:
            return text, len(words), True
        size *= 4


def _read_texts(tokenizer: Tokenizer, texts: Sequence[str], room: int) -> list[str]:
    """What a window of `room` pieces reads of one text, or of a pair: for a pair, enough of each that `truncate_pair`
    cuts them as it cuts the whole texts (how much each keeps depends on which is the longer when both overflow)."""
    pieces = room
    while True:
        read = [_leading_text(tokenizer, text, pieces) for text in texts]
        wholes = [n for _, n, whole in read if whole]
        # a cut text has more than `pieces` pieces, a whole one at most that many: fewer settles which is the longer
        if len(texts) == 1 or len(wholes) == len(texts) or (wholes and min(wholes) < pieces):
            return [part for part, _, _ in read]
        pieces *= 2


def _word_windows(tokenizer: Tokenizer, words: Sequence[str], room: int) -> list[tuple[int, int]]:
    """Runs of consecutive words, `(first, end)`, whose pieces fit in `room`: the windows a tagger reads a long text
    in. A word of more pieces than a window holds has a window of its own, cut there as training cuts a sentence."""
    encoding = tokenizer.encode(list(words), is_pretokenized=True, add_special_tokens=False)
    per_word = [0] * len(words)
    for word in encoding.word_ids:
        per_word[word] += 1
    windows, first, used = [], 0, 0
    for i, n in enumerate(per_word):
        if used + n > room and i > first:
            windows.append((first, i))
            first, used = i, 0
        used += n
    return [*windows, (first, len(words))]


def _check_inputs(task: str, tokenizer: Tokenizer, text: str, pair: str | None, question: str | None) -> None:
    "Raise a one-line ValueError for inputs a task cannot read: a missing, extra or empty text."
    kind = TASKS[task].kind
    given = {"pair": pair, "question": question}
    wanted = {"pair": "pair", "span": "question"}.get(kind)
    for name, value in given.items():
        if (value is not None) != (name == wanted):
            action = f"leave out --{name}" if value is not None else f"give --{name} too"
            raise ValueError(f"{task} reads {_READS[kind]}: {action}")
    inputs = {"text": text, **({wanted: given[wanted]} if wanted else {})}
    for name, value in inputs.items():
        if _leading_text(tokenizer, value, 1)[1] == 0:
            raise ValueError(f"the {name} is empty (it has no word pieces); give some text")


def predict(
    model: nn.Module,
    tokenizer: Tokenizer,
    task: str,
    text: str,
    *,
    pair: str | None = None,
    question: str | None = None,
    max_seq_len: int | None = None,
    doc_stride: int | None = None,
    max_query_len: int = MAX_QUERY_LEN,
) -> dict[str, Any]:
    """What a fine-tuned `model` says about one input: for a classifier the probability of each label (`text`,
    and `pair` for a sentence-pair task), for a tagger the tag of each word and the entities, for question
    answering the answer to `question` in `text` with its characters. A classifier reads the start of its inputs, cut
    to `max_seq_len` as the run was trained (and tokenizes no more of them); a tagger reads a long text in windows of
    whole words, a reader a long paragraph in windows `doc_stride` apart (a third of a window unless told), the
    question cut to `max_query_len` pieces (`query_len`). A `task` the model was not fine-tuned for, and a missing,
    extra or empty text, are a ValueError."""
    _check_task(model, task)
    _check_inputs(task, tokenizer, text, pair, question)
    kind = TASKS[task].kind
    names = TASKS[task].label_names
    length = max_seq_len or min(model.config.max_position_embeddings, default_seq_len(task))
    if kind in ("sequence", "pair"):
        texts = _read_texts(tokenizer, [text] if pair is None else [text, pair], length - (2 if pair is None else 3))
        example = ClassificationExample(texts[0], 0, names, texts[1] if pair is not None else None)
        features = encode_task(task, [example], tokenizer, length)
        probs = item_outputs(model, features)[0].softmax(-1).tolist()
        return {
            "label": names[max(range(len(probs)), key=probs.__getitem__)],
            "probabilities": dict(zip(names, probs, strict=True)),
        }
    if kind == "token":
        words = pre_tokenize(text)
        windows = [words[a:b] for a, b in _word_windows(tokenizer, words, length - 2)]
        examples = [TaggedSentence(tuple(window), ("O",) * len(window)) for window in windows]
        features = encode_task(task, examples, tokenizer, length)
        tagged = task_predictions(task, item_outputs(model, features), features, examples)
        tags = [tag for window in tagged for tag in window]
        return {
            "words": words,
            "tags": tags,
            "entities": [(name, " ".join(words[a:b])) for name, a, b in iob2_entities(tags)],
        }
    kept = query_len(max_query_len, length)
    example = SquadExample("question", "", text, _leading_text(tokenizer, question, kept)[0], ())
    stride = doc_stride or default_doc_stride(length)
    features = encode_task(task, [example], tokenizer, length, doc_stride=stride, max_query_len=kept)
    starts, ends = zip(*item_outputs(model, features), strict=True)
    start, end = best_spans(starts, ends, features.meta)["question"]
    return {"answer": text[start:end], "start": start, "end": end}
