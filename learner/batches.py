"""Mini-batches of a torch ``Dataset`` through a ``DataLoader``, with bounded memory.

:class:`LoaderBatches` is the trainer's endless stream of shuffled batches
(a seeded generator orders each pass; ``num_workers`` processes read ahead at
most ``prefetch_factor`` batches each, started by forkserver or spawn because
the daemon has threads; pinned memory on CUDA). :func:`evaluation_batches`
reads a test set once, in order. The in-memory path (tensors indexed by a
batch of positions) stays in :class:`learner.trainer.Trainer`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, Dataset

__all__ = ["EVAL_BATCH", "LoaderBatches", "evaluation_batches"]

logger = logging.getLogger(__name__)

#: Samples per batch when a test set is read through a loader.
EVAL_BATCH = 256


def _loader(dataset: Dataset, batch_size: int, *, shuffle: bool, seed: int, num_workers: int,
            start: str, pin: bool, drop_last: bool, persistent: bool = True) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    options: dict[str, object] = {}
    if num_workers:
        options.update(multiprocessing_context=start, persistent_workers=persistent,
                       prefetch_factor=2)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=generator,
                      num_workers=num_workers, pin_memory=pin, drop_last=drop_last,
                      **options)  # type: ignore[arg-type]


class LoaderBatches:
    """Endless shuffled mini-batches of ``dataset`` (a new seeded order every pass)."""

    def __init__(self, dataset: Dataset, batch_size: int, *, seed: int, num_workers: int = 0,
                 start: str = "forkserver", pin_memory: bool = False) -> None:
        size = len(dataset)  # type: ignore[arg-type]
        if size == 0:
            raise ValueError("the training set is empty")
        self.batch_size = min(batch_size, size)
        self.size = size
        self.num_workers = num_workers
        self._options = dict(seed=seed, num_workers=num_workers, start=start, pin=pin_memory)
        self._dataset = dataset
        self._loader: DataLoader | None = None
        self._iterator: Iterator[object] | None = None

    def _start(self) -> Iterator[object]:
        if self._loader is None:  # workers start on the first batch, not when built
            self._loader = _loader(self._dataset, self.batch_size, shuffle=True,
                                   drop_last=self.size >= 2 * self.batch_size,
                                   **self._options)  # type: ignore[arg-type]
        return iter(self._loader)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next mini-batch ``(inputs, targets)``; a new pass starts when one ends."""
        if self._iterator is None:
            self._iterator = self._start()
        try:
            batch = next(self._iterator)
        except StopIteration:
            self._iterator = self._start()
            batch = next(self._iterator)
        return split_batch(batch)

    def close(self) -> None:
        """Stop the loader's workers (they also stop with the process)."""
        self._iterator = None
        self._loader = None


def split_batch(batch: object) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, targets)`` of a collated batch (a pair; ValueError otherwise)."""
    if not isinstance(batch, list | tuple) or len(batch) != 2:
        raise ValueError(f"a batch is {type(batch).__name__}; expected (inputs, targets)")
    x, y = batch
    return torch.as_tensor(x), torch.as_tensor(y)


def evaluation_batches(dataset: Dataset, *, batch_size: int = EVAL_BATCH, num_workers: int = 0,
                       start: str = "forkserver", pin_memory: bool = False
                       ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Every sample of ``dataset`` once, in order, in batches (workers as for training;
    they stop when the pass ends)."""
    loader = _loader(dataset, batch_size, shuffle=False, seed=0, num_workers=num_workers,
                     start=start, pin=pin_memory, drop_last=False, persistent=False)
    for batch in loader:
        yield split_batch(batch)
