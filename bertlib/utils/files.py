"""Files that a crash never leaves half-written: atomic writes (a temporary file beside the target, flushed and
renamed over it) and flushed folder entries, so that a rename survives a power cut. Run folders, checkpoints,
tokenizers, configurations and results files are all written through it. Files get the permissions the umask gives
(`open_up`), also where a writer makes them private. A write that found no room (a full disk, a used-up quota, the
process's file-size limit) is told apart from other failures and described in words (`no_room`, `no_room_reason`).

Written by hand; notebook 00 introduces it. It imports nothing from bertlib.
"""

__all__ = ["usual_mode", "open_up", "atomic_write", "fsync_dir", "no_room", "no_room_reason"]

import errno
import os
import resource
import shutil
import tempfile
import traceback
from pathlib import Path


def usual_mode(folder: bool = False) -> int:
    "The permissions the process's umask gives a new file (0666 less the umask) or folder (0777 less it)."
    mask = os.umask(0)
    os.umask(mask)
    return (0o777 if folder else 0o666) & ~mask


def open_up(path: str | os.PathLike) -> None:
    """Give a file, or a folder and the files in it, the permissions the umask gives (`usual_mode`): writers that make
    theirs private (`tempfile`; safetensors 0.8 writes 0600) would keep other users, and services, from reading them."""
    path = Path(path)
    if path.is_dir():
        for file in path.iterdir():
            open_up(file)
    os.chmod(path, usual_mode(folder=path.is_dir()))


def atomic_write(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write `data` (text as UTF-8, or bytes) to `path` atomically: a temporary file, fsync, then a rename. A failure is
    an OSError that names `path`."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, usual_mode())  # mkstemp makes files private (0600)
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        if err.filename is None and err.errno is not None:  # "[Errno 27] File too large" names no file
            raise OSError(err.errno, err.strerror, str(path)) from err
        raise  # an error without a number keeps its own words
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


_NO_ROOM = {errno.EFBIG: "size limit", errno.EDQUOT: "quota", errno.ENOSPC: "disk"}


def _size_limit() -> int | None:
    "The largest file this process may write (`ulimit -f`), or None where there is no limit."
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def _largest_file(path: Path) -> int:
    if path.is_dir():
        return max((p.stat().st_size for p in path.rglob("*") if p.is_file()), default=0)
    return path.stat().st_size if path.is_file() else 0


def _mount_point(path: Path) -> Path:
    path = path.resolve()
    while not path.exists():
        path = path.parent
    while not os.path.ismount(path):
        path = path.parent
    return path


def no_room(err: BaseException, path: str | os.PathLike) -> str | None:
    """What stopped a write under `path` that raised `err`, if it found no room: "size limit" (a file reached the
    process's file-size limit, `ulimit -f`), "quota" (the user's disk quota is used up) or "disk" (the disk is full);
    None for any other failure. Writers say it in their own ways: an OSError's number, a message that quotes the
    system's words (safetensors'), or nothing (torch's zip writer): then the partial files tell, one at the size
    limit, or the disk left with next to no space. Ask before the partial files are removed."""
    cause: BaseException | None = err
    while cause is not None:  # the system's words may be in an error that this one was raised from or during
        if isinstance(cause, OSError) and cause.errno in _NO_ROOM:
            return _NO_ROOM[cause.errno]
        said = [kind for code, kind in _NO_ROOM.items() if os.strerror(code) in str(cause)]
        if said:
            return said[0]
        cause = cause.__cause__ or cause.__context__
    if not isinstance(err, OSError | RuntimeError):
        return None
    try:
        if (limit := _size_limit()) is not None and _largest_file(Path(path)) >= limit:
            return "size limit"
        return "disk" if shutil.disk_usage(_mount_point(Path(path))).free < 1 << 24 else None
    except OSError:
        return None


def no_room_reason(kind: str, err: BaseException, path: str | os.PathLike) -> str:
    """Why `path` could not be written, in words, for `no_room`'s `kind`: what stopped it (for a full disk, the space it
    has once the partial files are gone) and how to make room. The writers' files that `err` still holds open (in the
    frames of its traceback, as torch's zip writer's) are let go first, so that their space counts as free."""
    cause: BaseException | None = err
    while cause is not None:
        traceback.clear_frames(cause.__traceback__)
        cause = cause.__cause__ or cause.__context__
    mount = _mount_point(Path(path))
    if kind == "size limit":
        limit = _size_limit()
        size = "" if limit is None else f" ({limit / 2**20:,.1f} MiB)"
        return (
            f"a file reached the file-size limit of this process{size}, so {path} could not be written; raise the "
            f"limit (`ulimit -f unlimited`)"
        )
    if kind == "quota":
        return (
            f"the disk quota on {mount} is used up, so {path} could not be written; free space within the quota or "
            f"have it raised"
        )
    try:
        free = f"{shutil.disk_usage(mount).free / 2**20:,.1f} MiB free once the partial files were removed"
    except OSError:
        free = "its free space unknown"
    return f"the disk mounted at {mount} is full ({free}), so {path} could not be written; free space on it"
