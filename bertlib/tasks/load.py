"""The fine-tuning tasks as plain Python examples: SST-2 (sentiment), RTE (entailment), CoNLL-2003 (named
entities) and SQuAD v1.1 (extractive question answering).

Each task loads from the HuggingFace hub by default and from `$BERTLIB_DATA_DIR` (or `data_dir=`) when that is
set, exactly as `bertlib.data.wikitext.load_wikitext2` does for WikiText-2. The local layout is the tasks' original
files:

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
TSV and CoNLL files, the question id for SQuAD, the row index for the hub; so does a split without examples. A
missing file raises `TaskFileMissing`, which is both a `TaskDataError` and a `FileNotFoundError`.

Written by hand (no notebook exports it). The entry point of the tasks' data: this one loads,
`bertlib.tasks.examples` holds the examples and their checks, `bertlib.tasks.sources` reads files and the hub.
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
    "load_sst2",
    "load_rte",
    "load_conll2003",
    "load_squad",
    "load_task",
    "quick_slice",
]

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from ..utils.checks import check_choice
from ..utils.environment import resolve_data_dir
from .examples import (
    CONLL_TAGS,
    ENTITY_TYPES,
    QUICK_SIZES,
    RTE_LABELS,
    SPLITS,
    SQUAD_OFFLINE_EVAL_ARTICLES,
    SST2_LABELS,
    TASK_NAMES,
    TASKS,
    Answer,
    ClassificationExample,
    Example,
    SquadExample,
    TaggedSentence,
    TaskDataError,
    TaskFileMissing,
    TaskInfo,
    iob2_entities,
    iob2_problem,
    task_error,
)
from .sources import (
    hub_classification,
    hub_conll,
    hub_squad,
    local_file,
    read_conll,
    read_glue_tsv,
    split_squad_dev,
)

_E = TypeVar("_E")


# ---------------------------------------------------------------------------------------------------- loading
def _load(
    name: str,
    split: str,
    data_dir: str | os.PathLike | None,
    local: Callable[[TaskInfo, Path, str], list],
    hub: Callable[[TaskInfo, str], list],
) -> list:
    task = TASKS[name]
    check_choice("split", split, task.splits)
    root = resolve_data_dir(data_dir)
    if root is not None:
        where = local_file(task, split, root)
        examples = local(task, where, split)
    else:
        where = f"{task.hub_path} ({task.hub_config or 'default'}, {split})"
        examples = hub(task, split)
    if not examples:  # a run on it would never take a step, or validate on nothing
        raise task_error(str(where), f"the {split} split holds no {task.name} examples; give it at least one")
    return examples


def load_sst2(split: str = "train", data_dir: str | os.PathLike | None = None) -> list[ClassificationExample]:
    """GLUE SST-2 `split` ('train' 67,349 or 'validation' 872 sentences), labels 0 = negative, 1 = positive."""
    return _load("sst2", split, data_dir, lambda t, p, s: read_glue_tsv(t, p), hub_classification)


def load_rte(split: str = "train", data_dir: str | os.PathLike | None = None) -> list[ClassificationExample]:
    """GLUE RTE `split` ('train' 2,490 or 'validation' 277 pairs), labels 0 = entailment, 1 = not_entailment."""
    return _load("rte", split, data_dir, lambda t, p, s: read_glue_tsv(t, p), hub_classification)


def load_conll2003(split: str = "train", data_dir: str | os.PathLike | None = None) -> list[TaggedSentence]:
    """CoNLL-2003 English NER `split` ('train' 14,041, 'validation' 3,250, 'test' 3,453 sentences) with IOB2
    tags; the `-DOCSTART-` lines between documents are dropped."""
    return _load("conll2003", split, data_dir, lambda t, p, s: read_conll(p), hub_conll)


def load_squad(split: str = "train", data_dir: str | os.PathLike | None = None) -> list[SquadExample]:
    """SQuAD v1.1 `split` ('train' or 'validation'). From the hub: the real train (87,599) and dev (10,570)
    questions. Offline: the dev file split by article (see the module docstring): 'train' the first 40
    articles (8,981 questions), 'validation' the last 8 (1,589)."""
    return _load("squad", split, data_dir, lambda t, p, s: split_squad_dev(p, s), hub_squad)


_LOADERS: dict[str, Callable[..., list]] = {
    "sst2": load_sst2,
    "rte": load_rte,
    "conll2003": load_conll2003,
    "squad": load_squad,
}


def quick_slice(examples: Sequence[_E], size: int) -> list[_E]:
    """`size` examples spread evenly over `examples` (the first, then every len/size-th): a small, fixed,
    deterministic sample that still spans the whole split (all articles, both labels, every document)."""
    if size < 1:
        raise ValueError(f"size={size} must be at least 1")
    n = len(examples)
    return list(examples) if n <= size else [examples[i * n // size] for i in range(size)]


def load_task(
    name: str, split: str, data_dir: str | os.PathLike | None = None, *, quick: bool = False
) -> list[Example]:
    """The examples of task `name` ('sst2', 'rte', 'conll2003', 'squad'; see `TASKS`) in `split`, from
    `data_dir` or `$BERTLIB_DATA_DIR` when set, else from the hub. `quick=True` (pass
    `bertlib.utils.environment.quick_mode()`) returns `quick_slice` of `QUICK_SIZES[split]` examples, for CI."""
    check_choice("task", name, TASK_NAMES)
    examples = _LOADERS[name](split, data_dir)
    return quick_slice(examples, QUICK_SIZES[split]) if quick else examples
