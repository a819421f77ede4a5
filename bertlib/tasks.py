"""The fine-tuning tasks as plain Python examples: SST-2 (sentiment), RTE (entailment), CoNLL-2003 (named
entities) and SQuAD v1.1 (extractive question answering).

Each task loads from the HuggingFace hub by default and from `$BERTLIB_DATA_DIR` (or `data_dir=`) when that is
set, exactly as `bertlib.data.load_wikitext2` does for WikiText-2. The local layout is the tasks' original files:

    <DIR>/glue/SST-2/{train,dev}.tsv          header `sentence<TAB>label`, labels 0/1
    <DIR>/glue/RTE/{train,dev}.tsv            header `index<TAB>sentence1<TAB>sentence2<TAB>label`
    <DIR>/conll2003/{train,valid,test}.txt    `word POS chunk NER` per line (IOB2), blank line between sentences
    <DIR>/squad/dev-v1.1.json                 the official SQuAD v1.1 dev file (the only SQuAD file offline)

Split names are the hub's everywhere: 'train', 'validation' (GLUE's and CoNLL's dev files) and, for CoNLL-2003,
'test'. The GLUE test splits are left out: their labels are hidden (-1 on the hub).

Offline there is no SQuAD training file, so the dev file is split **by article**, in file order: the first 40 of
its 48 articles (8,981 questions) are 'train' and the last `SQUAD_OFFLINE_EVAL_ARTICLES` = 8 articles,
Prime_number to Force (1,589 questions), are 'validation'. No paragraph is in both. With the hub, 'train' and
'validation' are the real SQuAD train (87,599) and dev (10,570) sets, so offline scores are not comparable with
published ones.

Bad data raises `TaskDataError` (a ValueError) in one line that names the file and the row: the line number for
TSV and CoNLL files, the question id for SQuAD, the row index for the hub. A missing file raises
`TaskFileMissing`, which is both a `TaskDataError` and a `FileNotFoundError`.

Written by hand (no notebook exports it). It sits on the data floor and imports only `bertlib.helpers`.
"""

__all__ = ["TASK_NAMES", "SPLITS", "SST2_LABELS", "RTE_LABELS", "CONLL_TAGS", "ENTITY_TYPES",
           "SQUAD_OFFLINE_EVAL_ARTICLES", "QUICK_SIZES", "TaskDataError", "TaskFileMissing", "TaskInfo", "TASKS",
           "ClassificationExample", "TaggedSentence", "Answer", "SquadExample", "Example", "iob2_problem",
           "iob2_entities", "load_sst2", "load_rte", "load_conll2003", "load_squad", "load_task", "quick_slice"]

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from .helpers import DATA_DIR_ENV, check_choice, resolve_data_dir

TASK_NAMES = ("sst2", "rte", "conll2003", "squad")
SPLITS = ("train", "validation", "test")
SST2_LABELS = ("negative", "positive")  # GLUE's order: label 0 = negative
RTE_LABELS = ("entailment", "not_entailment")  # GLUE's order: label 0 = entailment
# The tag ids of the hub's `eriktks/conll2003` (its `ner_tags` ClassLabel), so ids agree with HF models
CONLL_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
ENTITY_TYPES = ("PER", "ORG", "LOC", "MISC")
SQUAD_OFFLINE_EVAL_ARTICLES = 8
QUICK_SIZES = {"train": 512, "validation": 128, "test": 128}
_SCRIPT_FALLBACK_REVISION = "refs/convert/parquet"  # the hub's parquet export of a dataset with a loading script


class TaskDataError(ValueError):
    """Task data that cannot be used; the message (one line) names the file or hub dataset and the row."""


class TaskFileMissing(TaskDataError, FileNotFoundError):
    """A task file that is not where the local data folder says it should be."""


@dataclass(frozen=True)
class TaskInfo:
    """What a task is: its splits, labels, metric, and where its data lives on the hub and on disk."""
    name: str
    title: str
    kind: Literal["sequence", "pair", "token", "span"]  # which fine-tuning pattern (and head) it needs
    splits: tuple[str, ...]
    label_names: tuple[str, ...]  # class names, or the IOB2 tags for NER; empty for SQuAD
    metric: Literal["accuracy", "entity_f1", "squad"]  # see bertlib.task_metrics.task_scores
    hub_path: str
    hub_config: str | None
    local_folder: str  # below the data folder
    local_files: Mapping[str, str] = field(default_factory=dict)  # split -> file name in local_folder


TASKS: dict[str, TaskInfo] = {
    "sst2": TaskInfo("sst2", "GLUE SST-2 (sentiment of a movie-review sentence)", "sequence",
                     ("train", "validation"), SST2_LABELS, "accuracy", "nyu-mll/glue", "sst2", "glue/SST-2",
                     {"train": "train.tsv", "validation": "dev.tsv"}),
    "rte": TaskInfo("rte", "GLUE RTE (does sentence 1 entail sentence 2?)", "pair",
                    ("train", "validation"), RTE_LABELS, "accuracy", "nyu-mll/glue", "rte", "glue/RTE",
                    {"train": "train.tsv", "validation": "dev.tsv"}),
    "conll2003": TaskInfo("conll2003", "CoNLL-2003 English named entities (PER, ORG, LOC, MISC; IOB2 tags)",
                          "token", ("train", "validation", "test"), CONLL_TAGS, "entity_f1", "eriktks/conll2003",
                          None, "conll2003", {"train": "train.txt", "validation": "valid.txt", "test": "test.txt"}),
    "squad": TaskInfo("squad", "SQuAD v1.1 (answer = a span of the paragraph)", "span", ("train", "validation"),
                      (), "squad", "rajpurkar/squad", "plain_text", "squad",
                      {"train": "dev-v1.1.json", "validation": "dev-v1.1.json"}),
}


@dataclass(frozen=True)
class ClassificationExample:
    """One sentence (SST-2) or sentence pair (RTE, `text_pair`) with its class `label`, an index into
    `label_names`. The names follow HF tokenizers: `tokenizer(text, text_pair)` encodes it."""
    text: str
    label: int
    label_names: tuple[str, ...]
    text_pair: str | None = None

    @property
    def label_name(self) -> str:
        return self.label_names[self.label]


@dataclass(frozen=True)
class TaggedSentence:
    """One CoNLL-2003 sentence: its words and their IOB2 tags (strings from `tag_names`)."""
    words: tuple[str, ...]
    tags: tuple[str, ...]
    tag_names: tuple[str, ...] = CONLL_TAGS

    def __post_init__(self):
        if len(self.words) != len(self.tags):
            raise ValueError(f"{len(self.words)} words but {len(self.tags)} tags")

    @property
    def tag_ids(self) -> tuple[int, ...]:
        "The tags as ids (indices into `tag_names`), the labels a token-classification head predicts."
        index = {t: i for i, t in enumerate(self.tag_names)}
        return tuple(index[t] for t in self.tags)

    @property
    def entities(self) -> list[tuple[str, int, int]]:
        "The entities as `(type, first word, end word)` with the end excluded: `words[first:end]` is the mention."
        return iob2_entities(self.tags)


@dataclass(frozen=True)
class Answer:
    """One gold answer of a SQuAD question: its text and the character where it starts in the context."""
    text: str
    start: int

    @property
    def end(self) -> int:
        "The character after the answer: `context[start:end] == text`."
        return self.start + len(self.text)


@dataclass(frozen=True)
class SquadExample:
    """One SQuAD v1.1 question about a paragraph (`context`) of the Wikipedia article `title`, with its gold
    answers (usually 1 in train and 3 in dev, some repeated)."""
    id: str
    title: str
    context: str
    question: str
    answers: tuple[Answer, ...]


Example = ClassificationExample | TaggedSentence | SquadExample
_E = TypeVar("_E")


# ---------------------------------------------------------------------------------------------------- checks
def _show(value: Any, width: int = 60) -> str:
    "A value for a one-line message: its repr, cut to `width` characters."
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _fail(where: str, problem: str) -> TaskDataError:
    return TaskDataError(" ".join(f"{where}: {problem}".split()))  # one line, whatever the data held


def _iob2_step(previous: str, tag: str, allowed: Sequence[str]) -> str | None:
    "Why `tag` may not follow `previous` in IOB2 over the tags `allowed`, or None when it may."
    if tag not in allowed:
        return f"tag {_show(tag)} is not one of {', '.join(allowed)}"
    if tag.startswith("I-") and previous[2:] != tag[2:]:
        return (f"tag {tag!r} follows {previous!r}: in IOB2 an entity starts with B-{tag[2:]} "
                f"(IOB1 data? convert it to IOB2)")
    return None


def iob2_problem(tags: Sequence[str], tag_names: Sequence[str] = CONLL_TAGS) -> tuple[int, str] | None:
    """`(position, why)` for the first tag that is not valid IOB2 over `tag_names`, or None when all are.

    IOB2 starts every entity with `B-TYPE`; `I-TYPE` may only follow `B-TYPE` or `I-TYPE` of the same type.
    (The original CoNLL-2003 files use IOB1, where `I-` may start an entity: such data is refused.)"""
    previous = "O"
    for i, tag in enumerate(tags):
        problem = _iob2_step(previous, tag, tag_names)
        if problem is not None:
            return i, problem
        previous = tag
    return None


def iob2_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    "The entities of valid IOB2 `tags` as `(type, start, end)`, end excluded."
    entities: list[tuple[str, int, int]] = []
    for i, tag in enumerate(tags):
        if tag.startswith("B-"):
            entities.append((tag[2:], i, i + 1))
        elif tag.startswith("I-") and entities and entities[-1][0] == tag[2:] and entities[-1][2] == i:
            entities[-1] = (tag[2:], entities[-1][1], i + 1)
    return entities


def _text(value: Any, what: str, where: str) -> str:
    if not isinstance(value, str):
        raise _fail(where, f"{what} is {_show(value)}, not text")
    if not value.strip():
        raise _fail(where, f"{what} is empty")
    return value.strip()


def _classification(task: TaskInfo, text: Any, text_pair: Any, label: int, where: str) -> ClassificationExample:
    if not isinstance(label, int) or isinstance(label, bool) or not 0 <= label < len(task.label_names):
        raise _fail(where, f"label {_show(label)} is outside the {task.name} labels "
                           f"({', '.join(f'{i}={n}' for i, n in enumerate(task.label_names))})")
    pair = None if task.kind == "sequence" else _text(text_pair, "sentence2", where)
    return ClassificationExample(_text(text, "sentence" if pair is None else "sentence1", where), label,
                                 task.label_names, pair)


def _tagged(words: Sequence[Any], tags: Sequence[str], where: str) -> TaggedSentence:
    if not words:
        raise _fail(where, "the sentence has no words")
    if len(words) != len(tags):
        raise _fail(where, f"{len(words)} words but {len(tags)} tags")
    for i, word in enumerate(words):
        if not isinstance(word, str) or not word.strip():
            raise _fail(where, f"word {i} is {_show(word)}, not a word")
    problem = iob2_problem(tags)
    if problem is not None:
        raise _fail(where, f"word {problem[0]} ({words[problem[0]]!r}): {problem[1]}")
    return TaggedSentence(tuple(words), tuple(tags))


def _squad(qid: Any, title: Any, context: Any, question: Any, texts: Any, starts: Any,
           where: str) -> SquadExample:
    if not isinstance(qid, str) or not qid.strip():
        raise _fail(where, f"question id is {_show(qid)}, not a non-empty string")
    where = f"{where}, question id {qid}"
    if not isinstance(context, str) or not context.strip():
        raise _fail(where, "the context is empty")
    question = _text(question, "the question", where)
    if not isinstance(texts, list | tuple) or not isinstance(starts, list | tuple) or len(texts) != len(starts):
        raise _fail(where, f"answers need as many texts as starts, got {_show(texts)} and {_show(starts)}")
    if not texts:
        raise _fail(where, "the question has no answer (SQuAD v2.0 data? only v1.1 is supported)")
    answers = []
    for text, start in zip(texts, starts, strict=True):
        if not isinstance(text, str) or not text.strip():
            raise _fail(where, f"answer text {_show(text)} is empty")
        valid_start = isinstance(start, int) and not isinstance(start, bool) and start >= 0
        if not valid_start or context[start:start + len(text)] != text:
            found = context[start:start + len(text)] if valid_start else None
            raise _fail(where, f"answer {_show(text)} does not occur at its start offset {_show(start)} "
                               f"(the context has {_show(found)} there)")
        answers.append(Answer(text, start))
    return SquadExample(qid, str(title or ""), context, question, tuple(answers))


# ------------------------------------------------------------------------------------------------ local files
def _local_file(task: TaskInfo, split: str, root: Path) -> Path:
    path = root / task.local_folder / task.local_files[split]
    if not path.is_file():
        files = ", ".join(sorted(set(task.local_files.values())))
        raise TaskFileMissing(
            f"{path}: no such file. Put the {task.name} files ({files}) in <DIR>/{task.local_folder}/ "
            f"and set {DATA_DIR_ENV}=<DIR> (or pass data_dir=<DIR>), or unset {DATA_DIR_ENV} to load "
            f"{task.hub_path} from the HuggingFace hub")
    return path


def _lines(path: Path) -> list[str]:
    "The lines of a UTF-8 text file, without line ends; only '\\n' (and '\\r\\n') end a line."
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        line = path.read_bytes()[: err.start].count(b"\n") + 1
        raise _fail(f"{path}, line {line}", f"not UTF-8 text ({err.reason} at byte {err.start})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return [line.removesuffix("\r") for line in lines]


# GLUE's TSV columns (by header name) and the values its label column holds, in label order
_GLUE_COLUMNS = {"sst2": ("sentence",), "rte": ("sentence1", "sentence2")}
_GLUE_FILE_LABELS = {"sst2": ("0", "1"), "rte": RTE_LABELS}


def _read_glue_tsv(task: TaskInfo, path: Path) -> list[ClassificationExample]:
    lines = _lines(path)
    needed = (*_GLUE_COLUMNS[task.name], "label")
    if not lines:
        raise _fail(f"{path}, line 1", f"the file is empty; expected the header {chr(9).join(needed)!r}")
    header = lines[0].split("\t")
    missing = [c for c in needed if c not in header]
    if missing:
        raise _fail(f"{path}, line 1", f"the header {_show(header, 100)} lacks the column(s) "
                                       f"{', '.join(map(repr, missing))} (GLUE {task.name} needs {', '.join(needed)})")
    at = [header.index(c) for c in needed]
    values = _GLUE_FILE_LABELS[task.name]
    examples = []
    for number, line in enumerate(lines[1:], start=2):
        where = f"{path}, line {number}"
        cells = line.split("\t")
        if len(cells) != len(header):
            raise _fail(where, f"expected {len(header)} tab-separated columns as in the header, found {len(cells)}")
        label = cells[at[-1]].strip()
        if label not in values:
            raise _fail(where, f"label {_show(label)} is not one of {', '.join(map(repr, values))} "
                               f"({', '.join(f'{v}={n}' for v, n in zip(values, task.label_names, strict=True))})")
        pair = cells[at[1]] if task.kind == "pair" else None
        examples.append(_classification(task, cells[at[0]], pair, values.index(label), where))
    return examples


def _read_conll(path: Path) -> list[TaggedSentence]:
    sentences: list[TaggedSentence] = []
    words: list[str] = []
    tags: list[str] = []
    first = 0

    def flush():
        if words:
            sentences.append(_tagged(words, tags, f"{path}, line {first}"))
            words.clear()
            tags.clear()

    for number, line in enumerate(_lines(path), start=1):
        cells = line.split()
        if not cells:
            flush()
            continue
        if cells[0] == "-DOCSTART-":  # a document boundary, not a sentence
            flush()
            continue
        if len(cells) != 4:
            raise _fail(f"{path}, line {number}", f"expected 4 space-separated columns (word POS chunk NER), "
                                                  f"found {len(cells)}: {_show(line)}")
        if not words:
            first = number
        problem = _iob2_step(tags[-1] if tags else "O", cells[3], CONLL_TAGS)
        if problem is not None:
            raise _fail(f"{path}, line {number}", problem)
        words.append(cells[0])
        tags.append(cells[3])
    flush()
    return sentences


def _read_squad_articles(path: Path) -> list[list[SquadExample]]:
    "The questions of a SQuAD v1.1 JSON file, article by article, checked."
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise _fail(f"{path}, line {err.lineno}", f"not valid JSON ({err.msg})") from None
    except UnicodeDecodeError as err:
        raise _fail(str(path), f"not UTF-8 text ({err.reason} at byte {err.start})") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise _fail(str(path), "not a SQuAD file: expected an object with a 'data' list of articles")
    articles: list[list[SquadExample]] = []
    seen: set[str] = set()
    for a, article in enumerate(data["data"]):
        where = f"{path}, article {a}"
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise _fail(where, "expected an object with 'title' and a 'paragraphs' list")
        questions = []
        for p, paragraph in enumerate(article["paragraphs"]):
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("qas"), list):
                raise _fail(f"{where}, paragraph {p}", "expected an object with 'context' and a 'qas' list")
            for qa in paragraph["qas"]:
                if not isinstance(qa, dict):
                    raise _fail(f"{where}, paragraph {p}", f"a question is {_show(qa)}, not an object")
                answers = qa.get("answers")
                if not isinstance(answers, list) or not all(isinstance(x, dict) for x in answers):
                    raise _fail(f"{path}, question id {qa.get('id')}", "'answers' must be a list of objects "
                                                                       "with 'text' and 'answer_start'")
                example = _squad(qa.get("id"), article.get("title"), paragraph.get("context"), qa.get("question"),
                                 [x.get("text") for x in answers], [x.get("answer_start") for x in answers], str(path))
                if example.id in seen:
                    raise _fail(f"{path}, question id {example.id}", "the id is used twice")
                seen.add(example.id)
                questions.append(example)
        articles.append(questions)
    return articles


def _split_squad_dev(path: Path, split: str) -> list[SquadExample]:
    articles = _read_squad_articles(path)
    if len(articles) <= SQUAD_OFFLINE_EVAL_ARTICLES:
        raise _fail(str(path), f"{len(articles)} articles; the offline train/validation split keeps the last "
                               f"{SQUAD_OFFLINE_EVAL_ARTICLES} for validation and needs more than that")
    cut = len(articles) - SQUAD_OFFLINE_EVAL_ARTICLES
    chosen = articles[:cut] if split == "train" else articles[cut:]
    return [q for article in chosen for q in article]


# ------------------------------------------------------------------------------------------------------ hub
def _hub_dataset(task: TaskInfo, split: str):
    "`datasets.load_dataset` for a task's split, with the parquet export for hub datasets that keep a script."
    help_offline = (f"without internet, put the files in <DIR>/{task.local_folder}/ and set {DATA_DIR_ENV}=<DIR> "
                    f"(or pass data_dir=<DIR>)")
    try:
        import datasets
    except ImportError as err:
        raise ImportError(f"loading {task.name} from the hub needs the `datasets` package (pip install datasets); "
                          f"{help_offline}") from err
    args = (task.hub_path,) if task.hub_config is None else (task.hub_path, task.hub_config)
    try:
        try:
            return datasets.load_dataset(*args, split=split)
        except RuntimeError as err:
            # datasets >= 4 refuses loading scripts (eriktks/conll2003 keeps one); the hub's parquet export of
            # the same data loads without it, with the same features
            if "scripts are no longer supported" not in str(err):
                raise
            return datasets.load_dataset(*args, split=split, revision=_SCRIPT_FALLBACK_REVISION)
    except Exception as err:  # datasets raises many types (ConnectionError, OSError, HfHubHTTPError, ...)
        first = str(err).splitlines()[0] if str(err) else ""
        raise ConnectionError(f"could not load {task.hub_path!r} ({task.hub_config or 'default'}, {split}) from the "
                              f"HuggingFace hub: {type(err).__name__}: {first}. If this machine is offline, "
                              f"{help_offline}.") from err


def _hub_columns(ds, needed: Sequence[str], where: str) -> None:
    missing = [c for c in needed if c not in ds.column_names]
    if missing:
        raise _fail(where, f"the hub dataset lacks the column(s) {', '.join(map(repr, missing))} "
                           f"(it has {', '.join(ds.column_names)})")


def _hub_names(ds, column: str, where: str) -> list[str]:
    "The class names of a ClassLabel column, or of the ClassLabel inside a sequence column."
    feature = ds.features[column]
    feature = getattr(feature, "feature", feature)  # List/Sequence(ClassLabel) -> ClassLabel
    names = getattr(feature, "names", None)
    if not names:
        raise _fail(where, f"column {column!r} holds {type(feature).__name__}, not class labels with names")
    return list(names)


def _hub_classification(task: TaskInfo, split: str) -> list[ClassificationExample]:
    ds = _hub_dataset(task, split)
    where = f"{task.hub_path} ({task.hub_config}, {split})"
    columns = _GLUE_COLUMNS[task.name]
    _hub_columns(ds, (*columns, "label"), where)
    names = _hub_names(ds, "label", where)
    if tuple(names) != task.label_names:
        raise _fail(where, f"label names {names} differ from the expected {list(task.label_names)}")
    return [_classification(task, row[columns[0]], row[columns[-1]] if task.kind == "pair" else None, row["label"],
                            f"{where} row {i}") for i, row in enumerate(ds)]


def _hub_conll(task: TaskInfo, split: str) -> list[TaggedSentence]:
    ds = _hub_dataset(task, split)
    where = f"{task.hub_path} ({split})"
    _hub_columns(ds, ("tokens", "ner_tags"), where)
    names = _hub_names(ds, "ner_tags", where)
    unknown = [n for n in names if n not in CONLL_TAGS]
    if unknown:
        raise _fail(where, f"tag names {unknown} are not CoNLL-2003 IOB2 tags ({', '.join(CONLL_TAGS)})")
    sentences = []
    for i, row in enumerate(ds):
        ids = row["ner_tags"]
        if any(not 0 <= t < len(names) for t in ids):
            raise _fail(f"{where} row {i}", f"tag ids {_show(ids)} are outside 0..{len(names) - 1}")
        sentences.append(_tagged(row["tokens"], [names[t] for t in ids], f"{where} row {i}"))
    return sentences


def _hub_squad(task: TaskInfo, split: str) -> list[SquadExample]:
    ds = _hub_dataset(task, split)
    where = f"{task.hub_path} ({split})"
    _hub_columns(ds, ("id", "title", "context", "question", "answers"), where)
    examples = []
    for i, row in enumerate(ds):
        answers = row["answers"] if isinstance(row["answers"], dict) else {}
        examples.append(_squad(row["id"], row["title"], row["context"], row["question"], answers.get("text"),
                               answers.get("answer_start"), f"{where} row {i}"))
    return examples


# ---------------------------------------------------------------------------------------------------- loading
def _load(name: str, split: str, data_dir: str | os.PathLike | None,
          local: Callable[[TaskInfo, Path, str], list], hub: Callable[[TaskInfo, str], list]) -> list:
    task = TASKS[name]
    check_choice("split", split, task.splits)
    root = resolve_data_dir(data_dir)
    if root is not None:
        return local(task, _local_file(task, split, root), split)
    return hub(task, split)


def load_sst2(split: str = "train", data_dir: str | os.PathLike | None = None) -> list[ClassificationExample]:
    """GLUE SST-2 `split` ('train' 67,349 or 'validation' 872 sentences), labels 0 = negative, 1 = positive."""
    return _load("sst2", split, data_dir, lambda t, p, s: _read_glue_tsv(t, p), _hub_classification)


def load_rte(split: str = "train", data_dir: str | os.PathLike | None = None) -> list[ClassificationExample]:
    """GLUE RTE `split` ('train' 2,490 or 'validation' 277 pairs), labels 0 = entailment, 1 = not_entailment."""
    return _load("rte", split, data_dir, lambda t, p, s: _read_glue_tsv(t, p), _hub_classification)


def load_conll2003(split: str = "train", data_dir: str | os.PathLike | None = None) -> list[TaggedSentence]:
    """CoNLL-2003 English NER `split` ('train' 14,041, 'validation' 3,250, 'test' 3,453 sentences) with IOB2
    tags; the `-DOCSTART-` lines between documents are dropped."""
    return _load("conll2003", split, data_dir, lambda t, p, s: _read_conll(p), _hub_conll)


def load_squad(split: str = "train", data_dir: str | os.PathLike | None = None) -> list[SquadExample]:
    """SQuAD v1.1 `split` ('train' or 'validation'). From the hub: the real train (87,599) and dev (10,570)
    questions. Offline: the dev file split by article (see the module docstring): 'train' the first 40
    articles (8,981 questions), 'validation' the last 8 (1,589)."""
    return _load("squad", split, data_dir, lambda t, p, s: _split_squad_dev(p, s), _hub_squad)


_LOADERS: dict[str, Callable[..., list]] = {"sst2": load_sst2, "rte": load_rte, "conll2003": load_conll2003,
                                            "squad": load_squad}


def quick_slice(examples: Sequence[_E], size: int) -> list[_E]:
    """`size` examples spread evenly over `examples` (the first, then every len/size-th): a small, fixed,
    deterministic sample that still spans the whole split (all articles, both labels, every document)."""
    if size < 1:
        raise ValueError(f"size={size} must be at least 1")
    n = len(examples)
    return list(examples) if n <= size else [examples[i * n // size] for i in range(size)]


def load_task(name: str, split: str, data_dir: str | os.PathLike | None = None, *,
              quick: bool = False) -> list[Example]:
    """The examples of task `name` ('sst2', 'rte', 'conll2003', 'squad'; see `TASKS`) in `split`, from
    `data_dir` or `$BERTLIB_DATA_DIR` when set, else from the hub. `quick=True` (pass
    `bertlib.helpers.quick_mode()`) returns `quick_slice` of `QUICK_SIZES[split]` examples, for CI."""
    check_choice("task", name, TASK_NAMES)
    examples = _LOADERS[name](split, data_dir)
    return quick_slice(examples, QUICK_SIZES[split]) if quick else examples
