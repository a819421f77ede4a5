"""Batches for every loop of bertlib: a seeded, length-grouped, shardable sampler that can start an epoch part
of the way in, the one `DataLoader` factory, the phases of a run (a dataset for a share of the steps), and how
much padding a batching wastes.

Written by hand (pre-training and fine-tuning both use it); notebook 06 presents it.
"""

__all__ = [
    "child_seed",
    "padded_length",
    "LengthGroupedSampler",
    "set_epoch",
    "make_loader",
    "DataPosition",
    "micro_batches",
    "Phase",
    "phase_ends",
    "padding_waste",
]

import hashlib
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice

import torch
from torch.utils.data import DataLoader, Dataset, Sampler


def child_seed(*parts: int) -> int:
    "A 63-bit seed from integers (a seed, an epoch, an index, ...); neighbouring inputs give unrelated seeds."
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def padded_length(longest: int, pad_to_multiple_of: int | None) -> int:
    "The width of a batch whose longest item has `longest` tokens: rounded up to `pad_to_multiple_of`."
    if pad_to_multiple_of is None:
        return longest
    return -(-longest // pad_to_multiple_of) * pad_to_multiple_of


class LengthGroupedSampler(Sampler[int]):
    """Shuffles item indices with a seed (new order each `set_epoch`); with `group_by_length`, batches of
    similar lengths. With `num_replicas > 1`, yields only the share of process `rank`.

    `lengths` is the list of item lengths or a function that returns it (e.g. `dataset.lengths`, read at
    the start of each epoch because the number of pairs changes from epoch to epoch). `skip` items of the
    epoch (this process's share) are left out at its start: a resumed run sets it to what it had used."""

    def __init__(
        self,
        lengths: Sequence[int] | Callable[[], Sequence[int]],
        batch_size: int,
        *,
        group_by_length: bool = True,
        shuffle: bool = True,
        seed: int = 0,
        mega_batch_mult: int = 50,
        num_replicas: int = 1,
        rank: int = 0,
        drop_last: bool = False,
    ):
        if batch_size < 1 or mega_batch_mult < 1:
            raise ValueError("batch_size and mega_batch_mult must be at least 1")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank={rank} must be in [0, num_replicas={num_replicas})")
        self._lengths = lengths
        self.batch_size, self.group_by_length, self.shuffle, self.seed = batch_size, group_by_length, shuffle, seed
        self.mega_batch_mult, self.num_replicas, self.rank = mega_batch_mult, num_replicas, rank
        self.drop_last = drop_last
        self.epoch = self.skip = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def lengths(self) -> Sequence[int]:
        return self._lengths() if callable(self._lengths) else self._lengths

    def _per_replica(self, n: int) -> int:
        return n // self.num_replicas if self.drop_last else -(-n // self.num_replicas)

    def __len__(self) -> int:
        return max(0, self._per_replica(len(self.lengths())) - self.skip)

    def order(self) -> list[int]:
        "All processes' indices of this epoch, in order, before they are dealt out."
        lengths = torch.as_tensor(self.lengths(), dtype=torch.long)
        n = len(lengths)
        g = torch.Generator().manual_seed(child_seed(self.seed, self.epoch))
        order = torch.randperm(n, generator=g) if self.shuffle else torch.arange(n)
        if self.group_by_length and n:
            group = self.batch_size * self.num_replicas  # one batch for every process
            mega = group * self.mega_batch_mult
            chunks = [c[lengths[c].argsort(descending=True, stable=True)] for c in order.split(mega)]
            batches = list(torch.cat(chunks).split(group))
            # a short last batch must stay last: anywhere else it would shift every later batch's boundaries
            full = len(batches) - (len(batches[-1]) < group)
            shuffled = torch.randperm(full, generator=g).tolist() if self.shuffle else list(range(full))
            order = torch.cat([batches[i] for i in shuffled + list(range(full, len(batches)))])
        return order.tolist()

    def __iter__(self) -> Iterator[int]:
        order = self.order()
        total = self._per_replica(len(order)) * self.num_replicas
        if total > len(order):  # as DistributedSampler: repeat from the start so every process gets as many
            order += (order * (total // max(len(order), 1) + 1))[: total - len(order)]
        return islice(order[self.rank : total : self.num_replicas], self.skip, None)


def set_epoch(loader: DataLoader, epoch: int) -> None:
    "Start `epoch` on a loader's dataset and sampler (whichever have `set_epoch`); call it before iterating."
    for part in (loader.dataset, loader.sampler, getattr(loader.batch_sampler, "sampler", None)):
        if hasattr(part, "set_epoch"):
            part.set_epoch(epoch)


def make_loader(
    dataset: Dataset,
    batch_size: int,
    collate_fn: Callable,
    lengths: Sequence[int] | Callable[[], Sequence[int]],
    *,
    group_by_length: bool = True,
    shuffle: bool = True,
    seed: int = 0,
    num_replicas: int = 1,
    rank: int = 0,
    drop_last: bool = False,
    num_workers: int = 0,
    pin_memory: bool = False,
    persistent_workers: bool = False,
    batches_per_group: int = 1,
) -> DataLoader:
    """The `DataLoader` of every training and evaluation loop: a `LengthGroupedSampler` over `lengths`,
    batches made by `collate_fn`, and a generator of its own, so that starting an epoch never draws from
    the global random state (which seeds dropout). The sampler groups `batches_per_group` batches at a time
    (a training step's micro-batches), so that how a step is split does not change what it holds."""
    sampler = LengthGroupedSampler(
        lengths,
        batch_size * batches_per_group,
        group_by_length=group_by_length,
        shuffle=shuffle,
        seed=seed,
        num_replicas=num_replicas,
        rank=rank,
        drop_last=drop_last,
    )
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=num_workers,
        drop_last=drop_last,
        collate_fn=collate_fn,
        pin_memory=pin_memory,
        generator=torch.Generator(),
        persistent_workers=persistent_workers and num_workers > 0,
    )


@dataclass
class DataPosition:
    "Where training is in the data: the epoch and the micro-batches of it already used."

    epoch: int = 0
    batches: int = 0


def micro_batches(loader: DataLoader, position: DataPosition) -> Iterator[dict[str, torch.Tensor]]:
    """Batches from `position` on, epoch after epoch, advancing `position` as each one is handed out. An epoch that
    holds no batch at all is a ValueError: the epochs after it would be searched for one for ever."""
    while True:
        set_epoch(loader, position.epoch)
        loader.sampler.skip = position.batches * loader.batch_size
        resumed_at, handed_out = position.batches, 0
        for batch in loader:
            position.batches += 1
            handed_out += 1
            yield batch
        if resumed_at == 0 and handed_out == 0:  # a resumed epoch may have been used up already: the next one is due
            raise ValueError(
                f"epoch {position.epoch} of the training data holds no batch ({len(loader.dataset)} items), so no "
                f"step can be taken; give data with enough text for one sequence"
            )
        position.epoch, position.batches = position.epoch + 1, 0


def padding_waste(
    lengths: Sequence[int], order: Iterable[int], batch_size: int, pad_to_multiple_of: int | None = None
) -> float:
    "The share of padded positions when the items are batched `batch_size` at a time in `order`."
    order = list(order)
    real = padded = 0
    for i in range(0, len(order), batch_size):
        batch = [lengths[j] for j in order[i : i + batch_size]]
        real += sum(batch)
        padded += len(batch) * padded_length(max(batch), pad_to_multiple_of)
    return 1 - real / padded if padded else 0.0


@dataclass(frozen=True)
class Phase:
    """A stretch of training on one dataset for a `share` of the steps. BERT trained 90% of its steps on 128 tokens
    and the last 10% on 512, so that every position learns at a fraction of the cost (Devlin et al. 2019)."""

    dataset: Dataset
    share: float = 1.0


def phase_ends(shares: Sequence[float], steps: int) -> list[int]:
    "The step at which each phase ends: the cumulative shares of `steps`, rounded (the last one is `steps`)."
    cumulative = list(itertools.accumulate(shares))
    return [round(steps * share / cumulative[-1]) for share in cumulative]
