"""Where tensors live and how they are computed: the device, the CPU threads, mixed precision, moving batches, eval
mode, and whether a tensor's values can be read without stalling a GPU.

Written by hand; notebook 07 introduces it. It imports from bertlib only the measure of idle CPUs.
"""

__all__ = ["TORCH_THREADS", "resolve_device", "cpu_threads", "autocast", "to_device", "free_to_read", "eval_mode"]

import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch
from torch import nn

from .environment import idle_cpus

TORCH_THREADS = torch.get_num_threads()  # torch's own count (the physical cores, or OMP_NUM_THREADS), before any change


def resolve_device(name: str | torch.device = "auto") -> torch.device:
    "'auto' picks CUDA when there is a GPU, else the CPU; other names are passed to `torch.device`."
    if str(name) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ValueError(
            f"device={str(name)!r} is not a device PyTorch knows; use 'auto', 'cpu', 'cuda' or 'cuda:N'"
        ) from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={str(name)!r} was asked for but PyTorch sees no CUDA GPU; use 'cpu' or 'auto'")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device={str(name)!r} is not supported; use 'auto', 'cpu', 'cuda' or 'cuda:N'")
    return device


def cpu_threads(requested: int | None = None) -> tuple[int, float | None]:
    """How many threads to compute with on the CPU, and the idle CPUs that were measured (None if none were):
    `requested`; else, if OMP_NUM_THREADS is set, torch's count; else as many of torch's threads as CPUs are idle now,
    at least one. A thread that shares its core with other work holds the others up at every synchronisation: beside
    one busy process, two threads on two cores trained 2.9x slower than when alone, one thread 1.1x (issue 28)."""
    if requested is not None:
        return requested, None
    idle = None if os.environ.get("OMP_NUM_THREADS") else idle_cpus()
    return (TORCH_THREADS if idle is None else max(1, min(TORCH_THREADS, int(idle + 0.5)))), idle


def autocast(device: torch.device) -> AbstractContextManager:
    "bf16 autocast on CUDA (matrix products in bf16, reductions in fp32); plain fp32 elsewhere."
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()


def to_device(batch: Mapping[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    "A batch's tensors on `device`; from pinned memory the copies overlap with the GPU's work."
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def free_to_read(tensor: torch.Tensor) -> bool:
    """Whether reading `tensor`'s values into Python costs nothing: on the CPU, outside `torch.compile`. On a GPU
    a read makes the host wait for the device at every step; inside `torch.compile` it splits the graph."""
    return tensor.device.type == "cpu" and not torch.compiler.is_compiling()


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Run `model` in eval mode (no dropout) without gradients, and give it back in training mode if it was in it. A
    model already in eval mode is left alone: switching walks every module, which costs more than a short input's
    forward pass (predicting one sentence)."""
    was_training = model.training
    if any(module.training for module in model.modules()):
        model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        if was_training:
            model.train()
