"""Whether other work has slowed a CPU run: its speed over stretches of training against the speed it started the
session at, and the CPUs that other processes kept busy meanwhile. Threads that share their cores with other work
wait for each other at every step, so the notice names the command that resumes the run with fewer threads.

Written by hand; the training loop (`bertlib.train.loop`) uses it.
"""

__all__ = ["PACE_SECONDS", "SLOWED", "BUSIER", "Pace"]

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..utils.environment import CpuShare
from .runs import RECIPES, resume_command
from .settings import TrainConfig

PACE_SECONDS = 5.0  # the shortest stretch of training whose speed is compared: the kernel counts CPU time in ticks
SLOWED = 0.5  # a speed under this share of the session's first ones counts as slowed
BUSIER = 0.5  # ... when other processes keep at least this many CPUs more busy than they did then


@dataclass
class Pace:
    """The speed of a CPU run over stretches of at least `PACE_SECONDS`, and the CPUs that other processes kept busy
    meanwhile (`bertlib.utils.environment.CpuShare`): the session's first three stretches are what it started at."""

    share: CpuShare
    since: tuple[int, float] = (0, 0.0)  # tokens and training seconds when the current stretch began
    first: list[tuple[float, float]] = field(default_factory=list)  # tokens/s and others' CPUs of the first stretches
    said: bool = False

    def notice(self, tokens: int, seconds: float, run_dir: Path | None, cfg: TrainConfig) -> str | None:
        """Once a stretch of `PACE_SECONDS` has passed since the last call that measured one: what to say, once, when
        the run trains at under `SLOWED` x the speed it started this session at while other processes keep `BUSIER`
        CPUs more busy than they did then; None otherwise. `tokens` and `seconds` are the run's totals so far."""
        if self.said or seconds - self.since[1] < PACE_SECONDS:
            return None
        speed = (tokens - self.since[0]) / (seconds - self.since[1])
        self.since, others = (tokens, seconds), self.share.others()
        if others is None:
            return None
        if len(self.first) < 3:
            self.first.append((speed, others))
            return None
        started, others_then = max(s for s, _ in self.first), min(o for _, o in self.first)
        if speed >= SLOWED * started or others < others_then + BUSIER:
            return None
        threads, cpus = torch.get_num_threads(), os.cpu_count() or 1
        fewer = max(1, min(threads - 1, int(cpus - others + 0.5)))
        way = (
            "stop it (Ctrl-C saves a checkpoint) and resume it with fewer threads: "
            + resume_command(run_dir, cfg, "--threads", str(fewer))
            if run_dir is not None and type(cfg) in RECIPES
            else f"train with fewer threads (--threads {fewer})"
        )
        self.said = True
        return (
            f"training slowed to {speed:,.0f} tokens/s from {started:,.0f} at the start of this session, while other "
            f"processes keep {others:.1f} of the {cpus} CPUs busy ({others_then:.1f} then): its {threads} threads "
            f"share cores with them and wait for each other at every step; {way}"
        )
