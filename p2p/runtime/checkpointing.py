"""The node's checkpoints: resumed at start, written periodically, on demand and at stop.

:class:`NodeCheckpoints` is owned by :class:`~p2p.runtime.node.Node`. It resumes
the newest good checkpoint of the node's :class:`~p2p.runtime.checkpoint.CheckpointStore`
(:func:`~p2p.runtime.state.resume_from`), or moves it aside for ``--fresh``; it
writes a snapshot taken under the model lock, never one holding values the node
could not hold (:func:`~p2p.runtime.state.state_problem`), and writes land in
the order their snapshots were taken. :meth:`NodeCheckpoints.run` is the node's
periodic checkpoint task. See docs/design/state.md and docs/design/architecture.md.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import TYPE_CHECKING, Protocol

import trio

from p2p.runtime.checkpoint import CheckpointError, CheckpointStore
from p2p.runtime.state import StatefulNode, resume_from, snapshot_state, state_problem

if TYPE_CHECKING:
    from p2p.config import NodeConfig
    from p2p.runtime.timing import TimingStats
    from p2p.runtime.train_runner import TrainRunner

__all__ = ["CheckpointedNode", "NodeCheckpoints"]

logger = logging.getLogger("p2p.runtime.node")  # the node's lines keep its logger's name


class CheckpointedNode(StatefulNode, Protocol):
    """What :class:`NodeCheckpoints` uses of :class:`~p2p.runtime.node.Node` (a Protocol:
    importing the node here would be an import cycle)."""

    config: NodeConfig
    runner: TrainRunner
    timings: dict[str, TimingStats]

    @property
    def model_lock(self) -> trio.Lock: ...


class NodeCheckpoints:
    """A node's checkpoint writes and its resume (see the module docstring)."""

    def __init__(self, node: CheckpointedNode, store: CheckpointStore) -> None:
        self._node = node
        self.store = store
        self._save_lock = trio.Lock()  # checkpoints land in the order they were taken

    def resume(self, fresh: bool) -> tuple[int | None, str | None]:
        """Resume the checkpoint into the node (refusing one trained with another layout
        or data: :class:`~p2p.runtime.checkpoint.CheckpointConflict`), or with ``fresh``
        move it aside and start over. Returns the round resumed at (None: started
        afresh) and the note for ``p2p status`` (a fallback or a file moved aside)."""
        if fresh:
            aside = self.store.move_aside()
            if aside is not None:
                logger.warning("--fresh: moved the old checkpoint to %s; starting over", aside)
            return None, None
        resumed = resume_from(self._node, self.store)
        state = resumed.state
        if state is None:
            return None, resumed.note
        logger.info("resumed from %s at round %d",
                    resumed.path.name if resumed.path else "checkpoint", state.round)
        rounds = self._node.config.training.rounds
        if rounds and state.round >= rounds:
            logger.warning("training.rounds = %d is already reached (the checkpoint is at round "
                           "%d): no SGD step will run. To train further, raise training.rounds "
                           "or pass --rounds N with N > %d",
                           rounds, state.round, state.round)
        return state.round, resumed.note

    async def save(self) -> int:
        """Write the node state atomically; returns the bytes written."""
        node = self._node
        async with self._save_lock:
            async with node.model_lock:
                state = snapshot_state(node)
            problem = state_problem(node, state)
            if problem is not None:  # never over a good checkpoint
                raise CheckpointError(None, f"checkpoint not written, {self.store.path.name} "
                                      f"and {self.store.previous.name} kept: the node's state "
                                      f"{problem}")
            t0 = time.perf_counter()
            size = await node.runner.run_blocking(functools.partial(self.store.save, state))
        node.timings["checkpoint"].add(time.perf_counter() - t0)
        node.counters["checkpoints"] += 1
        return size

    async def save_or_log(self, failed: str) -> None:
        """:meth:`save`; a failure is logged as ``failed``, never raised (the node runs on)."""
        try:
            await self.save()
        except CheckpointError as exc:
            logger.error("%s: %s", failed, exc)
        except Exception:
            logger.exception(failed)

    async def run(self) -> None:
        """Write a checkpoint every ``checkpoint.interval`` seconds (a failed one keeps
        the previous file and is logged in one line)."""
        interval = self._node.config.checkpoint.interval
        while True:
            await trio.sleep(interval)
            await self.save_or_log("periodic checkpoint failed (previous one kept)")
