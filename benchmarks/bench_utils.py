"""Helpers shared by the benchmark scripts: process settings, interleaved timing, peak memory and JSON results that
say how they were made. What the benchmarks share with the studies (the machine, provenance, where published
results live) is `docs/publish.py`."""

import copy
import itertools
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))  # docs/publish.py: what every report shares, studies and benchmarks alike
import publish  # noqa: E402

from bertlib.utils.devices import autocast as bertlib_autocast  # noqa: E402
from bertlib.utils.devices import onednn_matmuls  # noqa: E402

RESULTS_DIR = Path(__file__).resolve().parent / "results"
machine_info = publish.machine_info
# bertlib with torch's own fp32 products (MKL), as with BERTLIB_ONEDNN=0: the oneDNN lever's before, timed beside it
WITHOUT_ONEDNN = "bertlib_without_onednn"


def configure_process(threads: int | None, flush_denormal: bool = True) -> dict[str, Any]:
    """Apply the process-wide settings that both sides of a comparison share, and return them.

    Flushing denormals matters on CPUs: tiny gradients (a softmax over a large vocabulary makes many) would
    otherwise fall into the slow denormal range of the floating-point unit."""
    if threads is not None:
        torch.set_num_threads(threads)
    flushed = torch.set_flush_denormal(flush_denormal)
    return {"threads": torch.get_num_threads(), "flush_denormal": flush_denormal and flushed}


def synchronize(device: torch.device) -> None:
    "Wait for queued GPU work, so that a wall-clock time covers it."
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_times(
    fns: dict[str, Callable[[], object]],
    warmup: int,
    repeats: int,
    device: torch.device,
    cpu_times: dict[str, list[float]] | None = None,
) -> dict[str, list[float]]:
    """Seconds per call of each function, timed in turn (a, b, a, b, ...) after `warmup` untimed rounds, so
    that load from other processes and clock changes hit every side alike. `cpu_times`, when given, gets the CPU
    seconds this process spent in each call (`time.process_time`): the time it computed, without the time other
    processes held its core."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for round_ in range(warmup + repeats):
        for name, fn in fns.items():
            synchronize(device)
            start, cpu = time.perf_counter(), time.process_time()
            fn()
            synchronize(device)
            if round_ >= warmup:
                times[name].append(time.perf_counter() - start)
                if cpu_times is not None:
                    cpu_times.setdefault(name, []).append(time.process_time() - cpu)
    return times


def training_step(
    model: torch.nn.Module, batches: list[dict], device: torch.device, bf16: bool, ours: bool = False
) -> Callable[[], None]:
    """A step function: forward and the model's own loss (under bf16 autocast if asked; for bertlib's model, `ours`,
    on a CPU under bertlib's own `autocast`, which runs the products in oneDNN, as its training loop does), backward,
    AdamW step, on the next of `batches` (cycled). Nothing in it waits for the GPU."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=device.type == "cuda")
    if bf16:
        autocast = torch.autocast(device.type, dtype=torch.bfloat16)
    else:
        autocast = bertlib_autocast(device) if ours and device.type == "cpu" else nullcontext()
    cycle = itertools.cycle(batches)

    def step() -> None:
        with autocast:
            loss = model(**next(cycle)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def without_onednn(
    model: torch.nn.Module, batches: list[dict], device: torch.device, bf16: bool
) -> dict[str, Callable[[], None]]:
    """The oneDNN lever's before, to time in the same run as its after: where bertlib's fp32 products run in oneDNN (a
    CPU, `onednn_matmuls`), {WITHOUT_ONEDNN: a training step of a copy of bertlib's `model` with torch's own products};
    elsewhere nothing."""
    if device.type != "cpu" or bf16 or not onednn_matmuls():
        return {}
    return {WITHOUT_ONEDNN: training_step(copy.deepcopy(model), batches, device, bf16)}


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


def provenance(parser: Any, args: Any, *names: str, full: bool = True) -> dict[str, Any]:
    """How a benchmark's result is made (`publish.provenance`), from its command line: the settings `names` (repeats,
    warm-up, batches) as given; trial mode when one is below the script's default or `full` is false (a run that is
    not the whole suite), full mode otherwise. Its threads are those `--threads` asks for, when it does: the command
    line is read before `configure_process` sets them, so torch's count would still be its default."""
    given = {name: getattr(args, name) for name in names}
    mode = publish.mode_of({name: parser.get_default(name) for name in names}, given) if full else "trial"
    made = publish.provenance(mode, **given)
    if getattr(args, "threads", None):
        made["threads"] = args.threads
    return made


def write_results(path: str | Path, data: dict[str, Any]) -> Path:
    """Write a results JSON file atomically. A trial's result (its `provenance` says so) never lands where published
    results live: it goes to a temporary folder instead, which is said (`publish.trial_destination`)."""
    mode = data.get("provenance", {}).get("mode", "trial")
    return publish.write_json(publish.trial_destination(path, mode), data, indent=2)


def load_average() -> list[float]:
    "The machine's load average over 1, 5 and 15 minutes: how many processes wanted a CPU besides the benchmark."
    return [round(x, 2) for x in os.getloadavg()]
