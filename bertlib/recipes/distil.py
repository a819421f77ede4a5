"""The distillation recipe (DistilBERT, Sanh et al. 2019): a student with fewer layers, initialised from a
pre-trained teacher's embeddings, heads and evenly spread layers, learns on packed MLM sequences to match the
teacher's softened predictions and last hidden states as well as the masked tokens. The student is a plain
`BertForPreTraining` in an ordinary run folder, so evaluation, fill-mask, fine-tuning and export work on it.

Written by hand around the pieces that notebook 12 builds (`bertlib.model.distillation`): the student, its
teacher's layers and the three losses, which `Distillation` weights for the training loop.
"""

__all__ = ["Distillation", "load_teacher", "distil"]

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch import nn

from ..data.tokenizer import PAD, PAD_ID
from ..evaluation.scores import validation_metrics
from ..model.bert import BertForPreTraining
from ..model.distillation import distillation_losses, student_from_teacher, teacher_layers
from ..train.factory import load_model
from ..train.lifecycle import open_run
from ..train.loop import fit
from ..train.runs import RunError, load_run
from ..train.settings import DistilConfig, objective_of
from .objectives import MaskedLM, freeze_nsp
from .pretrain import check_settings, pretraining_data


class Distillation(MaskedLM):
    """DistilBERT's objective for the training loop: `distillation_losses` weighted by `cfg`'s alphas. The loop
    adds up the parts it is given, so they are logged with their weights (`weighted_...`); validation scores the
    student's MLM as in any run."""

    parts = ("weighted_soft_loss", "weighted_mlm_loss", "weighted_cos_loss")

    def __init__(self, teacher: BertForPreTraining, cfg: DistilConfig, pad_token_id: int = PAD_ID):
        super().__init__(pad_token_id)
        self.teacher = teacher.eval().requires_grad_(False)  # a fixed target: no dropout, no gradients
        self.temperature, self.soft_targets = cfg.temperature, cfg.soft_targets
        self.weights = (cfg.alpha_ce, cfg.alpha_mlm, cfg.alpha_cos)

    def counts(self, batch: dict[str, torch.Tensor]) -> tuple[int, int, int]:
        masked, real = super().counts(batch)[0], int(batch["attention_mask"].sum())
        return real if self.soft_targets == "all" else masked, masked, real

    def losses(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        self.teacher.to(batch["input_ids"].device)  # the loop moves the student only
        parts = distillation_losses(model, self.teacher, batch, self.temperature, self.soft_targets)
        return tuple(weight * part for weight, part in zip(self.weights, parts, strict=True))


def load_teacher(run_dir: str | os.PathLike) -> tuple[BertForPreTraining, Tokenizer]:
    "A pre-training run's model (its newest checkpoint) and tokenizer; a `RunError` for a run that cannot teach."
    cfg = load_run(run_dir)[1]
    if objective_of(cfg) == "finetune":
        raise RunError(
            f"{run_dir} is a fine-tuning run ({cfg.task}); the teacher must be a pre-training run, whose "
            f"MLM head gives the soft targets"
        )
    if objective_of(cfg) == "electra":
        raise RunError(
            f"{run_dir} is an ELECTRA run, whose discriminator has no MLM head to learn from; give a BERT "
            f"pre-training run as the teacher"
        )
    return load_model(run_dir)


def distil(
    output_dir: str | os.PathLike,
    cfg: DistilConfig | None = None,
    *,
    data_dir: str | None = None,
    resume: bool = False,
    on_log: Callable[[dict], None] | None = None,
    show_progress: bool = True,
) -> list[dict]:
    """Distil the pre-training run `cfg.teacher` into a student (`student_from_teacher`) trained on WikiText-2 in
    the run folder `output_dir`, and return the metric records; validation scores the student's MLM.

    A new run needs an `output_dir` that does not exist or is empty; the student gets the teacher's tokenizer.
    `resume=True` continues the run from its newest checkpoint with its saved settings (`cfg` may change only
    `RESUMABLE_FIELDS`, or be a dict of them); the teacher must still be the model it was."""
    with open_run(output_dir, cfg, DistilConfig, resume, on_log, data_dir=data_dir) as run:
        cfg = run.cfg
        if not cfg.teacher:
            raise ValueError("a new distillation run needs cfg.teacher (--teacher): a bertlib pre-training run folder")
        if resume and not Path(cfg.teacher).exists():
            raise RunError(
                f"the teacher {cfg.teacher} that {run.run_dir / 'config.json'} records is not there; if it "
                f"moved, say where it is now with --teacher (cfg.teacher)"
            )
        if cfg.max_steps is None and cfg.epochs is None:
            raise ValueError(
                "a distillation run is as long as --max-steps or --epochs says; a time budget is not supported"
            )
        teacher, tokenizer = load_teacher(cfg.teacher)
        student = student_from_teacher(teacher, cfg.student_layers)
        check_settings(student.config, cfg)
        if resume and student.config != run.model_config:
            raise RunError(
                f"the teacher {cfg.teacher} is no longer the model {run.run_dir} was distilled from; "
                f"restore it or start a new run"
            )
        tokenizer = run.tokenizer or tokenizer
        data, valid_loader = pretraining_data(cfg, tokenizer, data_dir)  # checked before the run is recorded
        run.record(student.config, cfg, tokenizer)
        if on_log is not None and not resume:
            picked = teacher_layers(teacher.config.num_hidden_layers, student.config.num_hidden_layers)
            on_log({"step": 0, "event": f"a student of {len(picked)} layers, from the teacher's layers {picked}"})
        freeze_nsp(student)  # the NSP head and pooler stay the teacher's
        evaluate = partial(validation_metrics, loader=valid_loader, max_batches=cfg.eval_batches)
        return fit(
            student,
            data,
            Distillation(teacher, cfg, tokenizer.token_to_id(PAD)),
            cfg,
            evaluate=evaluate,
            run_dir=run.run_dir,
            resume=resume,
            on_log=on_log,
            show_progress=show_progress,
        )
