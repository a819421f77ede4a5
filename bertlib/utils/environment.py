"""What the environment asks of bertlib: quick mode, the local data folder, where notebooks put their runs, and the
machine it runs on.

Written by hand; notebook 00 introduces it. It imports nothing from bertlib, and torch only to describe the machine.
"""

__all__ = [
    "QUICK_ENV",
    "DATA_DIR_ENV",
    "RUNS_DIR_ENV",
    "quick_mode",
    "resolve_data_dir",
    "runs_dir",
    "idle_cpus",
    "machine",
]

import os
import platform
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


def idle_cpus(seconds: float = 0.5) -> float | None:
    """How many CPUs sit idle over the next `seconds` (this process sleeping meanwhile), from the kernel's counters
    (Linux's /proc/stat); None where they cannot be read."""

    def counters() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as f:  # "cpu user nice system idle iowait irq softirq steal ..."
            ticks = [int(t) for t in f.readline().split()[1:9]]
        return sum(ticks), ticks[3] + ticks[4]

    try:
        total, idle = counters()
        time.sleep(seconds)
        total_after, idle_after = counters()
    except (OSError, ValueError, IndexError):
        return None
    return (os.cpu_count() or 1) * (idle_after - idle) / max(1, total_after - total)


def machine() -> str:
    "This machine in a line: CPU model and cores, GPU if any, torch version (notebooks print it with their results)."
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {os.cpu_count()} cores; {gpu}; torch {torch.__version__}"
