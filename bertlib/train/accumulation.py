"""A step over several micro-batches and processes: what `bertlib.train.loop` adds around notebook 07's step. An
objective names its loss parts and counts each part's items on the CPU; `step_totals` adds the counts over the step's
micro-batches and, under `torchrun`, over the processes with one `all_reduce`; `backward` weights each micro-batch's
losses by its share of those totals (notebook 07's `step_loss`), so that accumulation and several GPUs give the
gradient of one big batch.

Written by hand; notebook 07 names it.
"""

__all__ = ["Objective", "step_totals", "backward"]

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

import torch
import torch.distributed as dist
from torch import nn

from ..utils.devices import autocast, to_device
from .step import step_loss


class Objective(Protocol):
    """What a recipe tells the training loop: how to batch items, and the loss parts of a batch. Each part
    (e.g. MLM and NSP) is a mean over its own items (masked tokens, sequences), counted on the CPU, where reading
    a number costs nothing (on a GPU it would make the host wait for the device at every step)."""

    parts: tuple[str, ...]  # names of the loss parts, e.g. ("mlm_loss", "nsp_loss")

    def collate(self, items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]: ...

    def counts(self, batch: dict[str, torch.Tensor]) -> tuple[int, ...]: ...

    def losses(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]: ...


def step_totals(
    counts: Sequence[tuple[int, ...]], world_size: int = 1, device: torch.device | None = None
) -> list[int] | torch.Tensor:
    """Each part's items over the step's micro-batches (and, with several processes, summed over them with one
    `all_reduce`), at least 1: a step can hold no item of a part (no masked token in a short last batch)."""
    totals = [sum(part) for part in zip(*counts, strict=True)]
    if world_size == 1:
        return [max(1, t) for t in totals]
    totals = torch.tensor(totals, dtype=torch.float32, device=device)
    dist.all_reduce(totals)
    return totals.clamp_(min=1)


def backward(
    model: nn.Module,
    objective: Objective,
    group: Sequence[dict[str, torch.Tensor]],
    counts: Sequence[tuple[int, ...]],
    totals: Sequence[float] | torch.Tensor,
    device: torch.device,
    world_size: int = 1,
    sync: Callable[[bool], AbstractContextManager] = lambda last: nullcontext(),
) -> torch.Tensor:
    """Forward and backward over one step's micro-batches, under autocast: each micro-batch's losses weighted by its
    share of the step's items (`step_loss`), times the number of processes, whose gradients DDP averages. `sync(last)`
    wraps each backward pass (DDP averages at the last one only). Returns each part's loss summed over its items, on
    the device, for the log."""
    sums = torch.zeros(len(objective.parts), dtype=torch.float64, device=device)
    for i, (batch, count) in enumerate(zip(group, counts, strict=True)):
        with sync(i == len(group) - 1):
            with autocast(device):
                losses = objective.losses(model, to_device(batch, device))
                loss = world_size * step_loss(losses, count, totals)
            loss.backward()
        sums += torch.stack([part.detach() * n for part, n in zip(losses, count, strict=True)])
    return sums
