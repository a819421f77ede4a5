"""Files that a crash never leaves half-written: atomic writes (a temporary file beside the target, flushed and
renamed over it) and flushed folder entries, so that a rename survives a power cut. Run folders, checkpoints,
tokenizers, configurations and results files are all written through it.

Written by hand; notebook 00 introduces it. It imports nothing from bertlib.
"""

__all__ = ["umask", "atomic_write", "fsync_dir"]

import os
import tempfile
from pathlib import Path


def umask() -> int:
    "The process's file-mode creation mask, which files and folders made private (by `tempfile`) are opened up to."
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, data: str | bytes) -> Path:
    "Write `data` (text as UTF-8, or bytes) to `path` atomically: a temporary file, fsync, then a rename."
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~umask())  # mkstemp makes files private (0600); give the usual permissions
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
