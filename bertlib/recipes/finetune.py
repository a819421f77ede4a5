"""The fine-tuning recipe: a task's head on a pre-trained encoder, trained by the same loop as pre-training
(`bertlib.train.loop.fit`) with the task's loss, validated each epoch with the task's metric, the best validation
kept as a checkpoint of its own; and what a fine-tuned run predicts for new text.

Written by hand; the fine-tuning notebook uses it.
"""

__all__ = [
    "SELECTION_METRIC",
    "TaskObjective",
    "load_source",
    "item_outputs",
    "task_predictions",
    "evaluate_task",
    "query_len",
    "task_data",
    "finetune",
    "predict",
]

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import nn

from ..data.batching import make_loader
from ..data.pretraining import PaddingCollator
from ..data.tokenizer import pre_tokenize
from ..hf.folders import load_hf_encoder
from ..model.bert import IGNORE_INDEX
from ..model.config import BertConfig
from ..model.heads import HEADS
from ..tasks.examples import TASK_NAMES, TASKS, ClassificationExample, SquadExample, TaggedSentence, iob2_entities
from ..tasks.features import MAX_QUERY_LEN, TaskFeatures, best_spans, encode_task, word_predictions
from ..tasks.load import load_task, quick_slice
from ..tasks.metrics import task_scores
from ..train.checkpoints import CHECKSUMS, WEIGHTS, best_validation, checkpoint_step, checkpoints, save_checkpoint
from ..train.factory import build_model, load_model
from ..train.lifecycle import open_run
from ..train.loop import fit
from ..train.runs import NonFiniteLoss, RunError, check_vocabulary, is_run_folder, read_metrics, trained_length
from ..train.settings import FinetuneConfig, default_doc_stride, default_seq_len
from ..utils.checks import check_choice
from ..utils.devices import autocast, eval_mode, to_device

SELECTION_METRIC = {"sst2": "accuracy", "rte": "accuracy", "conll2003": "f1", "squad": "f1"}  # picks the best epoch


class TaskObjective:
    """A head's own loss for the training loop: a mean over sequences (classification, span) or over the
    labelled tokens (tagging), so gradient accumulation weighs micro-batches by what they hold."""

    def __init__(self, task: str, pad_token_id: int):
        self.parts = (f"{task}_loss",)
        self.per_token = TASKS[task].kind == "token"
        self.collate = PaddingCollator(pad_token_id, pad_to_multiple_of=8)

    def counts(self, batch: dict[str, torch.Tensor]) -> tuple[int]:
        return (int((batch["labels"] != IGNORE_INDEX).sum()) if self.per_token else len(batch["input_ids"]),)

    def losses(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor]:
        inputs = {key: value for key, value in batch.items() if key != "input_ids"}
        return (model(batch["input_ids"], **inputs).loss,)


def load_source(source: str | os.PathLike) -> tuple[BertConfig, dict[str, torch.Tensor], Tokenizer]:
    """The encoder to fine-tune: its `BertConfig`, its weights (state-dict keys `bert.*` among others) and its
    tokenizer, from a bertlib run folder (pre-trained: its newest checkpoint; fine-tuned: its best) or an HF BERT
    checkpoint (folder or hub id). A file, or one checkpoint folder of a bertlib run, is refused with a `RunError`."""
    path = Path(source)
    if path.is_file():
        raise RunError(f"{source} is a file; give a folder (a bertlib run folder or an HF BERT folder) or a hub id")
    if is_run_folder(path):
        model, tokenizer = load_model(path)
        return model.config, model.state_dict(), tokenizer
    if (path / WEIGHTS).is_file() and (path / CHECKSUMS).is_file():
        run = next((str(p) for p in path.parents if is_run_folder(p)), "its run folder")
        raise RunError(
            f"{source} is one checkpoint of a bertlib run; give the run folder ({run}), whose newest "
            f"checkpoint (a fine-tuning run: its best) is used"
        )
    try:
        return load_hf_encoder(source)
    except OSError as err:
        raise RunError(
            f"{source} is neither a bertlib run folder nor an HF BERT checkpoint that loads "
            f"({str(err).splitlines()[0][:160]}); give a run folder (python -m bertlib pretrain "
            f"--output-dir DIR), an HF BERT folder, or a hub id such as google/bert_uncased_L-4_H-256_A-4"
        ) from err


@torch.no_grad()
def item_outputs(model: nn.Module, features: TaskFeatures, batch_size: int = 64) -> list[Any]:
    """The head's outputs for every item of `features`, in order, cut to the item's length: class logits
    [labels], token logits [pieces, labels], or (start logits, end logits) [pieces] each."""
    device = next(model.parameters()).device
    collate = PaddingCollator(model.config.pad_token_id, pad_to_multiple_of=8)
    loader = make_loader(features, batch_size, collate, features.lengths, group_by_length=False, shuffle=False)
    outputs: list[Any] = []
    with eval_mode(model):
        for batch in loader:
            b = to_device(batch, device)
            with autocast(device):
                out = model(b["input_ids"], attention_mask=b["attention_mask"], token_type_ids=b["token_type_ids"])
            heads = [x for x in (out.logits, out.start_logits, out.end_logits) if x is not None]
            if not all(bool(x.isfinite().all()) for x in heads):
                raise NonFiniteLoss(
                    "the model's outputs are not finite, so its weights are broken (by a learning rate "
                    "too high, with --on-nan skip, say); train it again with a lower learning rate"
                )
            lengths = batch["attention_mask"].sum(1).tolist()
            if out.logits is not None and out.logits.dim() == 2:
                outputs += list(out.logits.float().cpu())
            elif out.logits is not None:
                outputs += [logits[:n] for logits, n in zip(out.logits.float().cpu(), lengths, strict=True)]
            else:
                outputs += [
                    (s[:n], e[:n])
                    for s, e, n in zip(
                        out.start_logits.float().cpu(), out.end_logits.float().cpu(), lengths, strict=True
                    )
                ]
    return outputs


def task_predictions(
    task: str, outputs: Sequence[Any], features: TaskFeatures, examples: Sequence[Any], *, max_answer_len: int = 30
) -> Any:
    """Outputs of `item_outputs` turned into what `task_scores` reads: class ids, tag lists, or answer texts
    by question id."""
    kind = TASKS[task].kind
    if kind in ("sequence", "pair"):
        return [int(logits.argmax()) for logits in outputs]
    if kind == "token":
        names = TASKS[task].label_names
        return [
            word_predictions(logits.argmax(-1).tolist(), meta["word_ids"], len(example.words), names)
            for logits, meta, example in zip(outputs, features.meta, examples, strict=True)
        ]
    starts, ends = zip(*outputs, strict=True)
    contexts = {e.id: e.context for e in examples}
    spans = best_spans(starts, ends, features.meta, max_answer_len=max_answer_len)
    return {qid: contexts[qid][start:end] for qid, (start, end) in spans.items()}


def evaluate_task(
    model: nn.Module,
    task: str,
    features: TaskFeatures,
    examples: Sequence[Any],
    *,
    batch_size: int = 64,
    max_answer_len: int = 30,
) -> dict[str, Any]:
    "The task's scores (`bertlib.tasks.metrics.task_scores`) of `model` on encoded `examples`."
    outputs = item_outputs(model, features, batch_size)
    return task_scores(
        task, task_predictions(task, outputs, features, examples, max_answer_len=max_answer_len), examples
    )


def query_len(max_query_len: int, max_seq_len: int) -> int:
    """The question pieces a SQuAD window keeps: `max_query_len`, and never so many that no piece of the paragraph
    fits beside them and the three special tokens. Training and `predict` cut a question alike."""
    return min(max_query_len, max_seq_len - 4)


def _examples(cfg: FinetuneConfig, split: str, limit: int | None, data_dir: str | None) -> list[Any]:
    examples = load_task(cfg.task, split, data_dir)
    return quick_slice(examples, limit) if limit else examples


def task_data(
    cfg: FinetuneConfig,
    tokenizer: Tokenizer,
    model_config: BertConfig,
    data_dir: str | None = None,
    *,
    trained: int | None = None,
) -> tuple[FinetuneConfig, TaskFeatures, TaskFeatures, list[Any]]:
    """A run's training and validation features and its validation examples, with `cfg`'s defaults filled in: the
    sequence length (384 for SQuAD, as BERT, else 128, but never past `trained`, the length the encoder was
    pre-trained on: the positions beyond it are untrained), SQuAD's stride (a third of it) and a validation and a
    checkpoint each epoch."""
    if cfg.time_budget is not None or cfg.epochs is None and cfg.max_steps is None:
        raise ValueError("fine-tuning runs for a number of epochs or steps (time budgets are for pre-training)")
    trained = trained or model_config.max_position_embeddings
    max_seq_len = cfg.max_seq_len or min(default_seq_len(cfg.task), trained)
    if max_seq_len > model_config.max_position_embeddings:
        raise ValueError(
            f"max_seq_len={max_seq_len} is longer than the model's max_position_embeddings="
            f"{model_config.max_position_embeddings}"
        )
    if max_seq_len > trained and not cfg.untrained_positions:
        raise ValueError(
            f"max_seq_len={max_seq_len} is longer than the {trained} tokens {cfg.source} was pre-trained "
            f"on, so the positions past {trained} are untrained; use --max-seq-len {trained} or less "
            f"(long SQuAD paragraphs slide in windows, --doc-stride), or pass --untrained-positions to "
            f"see why"
        )
    train_examples = _examples(cfg, "train", cfg.train_examples, data_dir)
    eval_examples = _examples(cfg, "validation", cfg.eval_examples, data_dir)
    encode = dict(
        doc_stride=cfg.doc_stride or default_doc_stride(max_seq_len),
        max_query_len=query_len(cfg.max_query_len, max_seq_len),
    )
    train_features = encode_task(cfg.task, train_examples, tokenizer, max_seq_len, **encode)
    eval_features = encode_task(cfg.task, eval_examples, tokenizer, max_seq_len, **encode)
    per_epoch = math.ceil(len(train_features) / cfg.batch_size)
    cfg = replace(
        cfg,
        max_seq_len=max_seq_len,
        doc_stride=encode["doc_stride"],
        eval_every=cfg.eval_every or per_epoch,
        save_every=cfg.save_every or per_epoch,
    )
    return cfg, train_features, eval_features, eval_examples


def _keep_best(
    run_dir: Path, model: nn.Module, metric: str, on_log: Callable[[dict], None] | None
) -> Callable[[dict], None]:
    """An `on_log` that saves the model in `run_dir/best` whenever a validation beats the best so far, then logs on.
    The best so far is `best/`'s; if `best/` was lost, the best validation up to the newest checkpoint, so that a
    resumed run never puts a worse model there (it says so)."""
    kept = best_validation(run_dir)
    if kept is not None:
        best = kept["scores"][metric]
    else:
        saved = checkpoints(run_dir)
        last = checkpoint_step(saved[-1]) if saved else 0
        earlier = [
            r for r in read_metrics(run_dir / "metrics.jsonl") if r.get("split") == "validation" and r["step"] <= last
        ]
        best = max((r[metric] for r in earlier), default=-math.inf)
        if earlier and on_log is not None:
            on_log(
                {
                    "event": f"{run_dir / 'best'} is missing: only a validation above its {metric} of {best:.4f} "
                    f"will fill it again"
                }
            )

    def log(entry: dict) -> None:
        nonlocal best
        if entry.get("split") == "validation" and entry[metric] > best:
            best = entry[metric]
            scores = {k: v for k, v in entry.items() if isinstance(v, int | float)}
            save_checkpoint(run_dir / "best", model, {"step": entry["step"], "scores": scores}, entry["step"], keep=1)
        if on_log is not None:
            on_log(entry)

    return log


def finetune(
    output_dir: str | os.PathLike,
    cfg: FinetuneConfig | None = None,
    *,
    data_dir: str | None = None,
    resume: bool = False,
    on_log: Callable[[dict], None] | None = None,
    show_progress: bool = True,
) -> list[dict]:
    """Fine-tune `cfg.source`'s encoder (or, with `cfg.init="random"`, the same architecture from random
    weights) on `cfg.task` into the run folder `output_dir`, and return the metric records.

    Validates after every epoch (or `eval_every` steps) and keeps the best validation's weights in
    `output_dir/best` (`bertlib.train.checkpoints.best_checkpoint`); `resume=True` continues a stopped run from its
    newest checkpoint, with the saved settings (`cfg` may change only `RESUMABLE_FIELDS`, or be a dict of the fields
    to change)."""
    with open_run(output_dir, cfg, FinetuneConfig, resume, on_log, data_dir=data_dir) as run:
        cfg, weights = run.cfg, None
        if resume:
            model_config, tokenizer = run.model_config, run.tokenizer
        elif not cfg.source:
            raise ValueError(
                "a new fine-tuning run needs cfg.source (--from): a bertlib run folder, an HF BERT folder or a hub id"
            )
        else:
            model_config, weights, tokenizer = load_source(cfg.source)
            check_vocabulary(tokenizer, model_config, cfg.source)
        trained = None if resume else trained_length(cfg.source, model_config)
        cfg, train_features, eval_features, eval_examples = task_data(
            cfg, tokenizer, model_config, data_dir, trained=trained
        )
        run.record(model_config, cfg, tokenizer)
        torch.manual_seed(cfg.seed)
        model = build_model(model_config, cfg)
        if weights is None and not checkpoints(run.run_dir):  # resumed before the first checkpoint: start over
            weights = load_source(cfg.source)[1]
        if weights is not None and cfg.init == "pretrained":
            new_weights = model.load_encoder(weights)
            if on_log is not None:
                on_log({"step": 0, "event": f"new weights, not in {cfg.source}: {', '.join(new_weights)}"})
        evaluate = partial(
            evaluate_task,
            task=cfg.task,
            features=eval_features,
            examples=eval_examples,
            max_answer_len=cfg.max_answer_len,
        )
        records = fit(
            model,
            train_features,
            TaskObjective(cfg.task, tokenizer.token_to_id("[PAD]")),
            cfg,
            evaluate=evaluate,
            run_dir=run.run_dir,
            resume=resume,
            on_log=_keep_best(run.run_dir, model, SELECTION_METRIC[cfg.task], on_log),
            show_progress=show_progress,
        )
    if not any("loss" in r for r in records):  # with --on-nan skip, every step was skipped: nothing was learned
        raise NonFiniteLoss(
            f"every step of {run.run_dir} was skipped: its loss or gradient was never finite, so the "
            f"model learned nothing; train it again with a lower learning rate"
        )
    return records


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
