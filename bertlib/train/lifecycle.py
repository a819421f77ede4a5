"""The life of a run folder that every recipe (pre-training, distillation, fine-tuning) shares: join the process group
`torchrun` describes; refuse a folder inside a run or holding one (runs never nest); take the folder's lock, so that one
process at a time writes it; for a new run, check that the folder is free before anything is written, then make it whole
at once, with a fingerprint of the data it learns from; for a resumed one, read its settings back (a change is allowed
to `RESUMABLE_FIELDS` only, a setting left unset keeps the run's, the length may not end before the newest checkpoint,
and the training data must be the data it learned from) and record the new ones; choose the CPU threads; at the end,
release the lock and leave the process group.

Written by hand: production plumbing that the recipes use.
"""

__all__ = [
    "RunSession",
    "lock_path",
    "RESUMABLE_FIELDS",
    "MOVABLE_FIELDS",
    "absolute_references",
    "resumed_config",
    "check_new_run",
    "data_fingerprint",
    "open_run",
]

import fcntl
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch
import torch.distributed as dist
from tokenizers import Tokenizer

from ..data.wikitext import load_wikitext2
from ..model.config import BertConfig
from ..tasks.load import load_task
from ..utils.devices import cpu_threads, resolve_device
from ..utils.environment import DATA_DIR_ENV, resolve_data_dir
from ..utils.processes import init_distributed, world
from .checkpoints import checkpoint_step, checkpoints, clear_leftovers, load_training_state
from .runs import (
    RECIPES,
    RunConfig,
    RunError,
    SavedRun,
    check_outside_runs,
    create_run,
    read_run,
    resume_command,
    write_run_config,
)
from .settings import FinetuneConfig


def check_new_run(run_dir: str | os.PathLike) -> None:
    """Raise a RunError unless `run_dir` is free for a new run (absent, or an empty folder). Under `torchrun` every
    process checks before rank 0 may create the run, so a slow process never finds the folder its peer has made."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise RunError(f"{run_dir} is a file, not a folder; choose another output folder")
    if run_dir.exists() and any(run_dir.iterdir()):
        raise RunError(
            f"{run_dir} already exists and is not an empty folder; pass resume=True (--resume) to "
            f"continue it, or choose another output folder"
        )
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


# settings a resumed run may change; all others define what is learned and must stay as they were
RESUMABLE_FIELDS = (
    "max_steps",
    "epochs",
    "log_every",
    "eval_every",
    "eval_batches",
    "save_every",
    "keep_checkpoints",
    "device",
    "compile",
    "num_workers",
    "on_nan",
    "threads",
)
# where a run's teacher (distil) or encoder (finetune) lives: a folder that may move, so a resumed run may point to it
# anew once the recorded one is gone
MOVABLE_FIELDS = ("teacher", "source")


def absolute_references(cfg: RunConfig) -> RunConfig:
    """`cfg` with its teacher or encoder (`MOVABLE_FIELDS`) as an absolute path where it names a local folder, so that
    the run resumes from any working directory (a hub id stays as it is)."""
    local = {
        name: str(Path(value).resolve())
        for name in MOVABLE_FIELDS
        if (value := getattr(cfg, name, None)) and Path(value).exists()
    }
    return replace(cfg, **local) if local else cfg


def resumed_config(
    run_dir: str | os.PathLike, cfg: RunConfig | dict | None, kind: type, saved: SavedRun | None = None
) -> tuple[BertConfig, RunConfig, Tokenizer]:
    """A run's model config, settings and tokenizer, to resume it: its saved settings (`saved`, read if not given),
    with `cfg` typed over them: settings that may differ only in `RESUMABLE_FIELDS` (or, once the recorded folder is
    gone, point a `MOVABLE_FIELDS` one anew), or a dict of the fields to change. `kind` is the settings class the
    resuming recipe expects; this is the one check that the run is that recipe's. Local references come back absolute
    (`absolute_references`)."""
    run_dir = Path(run_dir)
    saved = saved or read_run(run_dir)
    if not isinstance(saved.cfg, kind):
        raise RunError(
            f"{run_dir} was made by `{RECIPES[type(saved.cfg)]}`; resume it with {resume_command(run_dir, saved.cfg)}"
        )
    saved_cfg = absolute_references(saved.cfg)
    if isinstance(cfg, dict):
        if "task" in cfg and cfg["task"] != saved_cfg.task:
            raise RunError(
                f"--resume continues {run_dir}, which fine-tunes {saved_cfg.task}, not {cfg['task']}; give its task, "
                f"or start a new run"
            )
        cfg = kind.from_dict({**saved.cfg.to_dict(), **cfg})
    if cfg is None:
        return saved.model_config, saved_cfg, saved.tokenizer
    # a setting left unset keeps what the run resolved from it when it began (SQuAD's doc_stride, a task's length), so
    # the settings a run was started with resume it
    unset = {f.name for f in fields(cfg) if f.name not in RESUMABLE_FIELDS and getattr(cfg, f.name) is None}
    cfg = absolute_references(replace(cfg, **{name: getattr(saved_cfg, name) for name in unset}))
    changed = {
        f.name
        for f in fields(saved_cfg)
        if f.name not in RESUMABLE_FIELDS and getattr(cfg, f.name) != getattr(saved_cfg, f.name)
    }
    moved = {name for name in changed & set(MOVABLE_FIELDS) if not Path(getattr(saved_cfg, name)).exists()}
    if changed - moved:
        differ = "differs" if len(changed - moved) == 1 else "differ"
        raise RunError(
            f"a resumed run keeps its settings, but {', '.join(sorted(changed - moved))} {differ} from "
            f"{run_dir / 'config.json'}; start a new run to change them"
        )
    return saved.model_config, cfg, saved.tokenizer


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
    data_dir: str | os.PathLike | None = None
    data: dict | None = None  # the fingerprint of the training data (`data_fingerprint`), once known
    saved_cfg: RunConfig | None = None  # a resumed run's settings as it was saved

    def record(self, model_config: BertConfig, cfg: RunConfig, tokenizer: Tokenizer) -> None:
        """Write the run's settings (rank 0 only): a new run's folder with its `config.json` (and the fingerprint of
        its training data) and tokenizer, all at once; a resumed run's `config.json` with what changed (a longer run,
        another device), a new length said."""
        if world()[1] != 0:
            return
        if self.data is None:
            self.data = data_fingerprint(cfg, self.data_dir)
        if self.resume:
            saved = self.saved_cfg
            if (cfg.max_steps, cfg.epochs) != (saved.max_steps, saved.epochs) and self.on_log is not None:
                self.on_log(
                    {
                        "event": f"the run's length changes from {_length(saved)} to {_length(cfg)}: the "
                        f"learning-rate schedule is recomputed for the new length, so from here on the "
                        f"run differs from one made that long from the start"
                    }
                )
            write_run_config(self.run_dir, model_config, cfg, self.data)
        else:
            create_run(self.run_dir, model_config, cfg, tokenizer, self.data)


def lock_path(run_dir: str | os.PathLike) -> Path:
    "The lock file of a run folder: beside it, so that it exists before a new run's folder does."
    run_dir = Path(run_dir).resolve()
    return run_dir.with_name(f".{run_dir.name}.lock")


def _holder(fd: int) -> str:
    """The process id in a lock file that another process holds. It writes its id just after it locks, so an empty
    file is read again for up to a second before the id is given as '?'."""
    for _ in range(100):
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if holder:
            return holder
        time.sleep(0.01)
    return "?"


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
                holder = _holder(fd)
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


def _set_threads(cfg: RunConfig, saved: int | None, on_log: Callable[[dict], None] | None) -> RunConfig:
    """Set the threads torch trains with on the CPU (`bertlib.utils.devices.cpu_threads`: `cfg.threads`, which a resumed
    run recorded, or else the CPUs idle now) and return `cfg` with the count, to be recorded; say what was measured.
    `saved` is the count a resumed run recorded. The count stays with the run, since a sum split over another number of
    threads rounds differently: where a resumed run keeps it on a busier machine, it says that fewer would be faster
    (a change of count is the training loop's to say and record, beside the checkpoint it departs from)."""
    if cfg.threads is None and resolve_device(cfg.device).type != "cpu":
        return cfg
    if cfg.threads is not None and cfg.threads != saved and cfg.threads > (os.cpu_count() or 1):
        raise RunError(
            f"--threads {cfg.threads} is more than the {os.cpu_count()} CPUs of this machine; give at most "
            f"--threads {os.cpu_count()} (more threads share the CPUs, and wait for each other)"
        )
    threads, idle = cpu_threads(cfg.threads)
    torch.set_num_threads(threads)
    if on_log is not None and idle is not None:
        on_log(
            {
                "event": f"training with {threads} CPU thread(s): {idle:.1f} of {os.cpu_count()} CPUs are idle "
                f"(--threads N to choose)"
            }
        )
    elif on_log is not None and saved == threads and (now := cpu_threads()[1]) is not None and int(now + 0.5) < threads:
        on_log(
            {
                "event": f"training with {threads} CPU threads, the count the run has computed with, so that it "
                f"stays bit-exact; only {now:.1f} CPUs are idle now, so --threads {max(1, int(now + 0.5))} would be "
                f"faster, though no longer bit-exact"
            }
        )
    return replace(cfg, threads=threads)


def data_fingerprint(cfg: RunConfig, data_dir: str | os.PathLike | None = None) -> dict:
    """What a run learns from: its training split (WikiText-2's for pre-training and distillation, the task's for
    fine-tuning) as it reads it, counted and hashed (SHA-256 of its rows), so that the same data gives the same
    fingerprint wherever it was read from (a local folder or the hub), and any other data another."""
    if isinstance(cfg, FinetuneConfig):
        name = f"{cfg.task} train split"
        rows = [repr(example) for example in load_task(cfg.task, "train", data_dir)]  # dataclasses: field by field
    else:
        name = f"WikiText-2 ({cfg.data_config}) train split"
        rows = load_wikitext2("train", cfg.data_config, data_dir)
    digest = hashlib.sha256()
    for row in rows:
        digest.update(row.encode("utf-8", errors="surrogatepass") + b"\0")
    root = resolve_data_dir(data_dir)
    source = "the HuggingFace hub" if root is None else str(root.resolve())
    return {"split": name, "rows": len(rows), "sha256": digest.hexdigest(), "read_from": source}


def _check_data(run_dir: Path, saved: dict | None, cfg: RunConfig, data_dir: str | os.PathLike | None) -> dict | None:
    """The fingerprint of the data a resumed run would now learn from; a RunError if it is not `saved`, the data the
    run recorded (a run made before runs recorded it is not checked)."""
    if saved is None:
        return None
    now = data_fingerprint(cfg, data_dir)
    if now["sha256"] != saved.get("sha256"):
        raise RunError(
            f"{run_dir} learned from a {saved.get('split')} of {saved.get('rows', 0):,} rows (sha256 "
            f"{str(saved.get('sha256'))[:12]}, read from {saved.get('read_from')}), but {now['read_from']} gives "
            f"{now['rows']:,} rows (sha256 {now['sha256'][:12]}); resume it on the data it learned from (--data-dir, "
            f"or {DATA_DIR_ENV}), or start a new run to learn from this data"
        )
    return now


def _check_length(run_dir: Path, cfg: RunConfig, saved: RunConfig) -> None:
    "Refuse a resumed run whose length (a new --max-steps or --epochs) ends before its newest checkpoint."
    found = checkpoints(run_dir)
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
    *,
    data_dir: str | os.PathLike | None = None,
) -> Iterator[RunSession]:
    """The run in `output_dir`, made by the recipe whose settings are `kind`: with `resume`, its saved settings (`cfg`
    may change only `RESUMABLE_FIELDS`) and the training data it learned from (read from `data_dir`, as the recipe
    reads it: `data_fingerprint`); else a new run of `cfg`, whose folder must be absent or empty. Neither may be inside
    another run, nor hold one. Joins the process group `torchrun` describes, and leaves it at the end if it joined it.
    The writing process (rank 0) holds the folder's lock throughout (`lock_path`): a second writer gets a `RunError`;
    `on_log` hears of a lock taken over from a killed run. On a CPU, sets torch's threads for the run (`cfg.threads`,
    or the CPUs idle now, said). POSIX only, as the atomic renames of run folders are."""
    if not str(output_dir).strip():
        raise ValueError("the output folder is an empty name; give a folder (--output-dir DIR)")
    run_dir = Path(output_dir)
    # the folder itself may be a run: the one resumed, or one that `check_new_run` refuses as not empty
    check_outside_runs(run_dir, "the resumed run" if resume else "a new run", own_run=True, below=resume)
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
            if fd is not None:
                clear_leftovers(run_dir)  # a checkpoint cut short by a kill could hold the space the run needs
            saved = read_run(run_dir)  # the one read of the run folder a resume makes
            model_config, cfg, tokenizer = resumed_config(run_dir, cfg, kind, saved)
            _check_length(run_dir, cfg, saved.cfg)
            data = _check_data(run_dir, saved.data, cfg, data_dir)
            cfg = _set_threads(cfg, saved.cfg.threads, on_log)
            yield RunSession(run_dir, True, model_config, cfg, tokenizer, on_log, data_dir, data, saved.cfg)
        else:
            if cfg is None:
                raise ValueError(f"a new run needs its settings (a {kind.__name__})")
            check_new_run(run_dir)
            cfg = _set_threads(absolute_references(cfg), None, on_log)
            yield RunSession(run_dir, False, cfg=cfg, on_log=on_log, data_dir=data_dir)
    finally:
        if fd is not None:
            _unlock(run_dir, fd)
        if created_group:
            dist.destroy_process_group()
