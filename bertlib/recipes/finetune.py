"""The fine-tuning recipe: a task's head on a pre-trained encoder, trained by the same loop as pre-training
(`bertlib.train.loop.fit`) with the task's loss, validated each epoch with the task's metric, the best validation
kept as a checkpoint of its own. What a fine-tuned run predicts for new text is `bertlib.recipes.predict`.

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
from tqdm.auto import tqdm

from ..data.pretraining import PaddingCollator
from ..hf.folders import load_hf_encoder
from ..model.bert import IGNORE_INDEX
from ..model.config import BertConfig
from ..tasks.examples import TASKS
from ..tasks.features import TaskFeatures, best_spans, encode_task, word_predictions
from ..tasks.load import load_task, quick_slice
from ..tasks.metrics import task_scores
from ..train.checkpoints import CHECKSUMS, WEIGHTS, best_validation, checkpoint_step, checkpoints, save_checkpoint
from ..train.factory import build_model, load_model
from ..train.lifecycle import open_run
from ..train.loop import fit
from ..train.runs import NonFiniteLoss, RunError, check_vocabulary, is_run_folder, read_metrics, trained_length
from ..train.settings import FinetuneConfig, default_doc_stride, default_seq_len
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
def item_outputs(
    model: nn.Module, features: TaskFeatures, batch_size: int = 64, *, progress: bool = False
) -> list[Any]:
    """The head's outputs for every item of `features`, in order, cut to the item's length: class logits
    [labels], token logits [pieces, labels], or (start logits, end logits) [pieces] each. The items run longest first,
    `batch_size` at a time, each batch padded to its longest item, so that a batch computes little padding;
    `progress` shows a bar of the batches."""
    device = next(model.parameters()).device
    collate = PaddingCollator(model.config.pad_token_id)
    lengths = features.lengths()
    order = sorted(range(len(features)), key=lambda i: -lengths[i])
    outputs: list[Any] = [None] * len(features)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    with eval_mode(model):
        for chunk in tqdm(batches, unit="batch", disable=not progress, dynamic_ncols=True):
            batch = collate([features[i] for i in chunk])
            b = to_device(batch, device)
            with autocast(device):
                out = model(b["input_ids"], attention_mask=b["attention_mask"], token_type_ids=b["token_type_ids"])
            heads = [x for x in (out.logits, out.start_logits, out.end_logits) if x is not None]
            if not all(bool(x.isfinite().all()) for x in heads):
                raise NonFiniteLoss(
                    "the model's outputs are not finite, so its weights are broken (by a learning rate "
                    "too high, with --on-nan skip, say); train it again with a lower learning rate"
                )
            if out.logits is not None and out.logits.dim() == 2:
                items = list(out.logits.float().cpu())
            elif out.logits is not None:
                items = [logits[: lengths[i]] for logits, i in zip(out.logits.float().cpu(), chunk, strict=True)]
            else:
                starts, ends = out.start_logits.float().cpu(), out.end_logits.float().cpu()
                items = [(s[: lengths[i]], e[: lengths[i]]) for s, e, i in zip(starts, ends, chunk, strict=True)]
            for i, item in zip(chunk, items, strict=True):
                outputs[i] = item
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
