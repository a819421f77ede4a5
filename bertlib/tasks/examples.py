"""The fine-tuning tasks' vocabulary: which tasks there are (`TASKS`), their examples as plain dataclasses, the
one-line `TaskDataError`, and the checks every example passes whatever file or hub dataset it comes from.

Written by hand; `bertlib.tasks.load` is the entry point (it says where the data comes from).
"""

__all__ = [
    "TASK_NAMES",
    "SPLITS",
    "SST2_LABELS",
    "RTE_LABELS",
    "CONLL_TAGS",
    "ENTITY_TYPES",
    "SQUAD_OFFLINE_EVAL_ARTICLES",
    "QUICK_SIZES",
    "TaskDataError",
    "TaskFileMissing",
    "TaskInfo",
    "TASKS",
    "ClassificationExample",
    "TaggedSentence",
    "Answer",
    "SquadExample",
    "Example",
    "iob2_problem",
    "iob2_entities",
    "iob2_step",
    "shown",
    "task_error",
    "text_field",
    "classification_example",
    "tagged_sentence",
    "squad_example",
]

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

TASK_NAMES = ("sst2", "rte", "conll2003", "squad")
SPLITS = ("train", "validation", "test")
SST2_LABELS = ("negative", "positive")  # GLUE's order: label 0 = negative
RTE_LABELS = ("entailment", "not_entailment")  # GLUE's order: label 0 = entailment
# The tag ids of the hub's `eriktks/conll2003` (its `ner_tags` ClassLabel), so ids agree with HF models
CONLL_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
ENTITY_TYPES = ("PER", "ORG", "LOC", "MISC")
SQUAD_OFFLINE_EVAL_ARTICLES = 8
QUICK_SIZES = {"train": 512, "validation": 128, "test": 128}


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
    metric: Literal["accuracy", "entity_f1", "squad"]  # see bertlib.tasks.metrics.task_scores
    hub_path: str
    hub_config: str | None
    local_folder: str  # below the data folder
    local_files: Mapping[str, str] = field(default_factory=dict)  # split -> file name in local_folder


TASKS: dict[str, TaskInfo] = {
    "sst2": TaskInfo(
        "sst2",
        "GLUE SST-2 (sentiment of a movie-review sentence)",
        "sequence",
        ("train", "validation"),
        SST2_LABELS,
        "accuracy",
        "nyu-mll/glue",
        "sst2",
        "glue/SST-2",
        {"train": "train.tsv", "validation": "dev.tsv"},
    ),
    "rte": TaskInfo(
        "rte",
        "GLUE RTE (does sentence 1 entail sentence 2?)",
        "pair",
        ("train", "validation"),
        RTE_LABELS,
        "accuracy",
        "nyu-mll/glue",
        "rte",
        "glue/RTE",
        {"train": "train.tsv", "validation": "dev.tsv"},
    ),
    "conll2003": TaskInfo(
        "conll2003",
        "CoNLL-2003 English named entities (PER, ORG, LOC, MISC; IOB2 tags)",
        "token",
        ("train", "validation", "test"),
        CONLL_TAGS,
        "entity_f1",
        "eriktks/conll2003",
        None,
        "conll2003",
        {"train": "train.txt", "validation": "valid.txt", "test": "test.txt"},
    ),
    "squad": TaskInfo(
        "squad",
        "SQuAD v1.1 (answer = a span of the paragraph)",
        "span",
        ("train", "validation"),
        (),
        "squad",
        "rajpurkar/squad",
        "plain_text",
        "squad",
        {"train": "dev-v1.1.json", "validation": "dev-v1.1.json"},
    ),
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
def shown(value: Any, width: int = 60) -> str:
    "A value for a one-line message: its repr, cut to `width` characters."
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def task_error(where: str, problem: str) -> TaskDataError:
    return TaskDataError(" ".join(f"{where}: {problem}".split()))  # one line, whatever the data held


def iob2_step(previous: str, tag: str, allowed: Sequence[str]) -> str | None:
    "Why `tag` may not follow `previous` in IOB2 over the tags `allowed`, or None when it may."
    if tag not in allowed:
        return f"tag {shown(tag)} is not one of {', '.join(allowed)}"
    if tag.startswith("I-") and previous[2:] != tag[2:]:
        return (
            f"tag {tag!r} follows {previous!r}: in IOB2 an entity starts with B-{tag[2:]} "
            f"(IOB1 data? convert it to IOB2)"
        )
    return None


def iob2_problem(tags: Sequence[str], tag_names: Sequence[str] = CONLL_TAGS) -> tuple[int, str] | None:
    """`(position, why)` for the first tag that is not valid IOB2 over `tag_names`, or None when all are.

    IOB2 starts every entity with `B-TYPE`; `I-TYPE` may only follow `B-TYPE` or `I-TYPE` of the same type.
    (The original CoNLL-2003 files use IOB1, where `I-` may start an entity: such data is refused.)"""
    previous = "O"
    for i, tag in enumerate(tags):
        problem = iob2_step(previous, tag, tag_names)
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


def text_field(value: Any, what: str, where: str) -> str:
    "A text of an example, stripped; a `TaskDataError` naming `what` and `where` when it is not text, or blank."
    if not isinstance(value, str):
        raise task_error(where, f"{what} is {shown(value)}, not text")
    if not value.strip():
        raise task_error(where, f"{what} is empty")
    return value.strip()


def classification_example(task: TaskInfo, text: Any, text_pair: Any, label: int, where: str) -> ClassificationExample:
    if not isinstance(label, int) or isinstance(label, bool) or not 0 <= label < len(task.label_names):
        raise task_error(
            where,
            f"label {shown(label)} is outside the {task.name} labels "
            f"({', '.join(f'{i}={n}' for i, n in enumerate(task.label_names))})",
        )
    pair = None if task.kind == "sequence" else text_field(text_pair, "sentence2", where)
    return ClassificationExample(
        text_field(text, "sentence" if pair is None else "sentence1", where), label, task.label_names, pair
    )


def tagged_sentence(words: Sequence[Any], tags: Sequence[str], where: str) -> TaggedSentence:
    if not words:
        raise task_error(where, "the sentence has no words")
    if len(words) != len(tags):
        raise task_error(where, f"{len(words)} words but {len(tags)} tags")
    for i, word in enumerate(words):
        if not isinstance(word, str) or not word.strip():
            raise task_error(where, f"word {i} is {shown(word)}, not a word")
    problem = iob2_problem(tags)
    if problem is not None:
        raise task_error(where, f"word {problem[0]} ({words[problem[0]]!r}): {problem[1]}")
    return TaggedSentence(tuple(words), tuple(tags))


def squad_example(
    qid: Any, title: Any, context: Any, question: Any, texts: Any, starts: Any, where: str
) -> SquadExample:
    if not isinstance(qid, str) or not qid.strip():
        raise task_error(where, f"question id is {shown(qid)}, not a non-empty string")
    where = f"{where}, question id {qid}"
    if not isinstance(context, str) or not context.strip():
        raise task_error(where, "the context is empty")
    question = text_field(question, "the question", where)
    if not isinstance(texts, list | tuple) or not isinstance(starts, list | tuple) or len(texts) != len(starts):
        raise task_error(where, f"answers need as many texts as starts, got {shown(texts)} and {shown(starts)}")
    if not texts:
        raise task_error(where, "the question has no answer (SQuAD v2.0 data? only v1.1 is supported)")
    answers = []
    for text, start in zip(texts, starts, strict=True):
        if not isinstance(text, str) or not text.strip():
            raise task_error(where, f"answer text {shown(text)} is empty")
        valid_start = isinstance(start, int) and not isinstance(start, bool) and start >= 0
        if not valid_start or context[start : start + len(text)] != text:
            found = context[start : start + len(text)] if valid_start else None
            raise task_error(
                where,
                f"answer {shown(text)} does not occur at its start offset {shown(start)} "
                f"(the context has {shown(found)} there)",
            )
        answers.append(Answer(text, start))
    return SquadExample(qid, str(title or ""), context, question, tuple(answers))
