"""The scores of the fine-tuning tasks: accuracy (SST-2, RTE), entity-level precision, recall and F1 (CoNLL-2003,
with `seqeval`) and SQuAD v1.1's exact match and F1 with the official answer normalisation.

All scores are fractions in [0, 1]; multiply by 100 for the percentages papers print.

NER mode. `entity_scores` uses seqeval's default mode, the one that reproduces the CoNLL shared task's
`conlleval` script, with which published CoNLL-2003 F1 scores are computed (and which HF's `run_ner` and the
`evaluate` seqeval metric use): an `I-TYPE` after `O` or after another type still starts an entity there.
On gold CoNLL-2003 data, which is valid IOB2, the two modes find the same entities; they differ only on
ill-formed predictions, which `mode="strict"` (seqeval's strict IOB2 scheme) drops instead of counting.

SQuAD. `normalize_answer` follows the official v1.1 evaluation's description: lower case, drop ASCII punctuation,
drop the articles a/an/the, collapse whitespace. Exact match and F1 of a prediction are the maximum over the
gold answers; a question without a prediction scores 0, as in the official script.

Written by hand (no notebook exports it).
"""

__all__ = [
    "NER_MODES",
    "accuracy",
    "entity_scores",
    "entity_report",
    "normalize_answer",
    "exact_match",
    "answer_f1",
    "squad_scores",
    "task_scores",
]

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..utils.checks import check_choice
from .load import TASK_NAMES, TASKS, ClassificationExample, SquadExample, TaggedSentence

NER_MODES = ("conlleval", "strict")


def accuracy(predictions: Sequence[int], labels: Sequence[int]) -> float:
    "The fraction of `predictions` equal to `labels` (two sequences of class ids of the same length)."
    if len(predictions) != len(labels):
        raise ValueError(f"{len(predictions)} predictions for {len(labels)} labels")
    if not labels:
        raise ValueError("accuracy of no examples is undefined")
    return sum(int(p) == int(t) for p, t in zip(predictions, labels, strict=True)) / len(labels)


# ---------------------------------------------------------------------------------------------------- NER
def _check_tag_sequences(
    true_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]]
) -> tuple[list[list[str]], list[list[str]]]:
    if len(true_tags) != len(pred_tags):
        raise ValueError(f"{len(pred_tags)} predicted sentences for {len(true_tags)} gold sentences")
    if not true_tags:
        raise ValueError("entity scores of no sentences are undefined")
    for i, (t, p) in enumerate(zip(true_tags, pred_tags, strict=True)):
        if isinstance(t, str) or isinstance(p, str):
            raise ValueError(f"sentence {i}: pass one list of tags per sentence, not a string")
        if len(t) != len(p):
            raise ValueError(f"sentence {i}: {len(p)} predicted tags for {len(t)} gold tags")
    return [list(t) for t in true_tags], [list(p) for p in pred_tags]


def _seqeval_mode(mode: str) -> dict[str, Any]:
    check_choice("mode", mode, NER_MODES)
    if mode == "conlleval":
        return {}
    from seqeval.scheme import IOB2

    return {"mode": "strict", "scheme": IOB2}


def entity_scores(
    true_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]], *, mode: str = "conlleval"
) -> dict[str, Any]:
    """Entity-level scores of predicted IOB2 tags against gold ones, one list of tags per sentence, by seqeval.

    Returns `precision`, `recall` and `f1` (micro-averaged over entities: an entity counts only when its type
    and both boundaries are right), `token_accuracy` (the fraction of tags right, `O` included, a number that
    flatters a tagger) and `per_type`: for each entity type its `precision`, `recall`, `f1` and `support` (the
    number of gold entities). `mode` is 'conlleval' (default; see the module docstring) or 'strict'."""
    import warnings

    from seqeval.metrics import accuracy_score, classification_report

    y_true, y_pred = _check_tag_sequences(true_tags, pred_tags)
    with warnings.catch_warnings():  # seqeval warns when a type has no gold or no predicted entity; that is 0 here
        warnings.simplefilter("ignore")
        report = classification_report(y_true, y_pred, output_dict=True, zero_division=0, **_seqeval_mode(mode))
    micro = report.pop("micro avg")
    per_type = {
        name: {
            "precision": float(s["precision"]),
            "recall": float(s["recall"]),
            "f1": float(s["f1-score"]),
            "support": int(s["support"]),
        }
        for name, s in sorted(report.items())
        if not name.endswith(" avg")
    }
    return {
        "precision": float(micro["precision"]),
        "recall": float(micro["recall"]),
        "f1": float(micro["f1-score"]),
        "token_accuracy": float(accuracy_score(y_true, y_pred)),
        "per_type": per_type,
    }


def entity_report(
    true_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]], *, mode: str = "conlleval", digits: int = 4
) -> str:
    "seqeval's text report: precision, recall, F1 and support per entity type, then the averages."
    import warnings

    from seqeval.metrics import classification_report

    y_true, y_pred = _check_tag_sequences(true_tags, pred_tags)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return classification_report(y_true, y_pred, digits=digits, zero_division=0, **_seqeval_mode(mode))


# -------------------------------------------------------------------------------------------------- SQuAD
_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation: lower case, remove punctuation, remove the articles a/an/the, and collapse
    runs of whitespace, in that order (so "The U.S.!" becomes "us")."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _golds(gold_answers: Iterable[str] | str) -> list[str]:
    golds = [gold_answers] if isinstance(gold_answers, str) else list(gold_answers)
    if not golds:
        raise ValueError("a question needs at least one gold answer")
    return golds


def exact_match(prediction: str, gold_answers: Iterable[str] | str) -> float:
    "1.0 when the normalised prediction equals a normalised gold answer, else 0.0."
    predicted = normalize_answer(prediction)
    return float(any(predicted == normalize_answer(g) for g in _golds(gold_answers)))


def _token_f1(prediction: str, gold: str) -> float:
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    same = sum((Counter(predicted) & Counter(expected)).values())
    if same == 0:  # also when either side normalises to nothing (SQuAD v1.1's rule)
        return 0.0
    precision, recall = same / len(predicted), same / len(expected)
    return 2 * precision * recall / (precision + recall)


def answer_f1(prediction: str, gold_answers: Iterable[str] | str) -> float:
    """The best token-overlap F1 of the prediction against any gold answer, on normalised text split at
    whitespace (tokens counted with their repeats)."""
    return max(_token_f1(prediction, g) for g in _golds(gold_answers))


def squad_scores(predictions: Mapping[str, str], examples: Iterable[SquadExample]) -> dict[str, float | int]:
    """`exact_match` and `f1` averaged over `examples`, from `predictions` (question id -> answer text).

    A question without a prediction scores 0 (as in the official script); a prediction for an id that is not
    among the examples is an error. Also returns `count` (questions) and `answered` (questions predicted)."""
    examples = list(examples)
    if not examples:
        raise ValueError("SQuAD scores of no questions are undefined")
    ids = {e.id for e in examples}
    unknown = [qid for qid in predictions if qid not in ids]
    if unknown:
        raise ValueError(f"{len(unknown)} predictions are for questions not among the examples, e.g. {unknown[0]!r}")
    em = f1 = 0.0
    for e in examples:
        if e.id in predictions:
            golds = [a.text for a in e.answers]
            em += exact_match(predictions[e.id], golds)
            f1 += answer_f1(predictions[e.id], golds)
    return {
        "exact_match": em / len(examples),
        "f1": f1 / len(examples),
        "count": len(examples),
        "answered": sum(e.id in predictions for e in examples),
    }


# ----------------------------------------------------------------------------------------- one entry point
def task_scores(task: str, predictions: Any, examples: Sequence[Any], *, mode: str = "conlleval") -> dict[str, Any]:
    """The scores of `task` (see `bertlib.tasks.load.TASKS[task].metric`) for predictions on `examples`:

    - 'sst2', 'rte': `predictions` are class ids, one per `ClassificationExample` -> {'accuracy'}
    - 'conll2003': `predictions` are tag lists (tag names, or ids into `CONLL_TAGS`), one per `TaggedSentence`
      -> `entity_scores`
    - 'squad': `predictions` map question ids to answer texts -> `squad_scores`"""
    check_choice("task", task, TASK_NAMES)
    metric = TASKS[task].metric
    kinds = {"accuracy": ClassificationExample, "entity_f1": TaggedSentence, "squad": SquadExample}
    wrong = next((i for i, e in enumerate(examples) if not isinstance(e, kinds[metric])), None)
    if wrong is not None:
        raise ValueError(
            f"{task} scores {kinds[metric].__name__}s, but example {wrong} is {type(examples[wrong]).__name__}"
        )
    if metric == "accuracy":
        return {"accuracy": accuracy(predictions, [e.label for e in examples])}
    if metric == "entity_f1":
        names = TASKS[task].label_names
        pred_tags = [[names[t] if isinstance(t, int) else t for t in p] for p in predictions]
        return entity_scores([e.tags for e in examples], pred_tags, mode=mode)
    return squad_scores(predictions, examples)
