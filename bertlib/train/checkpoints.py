"""Checkpoints of a run: the weights and the training state of one step, written atomically with a SHA-256 checksum
of each file, rotated so that a kill never leaves a listed, broken one, and read back checked.

    checkpoints/step-0001000/
      model.safetensors      the weights (all that evaluation, fill-mask and export need), a tensor that several
                             modules share (ELECTRA's embeddings) stored once
      training_state.pt      optimiser, schedule, step and data position (what resuming needs)
      checksums.json         SHA-256 of the two files, checked when they are read

A checkpoint appears whole or not at all, so a step folder without its weights or checksums is damage (emptied by
hand, a copy cut short): readers name it (`incomplete_checkpoints`) rather than pass over it in silence. A reader
whose checkpoint its writer rotated away meanwhile reads the newest one instead (`read_newest`).

Written by hand: production plumbing that notebook 07 uses but does not show in full.
"""

__all__ = [
    "CHECKPOINT_PREFIX",
    "checkpoint_step",
    "checkpoints",
    "incomplete_checkpoints",
    "newest_incomplete",
    "clear_leftovers",
    "save_checkpoint",
    "read_newest",
    "load_weights",
    "load_training_state",
    "load_checkpoint",
    "write_checksums",
    "latest_checkpoint",
    "best_checkpoint",
    "best_validation",
]

import hashlib
import json
import os
import pickle
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from safetensors.torch import save_model as save_safetensors
from torch import nn

from ..utils.files import atomic_write, fsync_dir, open_up
from .runs import RunError, RunWarning, writing_into

CHECKPOINT_PREFIX = "step-"
WEIGHTS, TRAINING_STATE, CHECKSUMS = "model.safetensors", "training_state.pt", "checksums.json"


def _fsync_tree(folder: Path) -> None:
    for file in folder.iterdir():
        with open(file, "rb") as f:
            os.fsync(f.fileno())
    fsync_dir(folder)


def checkpoint_step(checkpoint: Path) -> int:
    "The step of a checkpoint folder, from its name."
    return int(checkpoint.name.removeprefix(CHECKPOINT_PREFIX))


def checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    "The complete checkpoints of a run (a step folder with its weights and checksums), oldest first."
    folder = Path(run_dir) / "checkpoints"
    found = folder.glob(f"{CHECKPOINT_PREFIX}*") if folder.is_dir() else []
    return sorted(
        p
        for p in found
        if p.name[len(CHECKPOINT_PREFIX) :].isdigit() and (p / WEIGHTS).is_file() and (p / CHECKSUMS).is_file()
    )


def incomplete_checkpoints(run_dir: str | os.PathLike) -> dict[Path, list[str]]:
    """The step folders of a run newer than its newest complete checkpoint that lack its weights or checksums, each
    with the files it lacks. A folder that its writer rotates away as it is looked at is not one of them."""
    folder = Path(run_dir) / "checkpoints"
    whole = checkpoints(run_dir)
    newest = checkpoint_step(whole[-1]) if whole else -1
    found = {}
    for step_dir in sorted(folder.glob(f"{CHECKPOINT_PREFIX}*")) if folder.is_dir() else []:
        if not step_dir.name[len(CHECKPOINT_PREFIX) :].isdigit() or checkpoint_step(step_dir) <= newest:
            continue
        missing = [name for name in (WEIGHTS, CHECKSUMS) if not (step_dir / name).is_file()]
        if missing and step_dir.is_dir():  # looked at after its files: a folder renamed away is not incomplete
            found[step_dir] = missing
    return found


def newest_incomplete(run_dir: str | os.PathLike) -> str | None:
    "The newest of `incomplete_checkpoints`, as a reader names it ('... is incomplete (... missing)'); None if none."
    found = incomplete_checkpoints(run_dir)
    if not found:
        return None
    step_dir, missing = list(found.items())[-1]
    return f"{step_dir} is incomplete ({', '.join(missing)} missing)"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_checksums(folder: Path) -> None:
    "Record the SHA-256 of every file of a checkpoint folder in its `checksums.json`."
    sums = {f.name: _sha256(f) for f in sorted(folder.iterdir()) if f.name != CHECKSUMS}
    atomic_write(folder / CHECKSUMS, json.dumps(sums, indent=1) + "\n")


def _remove(folder: Path) -> None:
    "Delete a folder so that no half-deleted copy is ever listed: rename it out of the way first (atomic)."
    trash = folder.with_name(f".trash-{folder.name}")
    shutil.rmtree(trash, ignore_errors=True)
    os.rename(folder, trash)
    fsync_dir(folder.parent)
    shutil.rmtree(trash)


def _clear(folder: Path) -> None:
    "Remove what a crash left in a checkpoints folder: a checkpoint cut short, or one half deleted."
    for leftover in [*folder.glob(".tmp-*"), *folder.glob(".trash-*")]:
        shutil.rmtree(leftover, ignore_errors=True)


def clear_leftovers(run_dir: str | os.PathLike) -> None:
    """Remove what a crash left in a run's checkpoint folders (its own and `best/`'s), which could hold the space a
    full disk needs back. Only the run's writer may call it, as it holds the run's lock."""
    for folder in (Path(run_dir) / "checkpoints", Path(run_dir) / "best" / "checkpoints"):
        if folder.is_dir():
            _clear(folder)


def save_checkpoint(
    run_dir: str | os.PathLike, model: nn.Module, training_state: dict, step: int, keep: int = 2
) -> Path:
    """Write `model`'s weights and `training_state` as checkpoint `step`, atomically and with checksums, then
    delete all but the newest `keep` checkpoints. A write that finds no room (a full disk, a quota, the file-size
    limit) is a one-line `RunError` that names it; the partial checkpoint is removed, so the run resumes from the one
    before once there is room. The files get the permissions the umask gives, as the rest of the run's."""
    folder = Path(run_dir) / "checkpoints"
    final = folder / f"{CHECKPOINT_PREFIX}{step:07d}"
    tmp = folder / f".tmp-{final.name}"
    if folder.is_dir():
        _clear(folder)
    with writing_into(tmp, final, "then continue the run with --resume"):
        tmp.mkdir(parents=True)
        # stores a shared tensor once (safetensors refuses shared memory), and a head's labels, which name its task
        save_safetensors(model, tmp / WEIGHTS, metadata=_labels_of(model))
        open_up(tmp / WEIGHTS)  # safetensors 0.8 makes it private (0600)
        torch.save(training_state, tmp / TRAINING_STATE)
        write_checksums(tmp)
        _fsync_tree(tmp)
    if final.exists():  # the same step saved again (e.g. a resumed run that stopped right after saving)
        _remove(final)
    os.rename(tmp, final)
    fsync_dir(folder)
    for old in checkpoints(run_dir)[:-keep]:
        _remove(old)
    return final


def _fall_back(checkpoint: Path) -> str:
    "The way out of a damaged checkpoint that keeps every file of it."
    return f"restore it from a backup, or move it out of {checkpoint.parent} to fall back to the checkpoint before it"


def _verified(checkpoint: Path, name: str) -> Path:
    "The path of a checkpoint's file, after checking it against the checksum recorded when it was written."
    path = checkpoint / name
    try:
        expected = json.loads((checkpoint / CHECKSUMS).read_text(encoding="utf-8"))[name]
        actual = _sha256(path)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise _unreadable(checkpoint, err) from err
    if actual != expected:
        raise RunError(
            f"checkpoint {checkpoint}: {name} does not match its checksum (the file is damaged); "
            f"{_fall_back(checkpoint)}"
        )
    return path


def _unreadable(checkpoint: Path, err: Exception) -> RunError:
    return RunError(
        f"checkpoint {checkpoint} is unreadable ({type(err).__name__}: {str(err)[:120]}); {_fall_back(checkpoint)}"
    )


def _labels_of(model: nn.Module) -> dict[str, str] | None:
    "What a checkpoint's weights record of `model` beside the tensors: a task head's label names."
    labels = getattr(model, "label_names", None)
    return None if labels is None else {"label_names": json.dumps(list(labels))}


def load_weights(checkpoint: Path, model: nn.Module) -> None:
    """Load a checkpoint's weights, checked against their checksum, into `model` (float16 is cast to its dtype). A head
    trained for other labels than `model`'s (a task edited in config.json) is refused."""
    path = _verified(checkpoint, WEIGHTS)
    try:
        weights = load_file(path)
        with safe_open(path, framework="pt") as f:
            saved = json.loads((f.metadata() or {}).get("label_names", "null"))
    except (OSError, SafetensorError, ValueError) as err:
        raise _unreadable(checkpoint, err) from err
    labels = getattr(model, "label_names", None)
    if saved is not None and labels is not None and list(labels) != saved:
        raise RunError(
            f"checkpoint {checkpoint} holds a head trained for the labels {', '.join(saved)}, but config.json makes "
            f"one for {', '.join(labels)} (was its task edited?); put config.json back as the run wrote it"
        )
    try:
        _fill(model, weights)
    except RuntimeError as err:
        raise RunError(
            f"checkpoint {checkpoint} does not fit the model of config.json ({str(err)[:160]}); was config.json edited?"
        ) from err


def _fill(model: nn.Module, weights: dict[str, torch.Tensor]) -> None:
    # not safetensors' load_model: its older versions refuse a float16 file for a float32 model, where
    # load_state_dict casts. A tensor that several names share was saved under one of them; loading it fills all.
    missing, unexpected = model.load_state_dict(weights, strict=False)
    own = model.state_dict()
    loaded = {own[name].data_ptr() for name in weights if name in own}
    unfilled = [name for name in missing if own[name].data_ptr() not in loaded]
    if unfilled or unexpected:
        raise RuntimeError(f"missing {unfilled[:3]}, unexpected {unexpected[:3]}")


def load_training_state(checkpoint: Path) -> dict:
    "A checkpoint's optimiser, schedule, step and data position, for resuming."
    path = _verified(checkpoint, TRAINING_STATE)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as err:
        raise _unreadable(checkpoint, err) from err


def load_checkpoint(checkpoint: Path, model: nn.Module) -> dict:
    "Load a checkpoint's weights into `model` and return its training state (what resuming needs)."
    load_weights(checkpoint, model)
    return load_training_state(checkpoint)


Read = TypeVar("Read")


def read_newest(checkpoint: Path, read: Callable[[Path], Read]) -> tuple[Read, Path]:
    """`read(checkpoint)` and the checkpoint read: `checkpoint`, or, if it could not be read and its run has a newer one
    by then (its writer saved a new checkpoint and rotated this one away while it was being read), the newest
    checkpoint of its run instead."""
    while True:
        try:
            return read(checkpoint), checkpoint
        except RunError:
            found = checkpoints(checkpoint.parent.parent)
            if not found or checkpoint_step(found[-1]) <= checkpoint_step(checkpoint):
                raise
            checkpoint = found[-1]


def latest_checkpoint(run_dir: str | os.PathLike) -> Path:
    """The newest complete checkpoint of a run. A newer step folder that is incomplete is named, in a `RunWarning`
    (one line on the command line), rather than passed over in silence."""
    found, incomplete = checkpoints(run_dir), newest_incomplete(run_dir)
    if not found and incomplete:
        raise RunError(
            f"{run_dir} has no complete checkpoint: {incomplete}; restore the files from a backup, or resume the run "
            f"(--resume), which starts it again from step 0"
        )
    if not found:
        raise RunError(f"{run_dir} has no checkpoint yet; wait for the first one or resume the run")
    if incomplete:
        warnings.warn(
            f"{incomplete}, so {found[-1].name}, the newest complete checkpoint, is read instead; restore the missing "
            f"files from a backup to read it",
            RunWarning,
            stacklevel=2,
        )
    return found[-1]


def best_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    "The checkpoint of a fine-tuning run's best validation so far, or None."
    found = checkpoints(Path(run_dir) / "best")
    return found[-1] if found else None


def best_validation(run_dir: str | os.PathLike) -> dict | None:
    "What a fine-tuning run's `best/` holds: the step and scores of its best validation; None without a whole `best/`."
    found = best_checkpoint(run_dir)
    return None if found is None else read_newest(found, load_training_state)[0]
