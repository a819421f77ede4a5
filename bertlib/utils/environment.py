"""What the environment asks of bertlib: quick mode, the local data folder, where notebooks put their runs, the
machine it runs on and how busy its CPUs are, and the command lines bertlib prints for a shell.

Written by hand; notebook 00 introduces it. It imports nothing from bertlib, and torch only to describe the machine.
"""

__all__ = [
    "QUICK_ENV",
    "DATA_DIR_ENV",
    "RUNS_DIR_ENV",
    "quick_mode",
    "resolve_data_dir",
    "runs_dir",
    "cpu_ticks",
    "idle_cpus",
    "CpuShare",
    "machine",
    "command_line",
]

import os
import platform
import shlex
import time
from pathlib import Path

QUICK_ENV = "BERTLIB_QUICK"
DATA_DIR_ENV = "BERTLIB_DATA_DIR"
RUNS_DIR_ENV = "BERTLIB_RUNS_DIR"


def quick_mode() -> bool:
    "True when `BERTLIB_QUICK` asks notebooks and scripts to shrink their data and steps."
    return os.environ.get(QUICK_ENV, "").strip().lower() not in ("", "0", "false", "no")


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path | None:
    "The local data folder: `data_dir` if given, else `$BERTLIB_DATA_DIR`, else None (use the hub)."
    chosen = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV) or None
    return None if chosen is None else Path(chosen).expanduser()


def runs_dir() -> Path:
    """Where the notebooks put the run folders they train: `$BERTLIB_RUNS_DIR` (the tests point it at a temporary
    folder, so a replay leaves the checkout as it was), else `runs` beside the notebook."""
    return Path(os.environ.get(RUNS_DIR_ENV) or "runs")


def cpu_ticks() -> tuple[int, int] | None:
    """The kernel's counters of all CPUs since boot (Linux's /proc/stat), in clock ticks: (all, idle); None where they
    cannot be read."""
    try:
        with open("/proc/stat", encoding="ascii") as f:  # "cpu user nice system idle iowait irq softirq steal ..."
            ticks = [int(t) for t in f.readline().split()[1:9]]
        return sum(ticks), ticks[3] + ticks[4]
    except (OSError, ValueError, IndexError):
        return None


def idle_cpus(seconds: float = 0.5) -> float | None:
    """How many CPUs sit idle over the next `seconds` (this process sleeping meanwhile), from the kernel's counters
    (`cpu_ticks`); None where they cannot be read."""
    before = cpu_ticks()
    time.sleep(seconds)
    after = cpu_ticks()
    if before is None or after is None:
        return None
    return (os.cpu_count() or 1) * (after[1] - before[1]) / max(1, after[0] - before[0])


class CpuShare:
    """How many CPUs other processes keep busy, measured between calls of `others` from the kernel's counters
    (`cpu_ticks`) less this process's own CPU time (all its threads), so that a process that computes with every CPU
    can still tell that another one competes with it."""

    def __init__(self) -> None:
        self.last = (cpu_ticks(), time.process_time(), time.perf_counter())

    def others(self) -> float | None:
        "The CPUs that other processes kept busy since the last call (or since this was made); None without counters."
        now = (cpu_ticks(), time.process_time(), time.perf_counter())
        (ticks, own, wall), self.last = self.last, now
        if ticks is None or now[0] is None or now[0][0] <= ticks[0] or now[2] <= wall:
            return None
        all_ticks, idle_ticks = now[0][0] - ticks[0], now[0][1] - ticks[1]
        busy = (os.cpu_count() or 1) * (all_ticks - idle_ticks) / all_ticks
        return max(0.0, busy - (now[1] - own) / (now[2] - wall))


def cpu_model() -> str:
    "The CPU's model name, as Linux reports it (or what `platform` knows elsewhere)."
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def machine() -> str:
    "This machine in a line: CPU model and cores, GPU if any, torch version (notebooks print it with their results)."
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{cpu_model()}, {os.cpu_count()} cores; {gpu}; torch {torch.__version__}"


def command_line(*words: str | os.PathLike) -> str:
    """A `python -m bertlib` command as a user pastes it into a shell: each word quoted where it needs it, and a path
    (an `os.PathLike`) that starts with '-' written as './-...', so that it is not read as an option."""
    quoted = []
    for word in words:
        text = os.fspath(word)
        if isinstance(word, os.PathLike) and text.startswith("-"):
            text = f"./{text}"
        quoted.append(shlex.quote(text))
    return " ".join(["python -m bertlib", *quoted])
