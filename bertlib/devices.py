"""Where tensors live and how they are computed: the device, mixed precision, moving batches, eval mode, and
whether a tensor's values can be read without stalling a GPU.

Written by hand; notebook 07 introduces it. It imports nothing from bertlib.
"""

__all__ = ["resolve_device", "autocast", "to_device", "free_to_read", "eval_mode"]

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch
from torch import nn


def resolve_device(name: str | torch.device = "auto") -> torch.device:
    "'auto' picks CUDA when there is a GPU, else the CPU; other names are passed to `torch.device`."
    if str(name) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"device={str(name)!r} is not a device PyTorch knows; use 'auto', 'cpu', 'cuda' or "
                         f"'cuda:N'") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={str(name)!r} was asked for but PyTorch sees no CUDA GPU; use 'cpu' or 'auto'")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device={str(name)!r} is not supported; use 'auto', 'cpu', 'cuda' or 'cuda:N'")
    return device


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
    "Run `model` in eval mode (no dropout) without gradients, and give it back in the mode it was in."
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)
