"""Where tensors live and how they are computed: the device, the CPU threads, mixed precision (and on a CPU the
matrix products of `F.linear` through oneDNN), moving batches, eval mode, and whether a tensor's values can be read
without stalling a GPU.

Written by hand; notebook 07 introduces it. It imports from bertlib only the measure of idle CPUs.
"""

__all__ = [
    "TORCH_THREADS",
    "resolve_device",
    "cpu_threads",
    "onednn_matmuls",
    "autocast",
    "to_device",
    "free_to_read",
    "eval_mode",
]

import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

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
    omp = os.environ.get("OMP_NUM_THREADS", "").strip()
    if omp and not (omp.isdigit() and int(omp) > 0):  # torch ignores it and computes with its own count
        raise ValueError(
            f"OMP_NUM_THREADS={omp!r} is not a number of threads; set it to a positive integer, or unset it"
        )
    idle = None if omp else idle_cpus()
    return (TORCH_THREADS if idle is None else max(1, min(TORCH_THREADS, int(idle + 0.5)))), idle


def _onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    "`x @ weight.T + bias` by oneDNN's fp32 kernel, dense tensors in and out."
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    "`F.linear` whose products, forward and backward, run in oneDNN: the same arithmetic in fp32, other kernels."

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _onednn_linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        flat = grad.reshape(-1, grad.shape[-1])
        wants = ctx.needs_input_grad
        grad_x = _onednn_linear(grad, weight.t(), None) if wants[0] else None  # grad @ weight
        grad_weight = _onednn_linear(flat.t(), x.reshape(-1, x.shape[-1]).t(), None) if wants[1] else None  # grad.T @ x
        grad_bias = flat.sum(0) if ctx.has_bias and wants[2] else None
        return grad_x, grad_weight, grad_bias


class _OneDNNMatmuls(TorchFunctionMode):
    "Inside it, every fp32 `F.linear` on the CPU (each `nn.Linear`, the tied MLM decoder) runs in oneDNN."

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear and len(args) >= 2 and not torch.compiler.is_compiling():
            x, weight, bias = args[0], args[1], args[2] if len(args) > 2 else kwargs.get("bias")
            tensors = [t for t in (x, weight, bias) if t is not None]
            floats = all(t.dtype == torch.float32 and t.device.type == "cpu" for t in tensors)
            if floats and weight.dim() == 2 and x.numel() and weight.numel():  # oneDNN refuses empty products
                return _OneDNNLinear.apply(x, weight, bias)
        return func(*args, **kwargs)


def onednn_matmuls() -> bool:
    """Whether `autocast` runs a CPU's fp32 matrix products in oneDNN: when this torch has oneDNN, unless
    BERTLIB_ONEDNN=0. torch's own fp32 products call MKL, whose kernels on an AMD CPU reach about half the FLOP/s of
    oneDNN's, which use AVX-512 there (`benchmarks/roofline.py` measures both)."""
    available = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    return available and os.environ.get("BERTLIB_ONEDNN", "1") != "0"


def autocast(device: torch.device) -> AbstractContextManager:
    """bf16 autocast on CUDA (matrix products in bf16, reductions in fp32); fp32 elsewhere, on a CPU with the matrix
    products of `F.linear` in oneDNN (`onednn_matmuls`): the same numbers up to float rounding, twice as fast on some
    CPUs. Training, evaluation and prediction all compute under it."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return _OneDNNMatmuls() if device.type == "cpu" and onednn_matmuls() else nullcontext()


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
