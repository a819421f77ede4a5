"""The training loop of every recipe: notebook 07's step (`bertlib.train.step`) with the machinery a real run needs
around it. `fit` reads as a few named steps: `start` (the model on its device, DDP under `torchrun`, AdamW, one
loader per phase, the schedule, and a resumed run's state), `train_step` (one optimiser step, reseeded and
resumable), `log_window` (the mean losses, learning rate, gradient norm and tokens/s of the last steps, read back
from the device only then), `watch_pace` (on a CPU, say once when the run slowed because other work took its CPUs),
`save` (a checksummed, atomic checkpoint and the loss curve), `paused` (validation and saving left out of the training
time and of the progress bar's rate), and hooks that may end training at any step. Ctrl-C or SIGTERM writes a
checkpoint and stops; a non-finite loss or gradient stops without saving (or is skipped, `on_nan="skip"`); a full disk
stops with one line that names it.

Written by hand; notebook 07 presents it (its section on the run machinery).
"""

__all__ = ["Hook", "Loop", "reseed", "start", "train_step", "log_window", "watch_pace", "save", "paused", "fit"]

import json
import math
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from ..data.batching import DataPosition, Phase, make_loader, micro_batches, phase_ends
from ..utils.devices import resolve_device
from ..utils.environment import CpuShare
from ..utils.files import no_room
from ..utils.processes import TrainingInterrupted, stop_signals, world
from ..viz.attention import plot_metrics, save_figure
from .accumulation import Objective, backward, step_totals
from .checkpoints import checkpoints, load_checkpoint, newest_incomplete, save_checkpoint
from .pace import Pace
from .runs import NonFiniteLoss, RunError, no_room_error, read_metrics, write_metrics
from .settings import TrainConfig
from .step import configure_optimizer, lr_schedule, optimizer_step


def reseed(seed: int, rank: int, step: int) -> None:
    "Seed the global generators (dropout) from the step, so a resumed run draws what an unbroken one would."
    torch.manual_seed((seed * 1_000_003 + rank) * 1_000_003 + step)  # distinct for any realistic rank and step


@dataclass
class Loop:
    """What `fit` keeps between steps: the model (and `net`, what runs it: DDP, compiled), optimiser, schedule, data,
    where training is, the logging window (loss sums on the device; item and token counts) and the records."""

    model: nn.Module
    net: nn.Module
    ddp: DistributedDataParallel | None
    objective: Objective
    cfg: TrainConfig
    device: torch.device
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    loaders: list[DataLoader]
    ends: list[int]
    steps: int
    run_dir: Path | None = None
    on_log: Callable[[dict], None] | None = None
    world_size: int = 1
    rank: int = 0
    step: int = 0
    phase: int = 0
    position: DataPosition = field(default_factory=DataPosition)
    tokens: int = 0  # training tokens (padding left out) of all processes: this one's times their number
    grad_norm: torch.Tensor | None = None  # of the last step
    seconds_before: float = 0.0  # training seconds of the sessions before this one (a resumed run)
    records: list[dict] = field(default_factory=list)
    loss_sums: torch.Tensor | None = None
    window: list[int] = field(default_factory=list)
    stream: Iterator[dict[str, torch.Tensor]] | None = None
    metrics_file: IO[str] | None = None
    started: float = field(default_factory=time.perf_counter)
    paused: float = 0.0  # seconds of validation and saving in this session, which training time leaves out
    window_start: float = 0.0  # training seconds when the logging window began
    pace: Pace | None = None  # on a CPU with several threads (rank 0): whether other work has slowed the run

    @property
    def writer(self) -> bool:
        "Whether this process writes the run folder: rank 0 of a run that has one."
        return self.run_dir is not None and self.rank == 0

    def sync(self, last: bool) -> AbstractContextManager:
        "Around a micro-batch's backward pass: DDP averages the gradients at the step's last micro-batch only."
        return self.ddp.no_sync() if self.ddp is not None and not last else nullcontext()

    @property
    def train_seconds(self) -> float:
        "Seconds spent training so far, over every session of the run, validation and saving left out."
        return self.seconds_before + time.perf_counter() - self.started - self.paused

    def record(self, entry: dict) -> None:
        "Keep a metric record, append it to `metrics.jsonl` (rank 0) and hand it to `on_log`."
        self.records.append(entry)
        if self.metrics_file is not None:
            self.metrics_file.write(json.dumps(entry) + "\n")
            self.metrics_file.flush()
        if self.on_log is not None and self.rank == 0:
            self.on_log(entry)


def start(
    model: nn.Module,
    phases: Sequence[Phase],
    objective: Objective,
    cfg: TrainConfig,
    *,
    run_dir: str | os.PathLike | None = None,
    resume: bool = False,
    on_log: Callable[[dict], None] | None = None,
) -> Loop:
    """Set up the loop: the model on its device (wrapped in DDP under `torchrun`, compiled if asked), AdamW, one
    loader per phase, the schedule over all the steps, and, with `resume`, the state of the run's newest checkpoint."""
    device = resolve_device(cfg.device)
    world_size, rank = world()
    if cfg.batch_size % (world_size * cfg.grad_accum):
        raise ValueError(
            f"batch_size={cfg.batch_size} must be a multiple of processes x grad_accum = "
            f"{world_size} x {cfg.grad_accum}"
        )
    if resume and run_dir is None:
        raise RunError("resume=True needs the run folder to resume (run_dir)")
    micro = cfg.batch_size // (world_size * cfg.grad_accum)
    model.to(device)
    optimizer = configure_optimizer(model, cfg.lr, cfg.weight_decay, device)
    workers = cfg.num_workers if cfg.num_workers is not None else 0 if device.type == "cpu" else min(4, os.cpu_count())
    # grouped by length in whole steps (micro x grad_accum per process), so that the union of a step's
    # micro-batches over processes is the same set of sequences however the step is split
    shards = dict(seed=cfg.seed, num_replicas=world_size, rank=rank, batches_per_group=cfg.grad_accum)
    io = dict(num_workers=workers, pin_memory=device.type == "cuda")
    loaders = [make_loader(p.dataset, micro, objective.collate, p.dataset.lengths, **shards, **io) for p in phases]
    steps = cfg.total_steps(len(loaders[0]))
    ddp = DistributedDataParallel(model) if world_size > 1 else None
    net = torch.compile(ddp or model) if cfg.compile else (ddp or model)
    schedule = lr_schedule(optimizer, round(cfg.warmup_ratio * steps), steps, cfg.schedule)
    ends = phase_ends([p.share for p in phases], steps)
    loop = Loop(model, net, ddp, objective, cfg, device, optimizer, schedule, loaders, ends, steps)
    loop.run_dir = None if run_dir is None else Path(run_dir)
    loop.on_log, loop.world_size, loop.rank = on_log, world_size, rank
    loop.loss_sums = torch.zeros(len(objective.parts), dtype=torch.float64, device=device)
    loop.window = [0] * (len(objective.parts) + 1)  # items of each part, then tokens
    said = _resume(loop) if resume else []
    loop.window_start = loop.seconds_before
    if device.type == "cpu" and rank == 0 and torch.get_num_threads() > 1:
        loop.pace = Pace(CpuShare(), since=(loop.tokens, loop.seconds_before))
    if loop.writer:
        loop.run_dir.mkdir(parents=True, exist_ok=True)
        # a resumed run drops what came after its checkpoint
        write_metrics(loop.run_dir / "metrics.jsonl", loop.records)
        loop.metrics_file = open(loop.run_dir / "metrics.jsonl", "a", encoding="utf-8")
    if on_log is not None and rank == 0:
        for event in said:
            on_log(event)
    loop.stream = micro_batches(loaders[loop.phase], loop.position)
    return loop


def _resume(loop: Loop) -> list[dict]:
    """Put `loop` where the run's newest complete checkpoint left it: weights, optimiser, schedule, data position,
    logging window, records. Returns what to say: the checkpoint it resumes from (naming a newer one that is
    incomplete), and a change of CPU threads, which is also recorded, since from there on the run is not bit-exact."""
    found, incomplete = checkpoints(loop.run_dir), newest_incomplete(loop.run_dir)
    skipped = f"; {incomplete}, so the run goes on from the checkpoint before it" if incomplete else ""
    if not found:
        where = loop.run_dir / "checkpoints"
        return [{"step": 0, "event": f"no complete checkpoint in {where}: the run starts at step 0{skipped}"}]
    state = load_checkpoint(found[-1], loop.model)
    loop.optimizer.load_state_dict(state["optimizer"])
    loop.scheduler.load_state_dict(state["scheduler"])
    loop.step, loop.position = state["step"], DataPosition(**state["data_position"])
    loop.phase, loop.tokens = state.get("phase", 0), state.get("tokens", 0)
    loop.seconds_before = state.get("seconds", 0.0)
    loop.loss_sums.copy_(state.get("loss_sums", loop.loss_sums))  # the logging window the checkpoint was taken in
    loop.window = list(state.get("window", loop.window))
    loop.records = [r for r in read_metrics(loop.run_dir / "metrics.jsonl") if r["step"] <= loop.step]
    said = [{"step": loop.step, "event": f"resuming from {found[-1]}, metrics.jsonl cut back to it{skipped}"}]
    if state.get("total_steps", loop.steps) != loop.steps:  # the run was made longer (or shorter): say what that does
        change = f"the schedule now spans {loop.steps} steps instead of {state['total_steps']}"
        loop.records.append({"step": loop.step, "event": f"{change}; the learning rate follows the new one"})
    threads, before = torch.get_num_threads(), state.get("threads")
    if loop.device.type == "cpu" and before is not None and before != threads:
        change = {
            "step": loop.step,
            "event": f"the run computes with {threads} CPU thread(s) from here on, not the {before} it computed with "
            f"up to {found[-1].name}: a sum split over another number of threads rounds differently, so the run is "
            f"no longer bit-exact with one that kept {before}",
        }
        loop.records.append(change)
        said.append(change)
    return said


_WAY_OUT = "Lower the learning rate, or pass --on-nan skip"  # what every stop on a non-finite value advises


def _next_group(loop: Loop) -> list[dict[str, torch.Tensor]]:
    "The step's `grad_accum` micro-batches, from the next phase's data once this phase has had its steps."
    if loop.step == loop.ends[loop.phase] and loop.phase + 1 < len(loop.loaders):
        loop.phase, loop.position = loop.phase + 1, DataPosition()
        loop.stream = micro_batches(loop.loaders[loop.phase], loop.position)
    return [next(loop.stream) for _ in range(loop.cfg.grad_accum)]


def train_step(loop: Loop) -> float | None:
    """One optimiser step of notebook 07's arithmetic (`bertlib.train.step`) with the run's machinery around it:
    dropout reseeded from the step, the step's micro-batches from the resumable stream, counts summed over the
    processes, DDP's gradient averaging at the last micro-batch only, and the policy for a non-finite gradient.
    Returns the gradient norm, read back only when it is free (on a CPU) or needed (`on_nan="skip"`); None
    otherwise."""
    cfg, device = loop.cfg, loop.device
    reseed(cfg.seed, loop.rank, loop.step)
    group = _next_group(loop)
    counts = [loop.objective.counts(batch) for batch in group]
    totals = step_totals(counts, loop.world_size, device)
    step_sums = backward(loop.net, loop.objective, group, counts, totals, device, loop.world_size, loop.sync)
    grad_norm = torch.nn.utils.clip_grad_norm_(loop.model.parameters(), cfg.max_grad_norm)
    loop.step += 1
    loop.grad_norm = grad_norm
    # a free check on the CPU; on a GPU reading the norm back every step would stall the queue, so unless bad
    # steps are to be skipped it is read with the losses, and the weights are checked before each save
    norm = float(grad_norm) if device.type == "cpu" or cfg.on_nan == "skip" else None
    if norm is not None and not math.isfinite(norm):
        if cfg.on_nan == "stop":
            raise NonFiniteLoss(
                f"the loss or gradient is not finite at step {loop.step} (gradient norm {norm}); "
                f"stopped without saving it. {_WAY_OUT}"
            )
        loop.optimizer.zero_grad(set_to_none=True)  # AdamW leaves parameters without a gradient as they are
        optimizer_step(loop.optimizer, loop.scheduler)
        loop.record({"step": loop.step, "event": "skipped: the loss or gradient was not finite"})
        return norm
    optimizer_step(loop.optimizer, loop.scheduler)
    loop.loss_sums += step_sums
    step_tokens = sum(int(b["attention_mask"].sum()) for b in group)
    loop.tokens += step_tokens * loop.world_size
    loop.window = [w + n for w, n in zip(loop.window, (*map(sum, zip(*counts, strict=True)), step_tokens), strict=True)]
    return norm


def log_window(loop: Loop, stop: bool) -> bool:
    """Log the window's mean loss parts (summed over processes), learning rate, gradient norm and tokens/s, then
    start a new window. Returns whether any process was asked to stop: processes agree to stop here only."""
    parts = len(loop.objective.parts)
    sums = torch.cat([loop.loss_sums, torch.tensor([*loop.window, stop], dtype=torch.float64, device=loop.device)])
    if loop.world_size > 1:
        dist.all_reduce(sums)
    sums = sums.tolist()
    stop = sums.pop() > 0
    means = [total / max(n, 1) for total, n in zip(sums[:parts], sums[parts:-1], strict=True)]
    if not all(map(math.isfinite, means)):
        raise NonFiniteLoss(
            f"the loss is not finite at step {loop.step} ({means}); stopped without saving it. {_WAY_OUT}"
        )
    seconds = loop.train_seconds
    if sums[-1]:  # a window whose every step was skipped has no loss to log
        losses = {"loss": sum(means), **dict(zip(loop.objective.parts, means, strict=True))}
        optimiser = dict(lr=loop.scheduler.get_last_lr()[0], grad_norm=float(loop.grad_norm))
        speed = dict(tokens_per_s=sums[-1] / (seconds - loop.window_start), tokens=loop.tokens, train_seconds=seconds)
        loop.record({"step": loop.step, "epoch": loop.position.epoch, **losses, **optimiser, **speed})
    loop.loss_sums.zero_()
    loop.window = [0] * (parts + 1)
    loop.window_start = seconds
    return stop


def watch_pace(loop: Loop) -> None:
    """On a CPU with several threads, say once, in `metrics.jsonl` and to `on_log`, when other work has slowed the run
    (`bertlib.train.pace`), with the command that resumes it with fewer threads."""
    if loop.pace is not None and (said := loop.pace.notice(loop.tokens, loop.train_seconds, loop.run_dir, loop.cfg)):
        loop.record({"step": loop.step, "event": said})


def save(loop: Loop) -> None:
    """Write a checkpoint of the step (rank 0) and redraw the loss curve; check the weights first, so that bad
    weights are never saved, nor a good checkpoint rotated away for them (one read-back per checkpoint)."""
    if loop.writer and not all(bool(torch.isfinite(p).all()) for p in loop.model.parameters()):
        raise NonFiniteLoss(f"the weights are not finite at step {loop.step}; no checkpoint written. {_WAY_OUT}")
    if loop.writer:
        where = dict(step=loop.step, total_steps=loop.steps, epoch_batches=len(loop.loaders[0]), phase=loop.phase)
        where["threads"] = torch.get_num_threads()  # a resumed run that computes with another count says so
        data = dict(data_position=asdict(loop.position), tokens=loop.tokens, seconds=loop.train_seconds)
        optim = dict(optimizer=loop.optimizer.state_dict(), scheduler=loop.scheduler.state_dict())
        state = {**where, **data, **optim, "loss_sums": loop.loss_sums.cpu(), "window": loop.window}
        save_checkpoint(loop.run_dir, loop.model, state, loop.step, loop.cfg.keep_checkpoints)
        save_figure(plot_metrics(loop.records, loop.run_dir.name), loop.run_dir / "loss_curve.png")
    if loop.world_size > 1:
        dist.barrier()


@contextmanager
def paused(loop: Loop, progress: tqdm | None = None) -> Iterator[None]:
    """Leave what runs inside (validation, saving) out of the training seconds and tokens/s, and out of `progress`'s
    rate, so that its estimate of the time left does not jump after each validation."""
    started = time.perf_counter()
    try:
        yield
    finally:
        seconds = time.perf_counter() - started
        loop.paused += seconds
        if progress is not None and not progress.disable:
            progress.last_print_t += seconds  # the bar's rate counts the steps since it last printed over this


@contextmanager
def _full_disk(run_dir: Path | None) -> Iterator[None]:
    "Turn a write under `run_dir` that found no room (metrics, the loss curve) into one line that names it."
    try:
        yield
    except OSError as err:
        kind = None if run_dir is None else no_room(err, run_dir)
        if kind is None:
            raise
        raise no_room_error(kind, err, run_dir, "then continue the run with --resume") from err


Hook = Callable[[Loop], bool | None]  # called after every step; True stops training there (with a checkpoint)


def fit(
    model: nn.Module,
    data: Dataset | Sequence[Phase],
    objective: Objective,
    cfg: TrainConfig,
    *,
    evaluate: Callable[[nn.Module], dict[str, float]] | None = None,
    run_dir: str | os.PathLike | None = None,
    resume: bool = False,
    on_log: Callable[[dict], None] | None = None,
    hooks: Sequence[Hook] = (),
    show_progress: bool = True,
) -> list[dict]:
    """Train `model` on `data` (a dataset whose `lengths()` gives each item's length, or `Phase`s of datasets) with
    `objective` as `cfg` says; return the metric records. `evaluate(model)` scores it every `eval_every` steps. With
    `run_dir`, rank 0 writes metrics, checkpoints and the loss curve there, and `resume=True` continues from its
    newest checkpoint. `on_log` gets every record; each `hook(loop)` runs after every step (True ends training there).
    Ctrl-C or SIGTERM writes a checkpoint and raises `TrainingInterrupted`; a non-finite loss or gradient raises
    `NonFiniteLoss` without saving (`cfg.on_nan="skip"` skips the step instead)."""
    phases = [Phase(data)] if isinstance(data, Dataset) else list(data)
    with _full_disk(None if run_dir is None else Path(run_dir)):
        loop = start(model, phases, objective, cfg, run_dir=run_dir, resume=resume, on_log=on_log)
    quiet = not show_progress or loop.rank != 0
    progress = tqdm(total=loop.steps, initial=loop.step, unit="step", disable=quiet, dynamic_ncols=True)
    # on a CPU, the tiny gradients of a well-trained softmax would fall into the range of denormal numbers,
    # which CPUs compute many times slower; the setting is process-wide, so PyTorch's default comes back after
    flush = loop.device.type == "cpu" and torch.set_flush_denormal(True)
    try:
        with _full_disk(loop.run_dir), stop_signals() as received:
            model.train()
            while loop.step < loop.steps:
                train_step(loop)
                progress.update()
                stop = bool(received)
                if loop.step % cfg.log_every == 0 or loop.step == loop.steps:
                    stop = log_window(loop, stop)
                    last = loop.records[-1]
                    loss, speed = last.get("loss", math.nan), last.get("tokens_per_s", 0)
                    progress.set_postfix_str(f"loss {loss:.3f}, {speed:,.0f} tok/s")
                    watch_pace(loop)
                elif loop.world_size > 1:
                    stop = False  # processes agree to stop at a logging step only
                with paused(loop, progress):
                    due = cfg.eval_every and loop.step % cfg.eval_every == 0 or loop.step == loop.steps
                    if evaluate is not None and due and loop.rank == 0:
                        timing = {"tokens": loop.tokens, "train_seconds": loop.train_seconds}
                        loop.record({"step": loop.step, "split": "validation", **timing, **evaluate(model)})
                    done = any([bool(hook(loop)) for hook in hooks])
                    if cfg.save_every and loop.step % cfg.save_every == 0 or loop.step == loop.steps or stop or done:
                        save(loop)
                if stop:
                    raise TrainingInterrupted(received[0] if received else signal.SIGTERM, loop.step, loop.writer)
                if done:
                    break
    finally:
        progress.close()
        if loop.metrics_file is not None:
            loop.metrics_file.close()
        if flush:
            torch.set_flush_denormal(False)
    return loop.records
