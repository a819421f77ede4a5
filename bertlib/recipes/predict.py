"""What a fine-tuned run says about new text: `predict` reads one input, or a list of them, as the run was trained to (a
classifier the start of its text or pair, a tagger a long text in windows of whole words, a reader a long paragraph in
windows with a stride) and answers with the task's labels, entities or answer span. A list is batched by length, so
that each batch pads little, and answered in its own order.

Written by hand; the fine-tuning notebook and the `predict` command use it.
"""

__all__ = ["check_inputs", "predict", "predict_file"]

import os
from collections.abc import Sequence
from typing import Any

from tokenizers import Tokenizer
from torch import nn

from ..data.tokenizer import pre_tokenize
from ..model.heads import HEADS
from ..tasks.examples import TASK_NAMES, TASKS, ClassificationExample, SquadExample, TaggedSentence, iob2_entities
from ..tasks.features import MAX_QUERY_LEN, best_spans, encode_task
from ..tasks.inputs import read_inputs
from ..tasks.metrics import task_scores
from ..train.settings import default_doc_stride, default_seq_len
from ..utils.checks import check_choice
from .finetune import item_outputs, query_len, task_predictions

_READS = {
    "sequence": "one text",
    "token": "one text",
    "pair": "two texts (the second with --pair)",
    "span": "a paragraph and a question (--question)",
}
_SECOND = {"pair": "pair", "span": "question"}  # the keyword of a task's second text
# the shortest window that reads something of every text: [CLS] text [SEP], [CLS] a [SEP] b [SEP], [CLS] q [SEP] c [SEP]
_SHORTEST = {"sequence": 3, "token": 3, "pair": 5, "span": 5}
# how far a pair whose texts both overflow the window is read to find the longer (which keeps an odd window's extra
# piece): up to this many windows' worth of pieces of each; past that, the text of more characters counts as longer
_PAIR_READ = 16

Text = str | Sequence[str]  # a text, or (for a tagger) its words


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


def _window(model: nn.Module, task: str, max_seq_len: int | None, doc_stride: int | None) -> tuple[int, int]:
    "The window's length (the task's default unless given) and SQuAD's stride; a one-line ValueError for bad ones."
    longest = model.config.max_position_embeddings
    if max_seq_len is None:
        max_seq_len = min(longest, default_seq_len(task))
    shortest = _SHORTEST[TASKS[task].kind]
    if not shortest <= max_seq_len <= longest:
        raise ValueError(
            f"max_seq_len={max_seq_len} does not fit: a {task} window holds at least {shortest} tokens (the special "
            f"ones and a piece of every text) and at most the model's {longest} positions; give a length in that "
            f"range, or None for the task's default"
        )
    if doc_stride is not None and doc_stride < 1:
        raise ValueError(f"doc_stride={doc_stride} must be at least 1, or None for a third of the window")
    return max_seq_len, doc_stride or default_doc_stride(max_seq_len)


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
    cuts them as it cuts the whole texts. How much each keeps depends on which is the longer when both overflow, which
    is looked for in up to `_PAIR_READ` windows' worth of each; two texts longer still are told apart by their
    characters (the start of the shorter is cut a piece shorter, so that `truncate_pair` takes it for the shorter)."""
    pieces = room
    while True:
        read = [_leading_text(tokenizer, text, pieces) for text in texts]
        wholes = [n for _, n, whole in read if whole]
        # a cut text has more than `pieces` pieces, a whole one at most that many: fewer settles which is the longer
        if len(texts) == 1 or len(wholes) == len(texts) or (wholes and min(wholes) < pieces):
            return [part for part, _, _ in read]
        if pieces >= _PAIR_READ * room:
            second_shorter = len(texts[1]) < len(texts[0])
            return [read[0][0], _leading_text(tokenizer, texts[1], pieces - second_shorter)[0]]
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


def check_inputs(
    task: str, tokenizer: Tokenizer, text: Text, pair: str | None = None, question: str | None = None
) -> None:
    """Raise a one-line ValueError for one input a task cannot read: a missing, extra or empty text. A tagger's text
    may be given as its words (a list of strings), which are then read as they are."""
    kind = TASKS[task].kind
    given = {"pair": pair, "question": question}
    wanted = _SECOND.get(kind)
    for name, value in given.items():
        if (value is not None) != (name == wanted):
            action = f"leave out --{name}" if value is not None else f"give --{name} too"
            raise ValueError(f"{task} reads {_READS[kind]}: {action}")
    if not isinstance(text, str):
        if kind != "token" or not all(isinstance(word, str) and word.strip() for word in text) or not text:
            raise ValueError(f"{task} reads a text{' or a list of its words' if kind == 'token' else ''}; give one")
        text = " ".join(text)
    inputs = {"text": text, **({wanted: given[wanted]} if wanted else {})}
    for name, value in inputs.items():
        if not isinstance(value, str):
            raise ValueError(f"the {name} is {type(value).__name__}, not text; give a string")
        if _leading_text(tokenizer, value, 1)[1] == 0:
            raise ValueError(f"the {name} is empty (it has no word pieces); give some text")


def _inputs(text: Text | Sequence[Text], pair: Any, question: Any) -> tuple[bool, list, list | None, list | None]:
    "Whether one input was given, and the texts, pairs and questions as lists of the same length."
    one = isinstance(text, str)
    texts = [text] if one else list(text)
    seconds = []
    for name, value in (("pair", pair), ("question", question)):
        if value is None or one:
            seconds.append(None if value is None else [value])
            continue
        if isinstance(value, str) or len(value) != len(texts):
            raise ValueError(f"give one {name} per text: a list of {len(texts)} {name}s, not {type(value).__name__}")
        seconds.append(list(value))
    return one, texts, *seconds


def _classify(model, tokenizer, task, texts, pairs, length, batch_size, progress) -> list[dict[str, Any]]:
    names = TASKS[task].label_names
    room = length - (2 if pairs is None else 3)
    examples = []
    for i, text in enumerate(texts):
        read = _read_texts(tokenizer, [text] if pairs is None else [text, pairs[i]], room)
        examples.append(ClassificationExample(read[0], 0, names, read[1] if pairs is not None else None))
    features = encode_task(task, examples, tokenizer, length)
    results = []
    for logits in item_outputs(model, features, batch_size, progress=progress):
        probs = logits.softmax(-1).tolist()
        results.append(
            {
                "label": names[max(range(len(probs)), key=probs.__getitem__)],
                "probabilities": dict(zip(names, probs, strict=True)),
            }
        )
    return results


def _tag(model, tokenizer, task, texts, length, batch_size, progress) -> list[dict[str, Any]]:
    words_of = [pre_tokenize(text) if isinstance(text, str) else list(text) for text in texts]
    examples, owners = [], []
    for i, words in enumerate(words_of):
        for a, b in _word_windows(tokenizer, words, length - 2):
            examples.append(TaggedSentence(tuple(words[a:b]), ("O",) * (b - a)))
            owners.append(i)
    features = encode_task(task, examples, tokenizer, length)
    outputs = item_outputs(model, features, batch_size, progress=progress)
    tags: list[list[str]] = [[] for _ in texts]
    for owner, window in zip(owners, task_predictions(task, outputs, features, examples), strict=True):
        tags[owner] += window  # the windows of a text follow each other
    return [
        {"words": words, "tags": t, "entities": [(name, " ".join(words[a:b])) for name, a, b in iob2_entities(t)]}
        for words, t in zip(words_of, tags, strict=True)
    ]


def _answer(model, tokenizer, task, texts, questions, length, stride, max_query_len, batch_size, progress) -> list:
    kept = query_len(max_query_len, length)
    examples = [
        SquadExample(str(i), "", text, _leading_text(tokenizer, question, kept)[0], ())
        for i, (text, question) in enumerate(zip(texts, questions, strict=True))
    ]
    features = encode_task(task, examples, tokenizer, length, doc_stride=stride, max_query_len=kept)
    starts, ends = zip(*item_outputs(model, features, batch_size, progress=progress), strict=True)
    spans = best_spans(starts, ends, features.meta)
    results = []
    for i, text in enumerate(texts):
        start, end = spans.get(str(i), (None, None))  # None: no span of the windows' best starts and ends fits
        results.append({"answer": None if start is None else text[start:end], "start": start, "end": end})
    return results


def predict(
    model: nn.Module,
    tokenizer: Tokenizer,
    task: str,
    text: Text | Sequence[Text],
    *,
    pair: str | Sequence[str] | None = None,
    question: str | Sequence[str] | None = None,
    max_seq_len: int | None = None,
    doc_stride: int | None = None,
    max_query_len: int = MAX_QUERY_LEN,
    batch_size: int = 32,
    progress: bool = False,
) -> dict[str, Any] | list[dict[str, Any]]:
    """What a fine-tuned `model` says about one input: for a classifier the probability of each label (`text`,
    and `pair` for a sentence-pair task), for a tagger the tag of each word and the entities, for question
    answering the answer to `question` in `text` with its characters. A classifier reads the start of its inputs, cut
    to `max_seq_len` as the run was trained (and tokenizes no more of them); a tagger reads a long text in windows of
    whole words, a reader a long paragraph in windows `doc_stride` apart (a third of a window unless told), the
    question cut to `max_query_len` pieces (`query_len`).

    A list of texts (with a list of as many pairs or questions) gives a list of answers, in its order: the windows of
    every input are sorted by length and run `batch_size` at a time, each batch padded to its longest (`progress`
    shows a bar). A tagger's text may also be given as its words, a list of strings, in a list of inputs.

    A `task` the model was not fine-tuned for, a missing, extra or empty text, and a window too short to read every
    text, or longer than the model's positions, are a one-line ValueError (for a list, naming the input)."""
    _check_task(model, task)
    length, stride = _window(model, task, max_seq_len, doc_stride)
    one, texts, pairs, questions = _inputs(text, pair, question)
    for i, item in enumerate(texts):
        try:
            check_inputs(task, tokenizer, item, pairs and pairs[i], questions and questions[i])
        except ValueError as err:
            raise err if one else ValueError(f"input {i}: {err}") from None
    kind = TASKS[task].kind
    if kind in ("sequence", "pair"):
        results = _classify(model, tokenizer, task, texts, pairs, length, batch_size, progress)
    elif kind == "token":
        results = _tag(model, tokenizer, task, texts, length, batch_size, progress)
    else:
        results = _answer(model, tokenizer, task, texts, questions, length, stride, max_query_len, batch_size, progress)
    return results[0] if one else results


def _second(task: str, value: Any) -> dict[str, Any]:
    "`value` as the keyword of `task`'s second text (`pair`, `question`), or nothing for a task of one text."
    name = _SECOND.get(TASKS[task].kind)
    return {name: value} if name else {}


def _scored(task: str, results: Sequence[dict[str, Any]], examples: Sequence[Any]) -> Any:
    "Answers as `task_scores` reads them: class ids, tag lists, or answer texts by question id."
    kind = TASKS[task].kind
    if kind in ("sequence", "pair"):
        return [TASKS[task].label_names.index(result["label"]) for result in results]
    if kind == "token":
        return [result["tags"] for result in results]
    return {e.id: r["answer"] for e, r in zip(examples, results, strict=True) if r["answer"] is not None}


def predict_file(
    model: nn.Module,
    tokenizer: Tokenizer,
    task: str,
    path: str | os.PathLike,
    input_format: str | None = None,
    *,
    skip_bad: bool = False,
    **options: Any,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[str]]:
    """`predict` on a file of one input a line (`bertlib.tasks.inputs.read_inputs`: plain text, TSV, CSV or JSONL), with
    `predict`'s keyword `options`. Returns the answers in the file's order, each with its `line`; the task's scores
    (`bertlib.tasks.metrics.task_scores`) over the lines that hold a label, with their number (`labelled`), or None
    when no line does; and why each bad line was left out (with `skip_bad`; without, a bad line is a one-line
    `TaskDataError` naming it)."""
    inputs, bad = read_inputs(
        task,
        path,
        input_format,
        check=lambda item: check_inputs(task, tokenizer, item.text, **_second(task, item.second)),
        skip_bad=skip_bad,
    )
    texts, seconds = [item.text for item in inputs], _second(task, [item.second for item in inputs])
    results = predict(model, tokenizer, task, texts, **seconds, **options)
    labelled = [(item.example, result) for item, result in zip(inputs, results, strict=True) if item.example]
    scores = None
    if labelled:
        examples, answers = zip(*labelled, strict=True)
        scores = {**task_scores(task, _scored(task, answers, examples), examples), "labelled": len(labelled)}
    return [{"line": item.line, **result} for item, result in zip(inputs, results, strict=True)], scores, bad
