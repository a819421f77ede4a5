"""The life of a run folder that every recipe (pre-training, distillation, fine-tuning) shares: join the process
group `torchrun` describes; take the folder's lock, so that one process at a time writes it; for a new run, check
that the folder is free before anything is written, then make it whole at once; for a resumed one, read its settings
back (a change is allowed to `RESUMABLE_FIELDS` only, and the length may not end before the newest checkpoint) and
record the new ones; choose the CPU threads; at the end, release the lock and leave the process group.

Written by hand: production plumbing that the recipes use.
"""

__all__ = ["RunSession", "lock_path", "open_run"]

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
from tokenizers import Tokenizer

from ..model.config import BertConfig
from ..utils.devices import cpu_threads, resolve_device
from ..utils.processes import init_distributed, world
from .checkpoints import checkpoint_step, checkpoints, load_training_state
from .runs import (
    RunConfig,
    RunError,
    absolute_references,
    check_new_run,
    create_run,
    load_run,
    resumed_config,
    write_run_config,
)


def _length(cfg: RunConfig) -> str:
    return f"{cfg.max_steps:,} steps" if cfg.max_steps is not None else f"{cfg.epochs:g} epochs"


@dataclass
class RunSession:
    """A run being trained in this process: its folder, whether it resumes, and (when it resumes) the model config,
    settings and tokenizer it was made with."""

    run_dir: Path
    resume: bool
    model_config: BertConfig | None = None
    cfg: RunConfig | None = None
    tokenizer: Tokenizer | None = None
    on_log: Callable[[dict], None] | None = None

    def record(self, model_config: BertConfig, cfg: RunConfig, tokenizer: Tokenizer) -> None:
        """Write the run's settings (rank 0 only): a new run's folder with its `config.json` and tokenizer, all at
        once; a resumed run's `config.json` with what changed (a longer run, another device), a new length said."""
        if world()[1] != 0:
            return
        if self.resume:
            saved = load_run(self.run_dir)[1]
            if (cfg.max_steps, cfg.epochs) != (saved.max_steps, saved.epochs) and self.on_log is not None:
                self.on_log(
                    {
                        "event": f"the run's length changes from {_length(saved)} to {_length(cfg)}: the "
                        f"learning-rate schedule is recomputed for the new length, so from here on the "
                        f"run differs from one made that long from the start"
                    }
                )
            write_run_config(self.run_dir, model_config, cfg)
        else:
            create_run(self.run_dir, model_config, cfg, tokenizer)


def lock_path(run_dir: str | os.PathLike) -> Path:
    "The lock file of a run folder: beside it, so that it exists before a new run's folder does."
    run_dir = Path(run_dir).resolve()
    return run_dir.with_name(f".{run_dir.name}.lock")


def _lock(run_dir: Path, on_log: Callable[[dict], None] | None) -> int:
    """Take the run folder's lock (an advisory `flock`, which the system drops when its process ends, however it
    ends) and write this process's id into it; return its file descriptor. A lock file that still names a process
    was left by a run that was killed: it is taken over, and `on_log` hears of it."""
    path = lock_path(run_dir)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise RunError(
                    f"{run_dir} is being written by another process (pid {holder}); wait for it to end, "
                    f"or stop it, before training into this folder"
                ) from None
            if path.exists() and os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
            os.close(fd)  # its holder deleted it as we opened it: open the one that is there now
    except OSError as err:
        reason = (
            f"{err.filename} is not a folder"
            if isinstance(err, FileExistsError | NotADirectoryError)
            else f"{err.strerror} ({path})"
        )
        raise RunError(f"cannot write the run folder {run_dir}: {reason}") from err
    stale = os.pread(fd, 32, 0).decode(errors="replace").strip()
    if stale and on_log is not None:
        on_log(
            {
                "event": f"took over the lock of {run_dir} from process {stale}, which ended without releasing it "
                f"(killed or crashed)"
            }
        )
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _unlock(run_dir: Path, fd: int) -> None:
    "Release the lock: delete the file while still holding it, so that no one locks a file that is going away."
    lock_path(run_dir).unlink(missing_ok=True)
    os.close(fd)


def _set_threads(cfg: RunConfig, resume: bool, on_log: Callable[[dict], None] | None) -> RunConfig:
    """Set the threads torch trains with on the CPU (`bertlib.utils.devices.cpu_threads`: `cfg.threads`, which a resumed
    run recorded, or else the CPUs idle now) and return `cfg` with the count, to be recorded; say what was measured. The
    count stays with the run, since a sum split over another number of threads rounds differently."""
    if cfg.threads is None and resolve_device(cfg.device).type != "cpu":
        return cfg
    threads, idle = cpu_threads(cfg.threads)
    torch.set_num_threads(threads)
    if on_log is not None and idle is not None:
        on_log(
            {
                "event": f"training with {threads} CPU thread(s): {idle:.1f} of {os.cpu_count()} CPUs are idle "
                f"(--threads N to choose)"
            }
        )
    elif on_log is not None and resume and (now := cpu_threads()[1]) is not None and int(now + 0.5) < threads:
        on_log(
            {
                "event": f"training with {threads} CPU threads, as the run started, so that it resumes exactly; "
                f"{now:.1f} CPUs are idle now, so --threads {max(1, int(now + 0.5))} would be faster"
            }
        )
    return replace(cfg, threads=threads)


def _check_length(run_dir: Path, cfg: RunConfig) -> None:
    "Refuse a resumed run whose length (a new --max-steps or --epochs) ends before its newest checkpoint."
    found, saved = checkpoints(run_dir), load_run(run_dir)[1]
    if (cfg.max_steps, cfg.epochs) in ((saved.max_steps, saved.epochs), (None, None)):  # (a time budget: refused later)
        return
    if found:
        step, steps = checkpoint_step(found[-1]), cfg.max_steps
        if steps is None:  # epochs: steps as the loop counts them (a checkpoint before this check has no count)
            per_epoch = load_training_state(found[-1]).get("epoch_batches")
            steps = step if per_epoch is None else cfg.total_steps(per_epoch)
        if steps < step:
            what = _length(cfg) + ("" if cfg.max_steps is not None else f" ({steps:,} steps)")
            raise RunError(
                f"{run_dir} is at step {step:,}, past the end of a run of {what}; give --max-steps (or "
                f"--epochs) of at least {step:,} steps, or leave the length as it was"
            )


@contextmanager
def open_run(
    output_dir: str | os.PathLike,
    cfg: RunConfig | None,
    kind: type,
    resume: bool,
    on_log: Callable[[dict], None] | None = None,
) -> Iterator[RunSession]:
    """The run in `output_dir`, made by the recipe whose settings are `kind`: with `resume`, its saved settings (`cfg`
    may change only `RESUMABLE_FIELDS`); else a new run of `cfg`, whose folder must be absent or empty. Joins the
    process group `torchrun` describes, and leaves it at the end if it joined it. The writing process (rank 0) holds
    the folder's lock throughout (`lock_path`): a second writer gets a `RunError`; `on_log` hears of a lock taken
    over from a killed run. On a CPU, sets torch's threads for the run (`cfg.threads`, or the CPUs idle now, said).
    POSIX only, as the atomic renames of run folders are."""
    if not str(output_dir).strip():
        raise ValueError("the output folder is an empty name; give a folder (--output-dir DIR)")
    run_dir = Path(output_dir)
    created_group = init_distributed()
    fd, error = None, None
    try:
        if world()[1] == 0:
            try:
                fd = _lock(run_dir, on_log)
            except RunError as err:
                error = err
        if world()[0] > 1:  # every process stops if the writer could not lock, rather than wait for it
            shared = [None if error is None else str(error)]
            dist.broadcast_object_list(shared, src=0)
            if shared[0] is not None:
                error = RunError(shared[0])
        if error:
            raise error
        if resume:
            model_config, cfg, tokenizer = resumed_config(run_dir, cfg, kind)
            _check_length(run_dir, cfg)
            yield RunSession(run_dir, True, model_config, _set_threads(cfg, True, on_log), tokenizer, on_log)
        else:
            if cfg is None:
                raise ValueError(f"a new run needs its settings (a {kind.__name__})")
            check_new_run(run_dir)
            yield RunSession(run_dir, False, cfg=_set_threads(absolute_references(cfg), False, on_log), on_log=on_log)
    finally:
        if fd is not None:
            _unlock(run_dir, fd)
        if created_group:
            dist.destroy_process_group()
