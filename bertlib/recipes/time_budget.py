"""A time budget turned into a number of steps: a few steps and one validation are timed on a throwaway copy of the
model, and the steps that fit in what is left are fixed before training starts, so the run is reproducible and
resumes exactly.

Written by hand; the pre-training recipe uses it.
"""

__all__ = ["CALIBRATION_STEPS", "steps_for_budget", "same_on_every_process"]

import math
import time
from dataclasses import replace

import torch
import torch.distributed as dist

from ..data.packed import PackedDataset
from ..data.pretraining import PretrainingDataset
from ..model.config import BertConfig
from ..train.factory import build_model
from ..train.settings import PretrainConfig
from ..utils.processes import world
from .objectives import train, validation_scores

CALIBRATION_STEPS = 20  # timed on a throwaway model to turn a time budget into steps


def same_on_every_process(value: int) -> int:
    "Rank 0's value on every process of a `torchrun` group (timings differ from process to process)."
    if world()[0] == 1:
        return value
    shared = [value]
    dist.broadcast_object_list(shared, src=0)
    return shared[0]


def steps_for_budget(
    model_config: BertConfig,
    cfg: PretrainConfig,
    dataset: PretrainingDataset | PackedDataset,
    valid_loader: torch.utils.data.DataLoader,
    seconds_left: float,
) -> tuple[int, dict]:
    """How many steps of `cfg` fit in `seconds_left`, validations included, timed on a throwaway copy of the
    model (`CALIBRATION_STEPS` steps and one validation); the timing run's own time is taken off first.
    Returns the steps and what was measured."""
    start = time.perf_counter()
    probe = build_model(model_config, cfg)
    timing = replace(
        cfg,
        max_steps=CALIBRATION_STEPS,
        epochs=None,
        time_budget=None,
        log_every=CALIBRATION_STEPS,
        eval_every=CALIBRATION_STEPS + 1,
        save_every=CALIBRATION_STEPS + 1,
    )
    train(probe, dataset, timing, show_progress=False)
    step_s = (time.perf_counter() - start) / CALIBRATION_STEPS
    start_eval = time.perf_counter()
    validation_scores(probe)(probe, valid_loader, cfg.eval_batches)
    eval_s = time.perf_counter() - start_eval
    left = seconds_left - (time.perf_counter() - start)
    steps = max(1, int(left / step_s))
    while steps > 1 and steps * step_s + math.ceil(steps / cfg.eval_every) * eval_s > left:
        steps = max(1, int((left - math.ceil(steps / cfg.eval_every) * eval_s) / step_s))
    return steps, {"seconds_per_step": step_s, "seconds_per_validation": eval_s, "seconds_left": left}
