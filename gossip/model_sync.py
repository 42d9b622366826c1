"""Keep a node's trained network and its push-sum cores consistent.

Plain numpy: the network and the cores are reached through the two Protocols
below, so this module needs neither torch nor trio. The trainer runs SGD in a
worker thread; pushes arrive on the event loop and are merged into the cores,
never into the network during a step. Between steps the training since the
last sync is carried into each core as a delta and the merged values are
written back, ``z_core <- z_core + (extract(net) - z_synced)`` then
``assign(net, z_core)``, so no merge is lost or applied mid-step (the
Stochastic Gradient Push pattern). :meth:`ModelSync.roll_back` undoes the
merges a sync brought in (:mod:`gossip.recovery`).

See docs/design/gossip.md ("In the daemon").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Protocol

import numpy as np

logger = logging.getLogger(__name__)


class VectorModel(Protocol):
    """What the synchroniser needs from a network holding partial models."""

    def extract(self, name: str) -> np.ndarray: ...

    def assign(self, name: str, vector: np.ndarray) -> None: ...


class AveragingCore(Protocol):
    """What the synchroniser needs from a push-sum core."""

    @property
    def values(self) -> np.ndarray: ...

    def set_values(self, values: np.ndarray) -> None: ...

    def roll_back(self, values: np.ndarray) -> None: ...


class ModelSync:
    """Carries training deltas into push-sum cores and merged values back.

    Call :meth:`sync` only while no SGD step is running (the trainer task
    calls it between worker-thread batches).
    """

    def __init__(self, network: VectorModel, cores: Mapping[str, AveragingCore]) -> None:
        self._network = network
        self._cores = dict(cores)
        self._synced: dict[str, np.ndarray] = {}
        # what the network held at the last sync: its own training on the values before
        self._trained: dict[str, np.ndarray] = {}
        for name in self._cores:
            self._write_back(name)

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the synchronised models."""
        return tuple(self._cores)

    def sync(self, names: Iterable[str] | None = None) -> None:
        """Fold local training into the cores, then load merged values into the net."""
        for name in self._cores if names is None else names:
            core = self._cores[name]
            trained = self._network.extract(name).astype(np.float64, copy=False)
            delta = trained - self._synced[name]
            if not np.all(np.isfinite(delta)):
                # A diverged step must not poison the average shared with peers.
                logger.error("model %s: training produced non-finite values; step dropped", name)
                delta = np.zeros_like(delta)
            core.set_values(core.values + delta)
            self._trained[name] = self._synced[name] + delta
            try:
                self._write_back(name)
            except ValueError as exc:
                # The core's values cannot be loaded (e.g. beyond float32): keep
                # training on what the network holds rather than stopping the node.
                logger.error("model %s: merged values not loaded into the network: %s", name, exc)
                core.set_values(self._synced[name])

    def roll_back(self, names: Iterable[str] | None = None) -> None:
        """Undo the merges the last :meth:`sync` brought in: each core and the network go
        back to the values trained since the sync before (call it right after a sync)."""
        for name in self._cores if names is None else names:
            trained = self._trained.get(name)
            if trained is None:
                continue
            self._cores[name].roll_back(trained)
            self._write_back(name)

    def _write_back(self, name: str) -> None:
        values = self._cores[name].values
        self._network.assign(name, values)
        # What the net holds now (after float32 rounding): the base of the next delta.
        self._synced[name] = self._network.extract(name).astype(np.float64, copy=True)
