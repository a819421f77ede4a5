"""Generic helpers that every layer of bertlib may use: quick mode, the local data folder, files written
atomically, argument checks, the label that losses ignore, devices and mixed precision, and eval mode.

Written by hand (no notebook exports it); notebook 00 introduces it. It imports nothing from bertlib.
"""

__all__ = ["QUICK_ENV", "DATA_DIR_ENV", "IGNORE_INDEX", "quick_mode", "resolve_data_dir", "atomic_write", "fsync_dir",
           "check_choice", "child_seed", "resolve_device", "autocast", "to_device", "free_to_read", "eval_mode",
           "machine"]

import hashlib
import os
import platform
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import torch
from torch import nn

QUICK_ENV = "BERTLIB_QUICK"
DATA_DIR_ENV = "BERTLIB_DATA_DIR"
IGNORE_INDEX = -100  # the label of positions that no loss reads (PyTorch's cross-entropy and HF use it too)


def quick_mode() -> bool:
    "True when `BERTLIB_QUICK` asks notebooks and scripts to shrink their data and steps."
    return os.environ.get(QUICK_ENV, "").strip().lower() not in ("", "0", "false", "no")


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path | None:
    "The local data folder: `data_dir` if given, else `$BERTLIB_DATA_DIR`, else None (use the hub)."
    chosen = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV) or None
    return None if chosen is None else Path(chosen).expanduser()


def atomic_write(path: str | os.PathLike, data: str | bytes) -> Path:
    "Write `data` (text as UTF-8, or bytes) to `path` atomically: a temporary file, fsync, then a rename."
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes files private (0600); give the usual permissions
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def fsync_dir(path: str | os.PathLike) -> None:
    "Flush a folder's entries to disk, so that a rename or a deletion inside it survives a power cut."
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_choice(name: str, value: str, allowed: Sequence[str]) -> None:
    "Raise a ValueError that names the argument and lists the allowed values, unless `value` is one of them."
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not valid; choose one of {', '.join(map(repr, allowed))}")


def child_seed(*parts: int) -> int:
    "A 63-bit seed from integers (a seed, an epoch, an index, ...); neighbouring inputs give unrelated seeds."
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


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


def machine() -> str:
    "This machine in a line: CPU model and cores, GPU if any, torch version (notebooks print it with their results)."
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {os.cpu_count()} cores; {gpu}; torch {torch.__version__}"
