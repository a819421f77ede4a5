"""The inputs a user gives `predict` in a file, one example a line: plain text (a sentence, or a text to tag), TSV or
CSV with a header that names the task's columns, or JSONL with the task's fields, named as in the hub's datasets:
sst2 `sentence`; rte `sentence1` and `sentence2`; conll2003 `tokens` (a list of words, or words between spaces); squad
`context` and `question`. A line that also holds the task's label (sst2 and rte `label`, an index or a name;
conll2003 `ner_tags`, tag names or ids; squad `answers`, texts of the context) is an example the prediction is scored
against. Blank lines are left out; a bad line is a one-line `TaskDataError` that names the file and the line.

Written by hand; the `predict` command reads its `--input` with it.
"""

__all__ = ["INPUT_FORMATS", "FIELDS", "LineInput", "format_of", "read_inputs"]

import codecs
import csv
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .examples import (
    TASKS,
    Example,
    classification_example,
    shown,
    squad_example,
    tagged_sentence,
    task_error,
    text_field,
)

INPUT_FORMATS = ("text", "tsv", "csv", "jsonl")
_SUFFIXES = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
# per task: the field of the text, of the second text (or None) and of the label
FIELDS = {
    "sst2": ("sentence", None, "label"),
    "rte": ("sentence1", "sentence2", "label"),
    "conll2003": ("tokens", None, "ner_tags"),
    "squad": ("context", "question", "answers"),
}

Row = tuple[int, dict[str, Any] | None, str | None]  # line, fields (None when the line is bad), why it is bad


@dataclass(frozen=True)
class LineInput:
    """One input of a file: its line, its text (a tagger's may be its words), the second text (rte's hypothesis,
    squad's question) and, when the line holds a label, the task's example that the prediction is scored against."""

    line: int
    text: str | tuple[str, ...]
    second: str | None = None
    example: Example | None = None


def format_of(path: str | Path) -> str:
    "A file's format by its suffix: .tsv, .csv, .jsonl (or .ndjson); any other is plain text, one text a line."
    return _SUFFIXES.get(Path(path).suffix.lower(), "text")


def _lines(path: Path) -> Iterator[tuple[int, str, str | None]]:
    "`(number, text, why it is bad)` of every line, decoded as UTF-8 (a byte-order mark is dropped)."
    data = path.read_bytes()
    lines = data.removeprefix(codecs.BOM_UTF8).split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the newline that ends the last line
    for number, raw in enumerate(lines, start=1):
        raw = raw.removesuffix(b"\r")
        try:
            yield number, raw.decode("utf-8"), None
        except UnicodeDecodeError as err:
            yield number, raw.decode("utf-8", "replace"), f"not UTF-8 text ({err.reason} at byte {err.start})"


def _text_rows(path: Path, field: str) -> Iterator[Row]:
    for number, line, bad in _lines(path):
        if line.strip():
            yield number, None if bad else {field: line}, bad


def _jsonl_rows(path: Path) -> Iterator[Row]:
    for number, line, bad in _lines(path):
        if not bad and not line.strip():
            continue
        record = None
        if not bad:
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                bad = f"not JSON ({err.msg} at column {err.colno})"
        if not bad and not isinstance(record, dict):
            record, bad = None, f"{shown(record)} is not a JSON object with the task's fields"
        yield number, record, bad


def _tsv_cells(path: Path, numbered: list[tuple[int, str, str | None]]) -> Iterator[tuple[int, list[str], str | None]]:
    "GLUE's TSV: one row a line, cells between tabs, no quoting."
    return ((number, line.split("\t"), bad) for number, line, bad in numbered if line.strip())


def _csv_cells(path: Path, numbered: list[tuple[int, str, str | None]]) -> Iterator[tuple[int, list[str], str | None]]:
    "CSV as Python's `csv` reads it (quoted cells may hold commas and line breaks): each row with its first line."
    read = [0]  # how many lines the reader has taken

    def lines() -> Iterator[str]:
        for i, (_, line, _) in enumerate(numbered):
            read[0] = i + 1
            yield line + "\n"

    first, reader = 0, csv.reader(lines())
    while True:
        try:
            cells = next(reader, None)
        except csv.Error as err:  # a NUL character, a cell past the csv module's limit: the rows after it are lost
            raise task_error(f"{path}, line {numbered[min(first, len(numbered) - 1)][0]}", f"not CSV ({err})") from None
        if cells is None:
            return
        rows, first = numbered[first : read[0]], read[0]
        if cells:
            yield rows[0][0], cells, next((bad for _, _, bad in rows if bad), None)


def _table_rows(path: Path, needed: list[str], cells: Callable) -> Iterator[Row]:
    "The rows of a TSV or CSV file as fields named by its header, which must name the `needed` columns."
    rows = cells(path, list(_lines(path)))
    number, header, bad = next(rows, (1, None, None))
    if header is None or bad:
        raise task_error(f"{path}, line {number}", bad or f"the file is empty; expected a header naming {needed}")
    header = [name.strip() for name in header]
    missing = [name for name in needed if name not in header]
    if missing:
        raise task_error(
            f"{path}, line {number}",
            f"the header {shown(header, 100)} lacks the column(s) {', '.join(map(repr, missing))}",
        )
    for number, row, bad in rows:
        if not bad and len(row) != len(header):
            bad = f"expected {len(header)} columns as in the header, found {len(row)}"
        yield number, None if bad else dict(zip(header, row, strict=True)), bad


def _rows(task: str, path: Path, input_format: str) -> Iterator[Row]:
    first, second, _ = FIELDS[task]
    if input_format == "text":
        if second is not None:
            raise task_error(
                str(path),
                f"{task} reads two texts a line ({first}, {second}): give a TSV, CSV or JSONL file that names them",
            )
        return _text_rows(path, first)
    if input_format == "jsonl":
        return _jsonl_rows(path)
    needed = [name for name in (first, second) if name]
    return _table_rows(path, needed, _tsv_cells if input_format == "tsv" else _csv_cells)


# ----------------------------------------------------------------------------------------------------- labels
def _label(task: str, value: Any, where: str) -> int:
    "A class as an index (an int, or its digits) or a name."
    names = TASKS[task].label_names
    if isinstance(value, str):
        value = value.strip()
        if value in names:
            return names.index(value)
        if value.isdigit():
            return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise task_error(
        where, f"label {shown(value)} is not one of {', '.join(f'{i} ({n})' for i, n in enumerate(names))}"
    )


def _words(value: Any, what: str, where: str) -> list[Any]:
    "A list of words or tags: a JSON list as it is, a string split at whitespace."
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return value
    raise task_error(where, f"{what} is {shown(value)}, not a list or words between spaces")


def _tags(value: Any, where: str) -> list[Any]:
    "CoNLL tags as names, from names or ids (ints, or their digits)."
    names = TASKS["conll2003"].label_names
    tags = [int(t) if isinstance(t, str) and t.isdigit() else t for t in _words(value, "ner_tags", where)]
    for tag in tags:
        if isinstance(tag, bool) or isinstance(tag, int) and not 0 <= tag < len(names):
            raise task_error(where, f"tag id {shown(tag)} is outside 0..{len(names) - 1}")
    return [names[t] if isinstance(t, int) else t for t in tags]


def _answers(value: Any, context: Any, where: str) -> tuple[list[Any], list[Any]]:
    "SQuAD answers' texts and starts: the hub's {'text': [...], 'answer_start': [...]}, or texts found in the context."
    if isinstance(value, dict):
        texts, starts = value.get("text"), value.get("answer_start")
        if starts is not None:
            return texts, starts
    else:
        texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not isinstance(context, str):
        return texts, []  # squad_example says what is wrong
    starts = [context.find(text) if isinstance(text, str) else -1 for text in texts]
    absent = next((text for text, start in zip(texts, starts, strict=True) if start < 0), None)
    if absent is not None:
        raise task_error(where, f"answer {shown(absent)} is not in the context; an answer is a span of its context")
    return texts, starts


def _line_input(task: str, number: int, record: dict[str, Any], where: str, input_format: str) -> LineInput:
    "The input of one line's fields, with its example when it holds a label."
    info, (first, second, label) = TASKS[task], FIELDS[task]
    absent = [name for name in (first, second) if name and name not in record]
    if absent:
        reads = " and ".join(name for name in (first, second) if name)
        raise task_error(where, f"no field {', '.join(map(repr, absent))} ({task} reads {reads})")
    text, other, gold = record[first], record[second] if second else None, record.get(label)
    if info.kind == "token" and input_format != "text":
        text = _words(text, first, where)  # a tagger's tokens: its words, as they are
    if gold is None or gold == "":
        if isinstance(text, list):
            if not text or not all(isinstance(word, str) and word.strip() for word in text):
                raise task_error(where, f"{first} {shown(text)} must be words, at least one")
            return LineInput(number, tuple(text))
        return LineInput(number, text_field(text, first, where), second and text_field(other, second, where))
    if info.kind in ("sequence", "pair"):
        example = classification_example(info, text, other, _label(task, gold, where), where)
        return LineInput(number, example.text, example.text_pair, example)
    if info.kind == "token":
        example = tagged_sentence(text, _tags(gold, where), where)
        return LineInput(number, example.words, None, example)
    example = squad_example(str(number), "", text, other, *_answers(gold, text, where), where)
    return LineInput(number, example.context, example.question, example)


def read_inputs(
    task: str,
    path: str | Path,
    input_format: str | None = None,
    *,
    check: Callable[[LineInput], None] | None = None,
    skip_bad: bool = False,
) -> tuple[list[LineInput], list[str]]:
    """The inputs of `task` in the file `path`, one a line, in `input_format` (one of `INPUT_FORMATS`; by default by
    the file's suffix, `format_of`); `check` may refuse an input with a ValueError (a text without word pieces, say).
    Returns the inputs and why each bad line is bad (`line N: why`), which with `skip_bad` are left out; without, the
    first bad line is a `TaskDataError` that names its file and line. A header without the task's columns, or a
    plain-text file for a task that reads two texts a line, is a `TaskDataError` either way."""
    path = Path(path)
    input_format = input_format or format_of(path)
    inputs, bad = [], []
    for number, record, why in _rows(task, path, input_format):
        where = f"{path}, line {number}"
        try:
            item = None if why else _line_input(task, number, record, where, input_format)
            if item is not None and check is not None:
                check(item)
        except ValueError as err:  # a TaskDataError, or what `check` says
            why = str(err).removeprefix(" ".join(where.split()) + ": ")
        if not why:
            inputs.append(item)
        elif skip_bad:
            bad.append(f"line {number}: {why}")
        else:
            raise task_error(where, why)
    return inputs, bad
