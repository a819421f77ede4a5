"""Helpers shared by the benchmark scripts: process settings, machine description, interleaved timing,
peak memory and JSON results."""

import datetime
import itertools
import json
import os
import platform
import resource
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from bertlib.utils.files import atomic_write

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def configure_process(threads: int | None, flush_denormal: bool = True) -> dict[str, Any]:
    """Apply the process-wide settings that both sides of a comparison share, and return them.

    Flushing denormals matters on CPUs: tiny gradients (a softmax over a large vocabulary makes many) would
    otherwise fall into the slow denormal range of the floating-point unit."""
    if threads is not None:
        torch.set_num_threads(threads)
    flushed = torch.set_flush_denormal(flush_denormal)
    return {"threads": torch.get_num_threads(), "flush_denormal": flush_denormal and flushed}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(device: torch.device) -> dict[str, Any]:
    "Where and when a benchmark ran: CPU model and cores, GPU, versions, date."
    info = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "cpu": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": device.type,
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def synchronize(device: torch.device) -> None:
    "Wait for queued GPU work, so that a wall-clock time covers it."
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_times(
    fns: dict[str, Callable[[], object]], warmup: int, repeats: int, device: torch.device
) -> dict[str, list[float]]:
    """Seconds per call of each function, timed in turn (a, b, a, b, ...) after `warmup` untimed rounds, so
    that load from other processes and clock changes hit every side alike."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for round_ in range(warmup + repeats):
        for name, fn in fns.items():
            synchronize(device)
            start = time.perf_counter()
            fn()
            synchronize(device)
            if round_ >= warmup:
                times[name].append(time.perf_counter() - start)
    return times


def training_step(model: torch.nn.Module, batches: list[dict], device: torch.device, bf16: bool) -> Callable[[], None]:
    """A step function: forward and the model's own loss (under bf16 autocast if asked), backward, AdamW step, on the
    next of `batches` (cycled). Nothing in it waits for the GPU."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=device.type == "cuda")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext()
    cycle = itertools.cycle(batches)

    def step() -> None:
        with autocast:
            loss = model(**next(cycle)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def repeated(fn: Callable[[], object], times: int) -> Callable[[], None]:
    "`fn` called `times` times in a row: one timed repeat of work too short to time alone."

    def run() -> None:
        for _ in range(times):
            fn()

    return run


def median(values: list[float]) -> float:
    return statistics.median(values)


def reset_peak_memory(device: torch.device) -> None:
    "Start a new peak-memory window (Linux lets a process reset its RSS high-water mark)."
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass  # then the peak is the process's lifetime peak, which still bounds the step's


def peak_memory(device: torch.device) -> int:
    "Peak bytes since `reset_peak_memory`: torch.cuda.max_memory_allocated on GPU, peak RSS of the process on CPU."
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def write_results(path: str | os.PathLike, data: dict[str, Any]) -> Path:
    "Write a results JSON file atomically."
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, json.dumps(data, indent=2) + "\n")
