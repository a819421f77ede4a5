"""The model of a run: which class a run's settings train (BERT's pre-training model, ELECTRA's, a task's head)
built fresh, or loaded from a checkpoint with its tokenizer for evaluation, prediction and export.

Written by hand: production plumbing that notebook 07 uses but does not show in full.
"""

__all__ = ["model_class", "build_model", "model_from_checkpoint", "run_checkpoint", "load_model"]

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
from ..utils.environment import command_line
from .checkpoints import best_checkpoint, checkpoints, latest_checkpoint, load_weights, read_newest
from .runs import RunConfig, RunError, is_run_folder, load_run
from .settings import objective_of


def model_class(cfg: RunConfig | None = None) -> type[nn.Module]:
    """The class of the model a run's settings train: `BertForPreTraining` (a distilled student too, and without
    settings), `ElectraForPreTraining` for an ELECTRA run, the head of its task for a fine-tuning run."""
    objective = objective_of(cfg)
    if objective == "electra":
        return ElectraForPreTraining
    return HEADS[TASKS[cfg.task].kind] if objective == "finetune" else BertForPreTraining


def build_model(model_config: BertConfig, cfg: RunConfig | None = None) -> nn.Module:
    """The model a run trains (`model_class`), with fresh weights: an ELECTRA run's with its generator's size, a
    fine-tuning run's head with the task's label names (`bertlib.model.heads.HEADS`)."""
    kind = model_class(cfg)
    if kind is ElectraForPreTraining:
        return kind(model_config, cfg.generator_size)
    if kind is BertForPreTraining or kind is BertForQuestionAnswering:
        return kind(model_config)
    task = TASKS[cfg.task]
    if kind is BertForSequenceClassification:
        return kind(model_config, task.label_names, pooling=cfg.pooling)
    return kind(model_config, task.label_names)


def _check_kind(checkpoint: Path, cfg: RunConfig | None) -> None:
    """Refuse to read a checkpoint into a model of another class than the one its run makes (an ELECTRA run's into
    BERT's pre-training model, say), naming both, rather than report weights that do not fit."""
    run = next((p for p in Path(checkpoint).parents if is_run_folder(p)), None)
    if run is None:
        return
    made, wanted = model_class(load_run(run)[1]), model_class(cfg)
    if made is not wanted:
        way = (
            f"score it with bertlib.evaluation.electra.evaluate_electra_run, or {command_line('evaluate', run)}"
            if made is ElectraForPreTraining
            else f"load it with bertlib.load_model({str(run)!r}), which builds the model its run makes"
        )
        raise RunError(
            f"{checkpoint} holds the weights of a {made.__name__} (what the run {run} trains), not of the "
            f"{wanted.__name__} asked for; {way}"
        )


def model_from_checkpoint(model_config: BertConfig, checkpoint: Path, cfg: RunConfig | None = None) -> nn.Module:
    """The model of a run (`build_model`) with the weights of `checkpoint`, or, if its writer rotated it away while it
    was read, of the run's newest checkpoint (`bertlib.train.checkpoints.read_newest`)."""
    _check_kind(checkpoint, cfg)
    model = build_model(model_config, cfg)
    read_newest(checkpoint, lambda found: load_weights(found, model))
    return model


def run_checkpoint(run_dir: str | os.PathLike, cfg: RunConfig, newest: bool = False) -> Path:
    """The checkpoint a run is used from: the newest of a pre-training run; the best validation's of a fine-tuning
    run (`best/`), or with `newest` its newest one. A fine-tuning run without a whole `best/` is refused rather than
    quietly read from another checkpoint."""
    if newest or objective_of(cfg) != "finetune":
        return latest_checkpoint(run_dir)
    best = best_checkpoint(run_dir)
    if best is None and not checkpoints(run_dir):
        return latest_checkpoint(run_dir)  # no checkpoint at all: it says so, as it does with --newest
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
