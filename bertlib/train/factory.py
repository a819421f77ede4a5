"""The model of a run: which class a run's settings train (BERT's pre-training model, ELECTRA's, a task's head)
built fresh, or loaded from a checkpoint with its tokenizer for evaluation, prediction and export.

Written by hand: production plumbing that notebook 07 uses but does not show in full.
"""

__all__ = ["build_model", "model_from_checkpoint", "run_checkpoint", "load_model"]

import os
from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch import nn

from ..model.bert import BertForPreTraining
from ..model.config import BertConfig
from ..model.electra import ElectraForPreTraining
from ..model.heads import HEADS, BertForQuestionAnswering, BertForSequenceClassification
from ..tasks.examples import TASKS
from ..utils.devices import resolve_device
from .checkpoints import best_checkpoint, latest_checkpoint, load_weights
from .runs import RunConfig, RunError, load_run
from .settings import FinetuneConfig, PretrainConfig


def build_model(model_config: BertConfig, cfg: RunConfig | None = None) -> nn.Module:
    """The model a run trains, with fresh weights: `BertForPreTraining` (a distilled student too), for an ELECTRA
    run `ElectraForPreTraining`, for a fine-tuning run the head of its task (`bertlib.model.heads.HEADS`) with the
    task's label names."""
    if isinstance(cfg, PretrainConfig) and cfg.objective == "electra":
        return ElectraForPreTraining(model_config, cfg.generator_size)
    if not isinstance(cfg, FinetuneConfig):
        return BertForPreTraining(model_config)
    task = TASKS[cfg.task]
    head = HEADS[task.kind]
    if head is BertForQuestionAnswering:
        return head(model_config)
    if head is BertForSequenceClassification:
        return head(model_config, task.label_names, pooling=cfg.pooling)
    return head(model_config, task.label_names)


def model_from_checkpoint(model_config: BertConfig, checkpoint: Path, cfg: RunConfig | None = None) -> nn.Module:
    "The model of a run (`build_model`) with the weights of `checkpoint`."
    model = build_model(model_config, cfg)
    load_weights(checkpoint, model)
    return model


def run_checkpoint(run_dir: str | os.PathLike, cfg: RunConfig, newest: bool = False) -> Path:
    """The checkpoint a run is used from: the newest of a pre-training run; the best validation's of a fine-tuning
    run (`best/`), or with `newest` its newest one. A fine-tuning run without a whole `best/` is refused rather than
    quietly read from another checkpoint."""
    if newest or not isinstance(cfg, FinetuneConfig):
        return latest_checkpoint(run_dir)
    best = best_checkpoint(run_dir)
    if best is None:
        raise RunError(
            f"{run_dir} has no whole best/ checkpoint (deleted, or cut short by a crash), so its best "
            f"validation's weights are gone; pass --newest (newest=True) to use its newest checkpoint "
            f"instead, or fine-tune it again"
        )
    return best


def load_model(
    run_dir: str | os.PathLike, device: str | torch.device = "cpu", *, newest: bool = False
) -> tuple[nn.Module, Tokenizer]:
    """A run's model in eval mode on `device`, and its tokenizer, from `run_checkpoint`: the newest checkpoint of a
    pre-training run (a `BertForPreTraining`, or an `ElectraForPreTraining`), the best one of a fine-tuning run (its
    task's head; with `newest`, the newest)."""
    model_config, cfg, tokenizer = load_run(run_dir)
    model = model_from_checkpoint(model_config, run_checkpoint(run_dir, cfg, newest), cfg)
    return model.to(resolve_device(device)).eval(), tokenizer
