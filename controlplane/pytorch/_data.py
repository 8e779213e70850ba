"""``pytorch.DataLoader``: a ``torch.utils.data.DataLoader`` description that the trainer turns into
each worker's loader (Determined's wrapper, smaller).

The trainer asks for ``get_data_loader(repeat, skip, num_replicas, rank, seed)``: the batches of
epoch after epoch (training repeats the data), dealt to the workers in turn (global batch ``i``
goes to rank ``i % num_replicas``), after skipping the batches a resumed trial already trained.
A shuffled loader (``shuffle=True``) draws each epoch's order from the trial seed and the epoch
number, not from the global RNG, so a trial resumed from a checkpoint sees exactly the batches it
would have seen had it not stopped.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils import data

log = logging.getLogger("controlplane.pytorch")

TorchData = dict[str, torch.Tensor] | Sequence[torch.Tensor] | torch.Tensor


class DataLoader:
    """Takes the arguments of ``torch.utils.data.DataLoader``; map-style datasets only."""

    def __init__(self, dataset: data.Dataset[Any], batch_size: int | None = 1, shuffle: bool = False,
                 sampler: data.Sampler[Any] | None = None, batch_sampler: data.Sampler[Any] | None = None,
                 num_workers: int = 0, collate_fn: Callable[..., Any] | None = None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn: Callable[..., Any] | None = None,
                 multiprocessing_context: Any = None, generator: torch.Generator | None = None, *,
                 prefetch_factor: int | None = None, persistent_workers: bool = False) -> None:
        if isinstance(dataset, data.IterableDataset):
            raise ValueError("IterableDatasets are not supported by pytorch.DataLoader (it must shard, repeat and "
                             "skip by index); return a torch.utils.data.DataLoader and handle those yourself")
        if batch_sampler is None and batch_size is None:
            raise ValueError("pytorch.DataLoader needs a batch_size or a batch_sampler")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None or drop_last):
            raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                             "and drop_last")
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset = dataset
        self.batch_size = batch_size if batch_sampler is None else None
        self.shuffle = shuffle
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.collate_fn = collate_fn
        self.pin_memory = pin_memory
        self.drop_last = drop_last
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers

    def _batches_per_epoch(self) -> int | None:
        try:
            if self.batch_sampler is not None:
                return len(self.batch_sampler)  # type: ignore[arg-type]
            n = len(self.sampler) if self.sampler is not None else len(self.dataset)  # type: ignore[arg-type]
        except TypeError:
            return None
        assert self.batch_size is not None
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _epoch_batches(self, epoch: int, seed: int) -> Iterator[list[int]]:
        """The index batches of one epoch, before any sharding."""
        if self.batch_sampler is not None:
            yield from (list(b) for b in self.batch_sampler)
            return
        assert self.batch_size is not None
        if self.sampler is not None:
            indices: Iterator[int] = iter(self.sampler)
        elif self.shuffle:
            base = self.generator.initial_seed() if self.generator is not None else seed
            g = torch.Generator().manual_seed((base * 1_000_003 + epoch) % (2**63))
            indices = iter(torch.randperm(len(self.dataset), generator=g).tolist())  # type: ignore[arg-type]
        else:
            indices = iter(range(len(self.dataset)))  # type: ignore[arg-type]
        while True:
            batch = list(itertools.islice(indices, self.batch_size))
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield batch

    def get_data_loader(self, repeat: bool = False, skip: int = 0, num_replicas: int = 1, rank: int = 0,
                        seed: int = 0) -> data.DataLoader[Any]:
        """This worker's ``torch.utils.data.DataLoader``: its share of the batches, ``skip`` of its
        batches already trained, endless when ``repeat``."""
        extra: dict[str, Any] = {}
        if self.num_workers > 0:
            extra = {"prefetch_factor": self.prefetch_factor, "persistent_workers": self.persistent_workers,
                     "multiprocessing_context": self.multiprocessing_context}
        kwargs: dict[str, Any] = {"collate_fn": self.collate_fn} if self.collate_fn is not None else {}
        # A generator of its own: making an iterator draws a seed from it, never from the global RNG.
        generator = self.generator if self.generator is not None else torch.Generator().manual_seed(seed)
        return data.DataLoader(self.dataset, batch_sampler=_BatchStream(self, repeat, skip, num_replicas, rank, seed),
                               num_workers=self.num_workers, pin_memory=self.pin_memory, timeout=self.timeout,
                               worker_init_fn=self.worker_init_fn, generator=generator, **kwargs, **extra)

    def __iter__(self) -> Iterator[Any]:
        """A plain epoch, so the trial's loaders also work outside the trainer."""
        return iter(self.get_data_loader())

    def __len__(self) -> int:
        n = self._batches_per_epoch()
        if n is None:
            raise TypeError("this DataLoader's sampler has no length")
        return n


class _BatchStream(data.Sampler[Any]):
    """Index batches of epoch after epoch; this rank's share; the first ``skip`` of them left out."""

    def __init__(self, loader: DataLoader, repeat: bool, skip: int, num_replicas: int, rank: int, seed: int) -> None:
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in [0, {num_replicas})")
        self.loader, self.repeat, self.skip = loader, repeat, skip
        self.num_replicas, self.rank, self.seed = num_replicas, rank, seed

    def __len__(self) -> int:
        """This rank's batches of one epoch (the trainer's epoch length)."""
        total = len(self.loader)
        return total // self.num_replicas + int(total % self.num_replicas > self.rank)

    def __iter__(self) -> Iterator[list[int]]:
        n, start = self.num_replicas, self.skip * self.num_replicas  # global index of our first batch
        per_epoch = self.loader._batches_per_epoch()
        epoch, g = 0, 0
        if self.repeat and per_epoch and start >= per_epoch:  # jump over whole epochs
            epoch = start // per_epoch
            g = epoch * per_epoch
        while True:
            first = g
            for batch in self.loader._epoch_batches(epoch, self.seed):
                if g >= start and g % n == self.rank:
                    yield batch
                g += 1
            if not self.repeat:
                return
            if g == first:
                raise ValueError("the training data loader has no batches")
            epoch += 1


def to_device(batch: Any, device: torch.device, warned_types: set[Any] | None = None) -> Any:
    """Tensors (and numpy arrays of numbers) anywhere in dicts, lists and tuples moved to ``device``."""
    warned = warned_types if warned_types is not None else set()
    if isinstance(batch, dict):
        return {k: to_device(v, device, warned) for k, v in batch.items()}
    if isinstance(batch, list):
        return [to_device(v, device, warned) for v in batch]
    if isinstance(batch, tuple):
        return tuple(to_device(v, device, warned) for v in batch)
    if isinstance(batch, np.ndarray) and batch.dtype.kind in "fciub":
        return torch.from_numpy(batch).to(device)
    to = getattr(batch, "to", None)
    if callable(to):
        return to(device)
    if type(batch) not in warned:
        warned.add(type(batch))
        log.debug("not moving a %s to %s", type(batch).__name__, device)
    return batch


def data_length(batch: Any) -> int:
    """The number of records in a batch: the length of its first tensor or array."""
    if isinstance(batch, (np.ndarray, torch.Tensor)):
        return len(batch)
    if isinstance(batch, dict):
        if not batch:
            raise ValueError("a batch dict must hold at least one tensor")
        return data_length(next(iter(batch.values())))
    if isinstance(batch, (list, tuple)):
        if not batch:
            raise ValueError("a batch list must hold at least one tensor")
        return data_length(batch[0])
    raise TypeError(f"cannot tell the length of a batch of type {type(batch).__name__}")
