"""Where the fine-tuning tasks' examples come from: the original files in the local data folder (GLUE TSV, CoNLL
columns, the SQuAD JSON, split by article offline) and the HuggingFace hub's datasets, each turned into the
examples of `bertlib.tasks.examples` with one-line errors that name the file and row.

Written by hand; `bertlib.tasks.load` is the entry point.
"""

__all__ = [
    "local_file",
    "read_glue_tsv",
    "read_conll",
    "split_squad_dev",
    "hub_classification",
    "hub_conll",
    "hub_squad",
]

import json
from collections.abc import Sequence
from pathlib import Path

from ..utils.environment import DATA_DIR_ENV
from .examples import (
    CONLL_TAGS,
    RTE_LABELS,
    SQUAD_OFFLINE_EVAL_ARTICLES,
    ClassificationExample,
    SquadExample,
    TaggedSentence,
    TaskFileMissing,
    TaskInfo,
    classification_example,
    iob2_step,
    shown,
    squad_example,
    tagged_sentence,
    task_error,
)

# the hub's parquet export of a dataset that still has a loading script (which datasets >= 4 refuses)
SCRIPT_FALLBACK_REVISION = "refs/convert/parquet"


# ------------------------------------------------------------------------------------------------ local files
def local_file(task: TaskInfo, split: str, root: Path) -> Path:
    path = root / task.local_folder / task.local_files[split]
    if not path.is_file():
        files = ", ".join(sorted(set(task.local_files.values())))
        raise TaskFileMissing(
            f"{path}: no such file. Put the {task.name} files ({files}) in <DIR>/{task.local_folder}/ "
            f"and set {DATA_DIR_ENV}=<DIR> (or pass data_dir=<DIR>), or unset {DATA_DIR_ENV} to load "
            f"{task.hub_path} from the HuggingFace hub"
        )
    return path


def _lines(path: Path) -> list[str]:
    "The lines of a UTF-8 text file, without line ends; only '\\n' (and '\\r\\n') end a line."
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        line = path.read_bytes()[: err.start].count(b"\n") + 1
        raise task_error(f"{path}, line {line}", f"not UTF-8 text ({err.reason} at byte {err.start})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return [line.removesuffix("\r") for line in lines]


# GLUE's TSV columns (by header name) and the values its label column holds, in label order
_GLUE_COLUMNS = {"sst2": ("sentence",), "rte": ("sentence1", "sentence2")}
_GLUE_FILE_LABELS = {"sst2": ("0", "1"), "rte": RTE_LABELS}


def read_glue_tsv(task: TaskInfo, path: Path) -> list[ClassificationExample]:
    lines = _lines(path)
    needed = (*_GLUE_COLUMNS[task.name], "label")
    if not lines:
        raise task_error(f"{path}, line 1", f"the file is empty; expected the header {chr(9).join(needed)!r}")
    header = lines[0].split("\t")
    missing = [c for c in needed if c not in header]
    if missing:
        raise task_error(
            f"{path}, line 1",
            f"the header {shown(header, 100)} lacks the column(s) "
            f"{', '.join(map(repr, missing))} (GLUE {task.name} needs {', '.join(needed)})",
        )
    at = [header.index(c) for c in needed]
    values = _GLUE_FILE_LABELS[task.name]
    examples = []
    for number, line in enumerate(lines[1:], start=2):
        where = f"{path}, line {number}"
        cells = line.split("\t")
        if len(cells) != len(header):
            raise task_error(
                where, f"expected {len(header)} tab-separated columns as in the header, found {len(cells)}"
            )
        label = cells[at[-1]].strip()
        if label not in values:
            raise task_error(
                where,
                f"label {shown(label)} is not one of {', '.join(map(repr, values))} "
                f"({', '.join(f'{v}={n}' for v, n in zip(values, task.label_names, strict=True))})",
            )
        pair = cells[at[1]] if task.kind == "pair" else None
        examples.append(classification_example(task, cells[at[0]], pair, values.index(label), where))
    return examples


def read_conll(path: Path) -> list[TaggedSentence]:
    sentences: list[TaggedSentence] = []
    words: list[str] = []
    tags: list[str] = []
    first = 0

    def flush():
        if words:
            sentences.append(tagged_sentence(words, tags, f"{path}, line {first}"))
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
            raise task_error(
                f"{path}, line {number}",
                f"expected 4 space-separated columns (word POS chunk NER), found {len(cells)}: {shown(line)}",
            )
        if not words:
            first = number
        problem = iob2_step(tags[-1] if tags else "O", cells[3], CONLL_TAGS)
        if problem is not None:
            raise task_error(f"{path}, line {number}", problem)
        words.append(cells[0])
        tags.append(cells[3])
    flush()
    return sentences


def _read_squad_articles(path: Path) -> list[list[SquadExample]]:
    "The questions of a SQuAD v1.1 JSON file, article by article, checked."
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise task_error(f"{path}, line {err.lineno}", f"not valid JSON ({err.msg})") from None
    except UnicodeDecodeError as err:
        raise task_error(str(path), f"not UTF-8 text ({err.reason} at byte {err.start})") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise task_error(str(path), "not a SQuAD file: expected an object with a 'data' list of articles")
    articles: list[list[SquadExample]] = []
    seen: set[str] = set()
    for a, article in enumerate(data["data"]):
        where = f"{path}, article {a}"
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise task_error(where, "expected an object with 'title' and a 'paragraphs' list")
        questions = []
        for p, paragraph in enumerate(article["paragraphs"]):
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("qas"), list):
                raise task_error(f"{where}, paragraph {p}", "expected an object with 'context' and a 'qas' list")
            for qa in paragraph["qas"]:
                if not isinstance(qa, dict):
                    raise task_error(f"{where}, paragraph {p}", f"a question is {shown(qa)}, not an object")
                answers = qa.get("answers")
                if not isinstance(answers, list) or not all(isinstance(x, dict) for x in answers):
                    raise task_error(
                        f"{path}, question id {qa.get('id')}",
                        "'answers' must be a list of objects with 'text' and 'answer_start'",
                    )
                example = squad_example(
                    qa.get("id"),
                    article.get("title"),
                    paragraph.get("context"),
                    qa.get("question"),
                    [x.get("text") for x in answers],
                    [x.get("answer_start") for x in answers],
                    str(path),
                )
                if example.id in seen:
                    raise task_error(f"{path}, question id {example.id}", "the id is used twice")
                seen.add(example.id)
                questions.append(example)
        articles.append(questions)
    return articles


def split_squad_dev(path: Path, split: str) -> list[SquadExample]:
    articles = _read_squad_articles(path)
    if len(articles) <= SQUAD_OFFLINE_EVAL_ARTICLES:
        raise task_error(
            str(path),
            f"{len(articles)} articles; the offline train/validation split keeps the last "
            f"{SQUAD_OFFLINE_EVAL_ARTICLES} for validation and needs more than that",
        )
    cut = len(articles) - SQUAD_OFFLINE_EVAL_ARTICLES
    chosen = articles[:cut] if split == "train" else articles[cut:]
    return [q for article in chosen for q in article]


# ------------------------------------------------------------------------------------------------------ hub
def _hub_dataset(task: TaskInfo, split: str):
    "`datasets.load_dataset` for a task's split, with the parquet export for hub datasets that keep a script."
    help_offline = (
        f"without internet, put the files in <DIR>/{task.local_folder}/ and set {DATA_DIR_ENV}=<DIR> "
        f"(or pass data_dir=<DIR>)"
    )
    try:
        import datasets
    except ImportError as err:
        raise ImportError(
            f"loading {task.name} from the hub needs the `datasets` package (pip install datasets); {help_offline}"
        ) from err
    args = (task.hub_path,) if task.hub_config is None else (task.hub_path, task.hub_config)
    try:
        try:
            return datasets.load_dataset(*args, split=split)
        except RuntimeError as err:
            # datasets >= 4 refuses loading scripts (eriktks/conll2003 keeps one); the hub's parquet export of
            # the same data loads without it, with the same features
            if "scripts are no longer supported" not in str(err):
                raise
            return datasets.load_dataset(*args, split=split, revision=SCRIPT_FALLBACK_REVISION)
    except Exception as err:  # datasets raises many types (ConnectionError, OSError, HfHubHTTPError, ...)
        first = str(err).splitlines()[0] if str(err) else ""
        raise ConnectionError(
            f"could not load {task.hub_path!r} ({task.hub_config or 'default'}, {split}) from the "
            f"HuggingFace hub: {type(err).__name__}: {first}. If this machine is offline, "
            f"{help_offline}."
        ) from err


def _hub_columns(ds, needed: Sequence[str], where: str) -> None:
    missing = [c for c in needed if c not in ds.column_names]
    if missing:
        raise task_error(
            where,
            f"the hub dataset lacks the column(s) {', '.join(map(repr, missing))} "
            f"(it has {', '.join(ds.column_names)})",
        )


def _hub_names(ds, column: str, where: str) -> list[str]:
    "The class names of a ClassLabel column, or of the ClassLabel inside a sequence column."
    feature = ds.features[column]
    feature = getattr(feature, "feature", feature)  # List/Sequence(ClassLabel) -> ClassLabel
    names = getattr(feature, "names", None)
    if not names:
        raise task_error(where, f"column {column!r} holds {type(feature).__name__}, not class labels with names")
    return list(names)


def hub_classification(task: TaskInfo, split: str) -> list[ClassificationExample]:
    ds = _hub_dataset(task, split)
    where = f"{task.hub_path} ({task.hub_config}, {split})"
    columns = _GLUE_COLUMNS[task.name]
    _hub_columns(ds, (*columns, "label"), where)
    names = _hub_names(ds, "label", where)
    if tuple(names) != task.label_names:
        raise task_error(where, f"label names {names} differ from the expected {list(task.label_names)}")
    return [
        classification_example(
            task, row[columns[0]], row[columns[-1]] if task.kind == "pair" else None, row["label"], f"{where} row {i}"
        )
        for i, row in enumerate(ds)
    ]


def hub_conll(task: TaskInfo, split: str) -> list[TaggedSentence]:
    ds = _hub_dataset(task, split)
    where = f"{task.hub_path} ({split})"
    _hub_columns(ds, ("tokens", "ner_tags"), where)
    names = _hub_names(ds, "ner_tags", where)
    unknown = [n for n in names if n not in CONLL_TAGS]
    if unknown:
        raise task_error(where, f"tag names {unknown} are not CoNLL-2003 IOB2 tags ({', '.join(CONLL_TAGS)})")
    sentences = []
    for i, row in enumerate(ds):
        ids = row["ner_tags"]
        if any(not 0 <= t < len(names) for t in ids):
            raise task_error(f"{where} row {i}", f"tag ids {shown(ids)} are outside 0..{len(names) - 1}")
        sentences.append(tagged_sentence(row["tokens"], [names[t] for t in ids], f"{where} row {i}"))
    return sentences


def hub_squad(task: TaskInfo, split: str) -> list[SquadExample]:
    ds = _hub_dataset(task, split)
    where = f"{task.hub_path} ({split})"
    _hub_columns(ds, ("id", "title", "context", "question", "answers"), where)
    examples = []
    for i, row in enumerate(ds):
        answers = row["answers"] if isinstance(row["answers"], dict) else {}
        examples.append(
            squad_example(
                row["id"],
                row["title"],
                row["context"],
                row["question"],
                answers.get("text"),
                answers.get("answer_start"),
                f"{where} row {i}",
            )
        )
    return examples
