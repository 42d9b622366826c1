"""Where a node's blocking work runs: SGD rounds, evaluations, checkpoint writes.

A daemon runs them in a worker thread (:class:`ThreadRunner`, the default)
so that pushes and admin requests are served meanwhile. A simulation runs
many nodes in one trio run on a virtual clock, where a worker thread would
let virtual time jump while the work is still going on: there the work
runs in the trio thread and the runner charges a modelled compute time
with ``trio.sleep`` (:class:`InlineRunner`), so virtual time advances by
what the round would have cost, not by what it cost the simulator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

import trio

from learner.trainer import Evaluation, Trainer

__all__ = ["InlineRunner", "ThreadRunner", "TrainRunner"]

T = TypeVar("T")


class TrainRunner(Protocol):
    """Runs a node's blocking work; the node awaits each call."""

    async def wait_turn(self) -> None:
        """Awaited before each training round, before the node takes its model lock:
        a runner that starts rounds on a schedule (lock-step alignment) waits here,
        so that peers' merges and checkpoints are not held up meanwhile."""
        ...

    async def train_steps(self, trainer: Trainer, steps: int) -> float:
        """``trainer.train_steps(steps)``; its mean loss."""
        ...

    async def evaluate(self, fn: Callable[[], Evaluation]) -> Evaluation:
        """``fn()``, an evaluation of the node's model on its test part."""
        ...

    async def run_blocking(self, fn: Callable[[], T]) -> T:
        """``fn()``: other blocking work (a checkpoint write, a projection)."""
        ...


class ThreadRunner:
    """Every call in a trio worker thread: the daemon's behaviour."""

    async def wait_turn(self) -> None:
        return None  # a round starts at once

    async def train_steps(self, trainer: Trainer, steps: int) -> float:
        return await trio.to_thread.run_sync(trainer.train_steps, steps)

    async def evaluate(self, fn: Callable[[], Evaluation]) -> Evaluation:
        return await trio.to_thread.run_sync(fn)

    async def run_blocking(self, fn: Callable[[], T]) -> T:
        return await trio.to_thread.run_sync(fn)


class InlineRunner:
    """Every call in the trio thread (safe on a virtual clock).

    After each training round the node sleeps ``compute_seconds`` of (virtual)
    time: the modelled cost of the round. Evaluations and other work cost no
    modelled time. Subclasses (a lock-step runner) override :meth:`train_steps`.
    """

    def __init__(self, compute_seconds: float = 0.0) -> None:
        if not compute_seconds >= 0.0:
            raise ValueError(f"compute_seconds must be >= 0, got {compute_seconds!r}")
        self.compute_seconds = compute_seconds

    async def wait_turn(self) -> None:
        return None  # a round starts at once (a lock-step runner may align it)

    async def train_steps(self, trainer: Trainer, steps: int) -> float:
        loss = trainer.train_steps(steps)
        await self.charge()
        return loss

    async def charge(self) -> None:
        """Let the modelled compute time of one round pass (a checkpoint at least)."""
        if self.compute_seconds:
            await trio.sleep(self.compute_seconds)
        else:
            await trio.lowlevel.checkpoint()

    async def evaluate(self, fn: Callable[[], Evaluation]) -> Evaluation:
        return fn()

    async def run_blocking(self, fn: Callable[[], T]) -> T:
        return fn()
