"""A train runner for simulations that trains every node asking at one instant together.

With equal round timings, a simulation's nodes ask to train at the same
virtual instants. One :class:`LockstepRunner`, shared by all nodes, gathers the
requests of an instant and trains them in one go: with ``batched=True`` through
:func:`learner.batched_training.train_steps_batched`, with ``batched=False``
through each trainer's own loop; each caller is then charged ``compute_seconds``
as :class:`~p2p.runtime.train_runner.InlineRunner` does, so both modes give the
same results. "The same instant" is when every task is blocked
(:func:`trio.testing.wait_all_tasks_blocked`, before the mock clock jumps); no
caller leads, so a cancelled node withdraws only its own request.

See docs/guide/simulation.md ("Lock-step training").
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import trio
import trio.testing

from learner.batched_training import batch_key, train_steps_batched
from learner.trainer import Trainer
from p2p.runtime.train_runner import InlineRunner

__all__ = ["LockstepRunner", "LockstepStats"]

logger = logging.getLogger(__name__)


@dataclass
class LockstepStats:
    """What a :class:`LockstepRunner` has done: batches (one per instant and
    steps count), requests trained, the largest batch, wall seconds of training."""

    batches: int = 0
    requests: int = 0
    largest: int = 0
    train_seconds: float = 0.0

    def as_dict(self) -> dict[str, float | int]:
        """The figures as a JSON-ready dict."""
        return {"batches": self.batches, "requests": self.requests, "largest": self.largest,
                "train_seconds": self.train_seconds}


@dataclass(eq=False)
class _Request:
    trainer: Trainer
    steps: int
    done: bool = False
    loss: float = math.nan
    error: BaseException | None = field(default=None, repr=False)


class LockstepRunner(InlineRunner):
    """A :class:`~p2p.runtime.train_runner.TrainRunner` shared by all nodes of a simulation.

    Args:
        compute_seconds: virtual time charged to each caller after its round.
        batched: train the nodes of one instant in one vectorised step
            (:func:`~learner.batched_training.train_steps_batched`); False: each
            with its own loop (the reference the batched mode must match).

        align: if > 0, a request first waits for the next multiple of this many
            seconds of (virtual) time: nodes whose rounds start a little apart
            (a peer found 50 ms later) then train at one instant, and stay in
            step afterwards. 0: train at the instant asked.

    Evaluations and other blocking work run inline and cost no modelled time
    (inherited from :class:`~p2p.runtime.train_runner.InlineRunner`).
    """

    def __init__(self, compute_seconds: float = 0.0, *, batched: bool = True,
                 align: float = 0.0) -> None:
        super().__init__(compute_seconds)
        if not (align >= 0.0 and math.isfinite(align)):
            raise ValueError(f"align must be a finite number >= 0, got {align!r}")
        self.batched = batched
        self.align = align
        self.stats = LockstepStats()
        self._pending: list[_Request] = []

    async def wait_turn(self) -> None:
        """With ``align``: wait for the next tick. A node awaits this before it takes its
        model lock, so that its peers' merges and checkpoints go on meanwhile;
        :meth:`train_steps` then finds itself on the tick and trains at once."""
        if self.align:
            await trio.sleep_until(self._next_tick(trio.current_time()))

    async def train_steps(self, trainer: Trainer, steps: int) -> float:
        if steps < 1:
            raise ValueError(f"train_steps: expected steps >= 1, got {steps}")
        if self.align:
            await trio.sleep_until(self._next_tick(trio.current_time()))
        request = _Request(trainer, steps)
        self._pending.append(request)
        try:
            while not request.done:
                await trio.testing.wait_all_tasks_blocked()
                if not request.done:
                    self._train_pending()
        finally:
            if not request.done:  # cancelled while waiting: withdraw, train nothing
                self._pending.remove(request)
        if request.error is not None:
            raise request.error
        await self.charge()
        return request.loss

    def _next_tick(self, now: float) -> float:
        """The first multiple of `align` at or after `now` (a float's rounding error
        past a tick still counts as on it)."""
        ticks = now / self.align
        nearest = round(ticks)
        if abs(ticks - nearest) < 1e-9:
            return now
        return math.ceil(ticks) * self.align

    def _train_pending(self) -> None:
        """Train every parked request (a trainer asking twice waits for the next instant)."""
        now: list[_Request] = []
        later: list[_Request] = []
        seen: set[int] = set()
        for request in self._pending:
            key = id(request.trainer.model)
            (later if key in seen else now).append(request)
            seen.add(key)
        self._pending = later
        by_steps: dict[int, list[_Request]] = {}
        for request in now:
            by_steps.setdefault(request.steps, []).append(request)
        t0 = time.perf_counter()
        for steps, requests in by_steps.items():
            self._train(requests, steps)
            self.stats.batches += 1
            self.stats.largest = max(self.stats.largest, len(requests))
        self.stats.requests += len(now)
        self.stats.train_seconds += time.perf_counter() - t0
        logger.debug("lock-step: trained %d requests (%s)", len(now),
                     "batched" if self.batched else "plain loop")

    def _train(self, requests: list[_Request], steps: int) -> None:
        """Train `requests` (distinct trainers, `steps` each); each gets its loss or error."""
        if self.batched:
            # trainers that cannot be batched (DP-SGD may refuse a step) train alone
            # below, so that one's error is its caller's only
            keys = [batch_key(r.trainer) for r in requests]
            batchable = [(r, k) for r, k in zip(requests, keys, strict=True)
                         if not isinstance(k, str)]
            if len(batchable) > 1:
                try:
                    losses = train_steps_batched([r.trainer for r, _ in batchable], steps,
                                                 keys=[k for _, k in batchable])
                except Exception as exc:  # a bug, not one node's fault: every caller sees it
                    for r, _ in batchable:
                        r.error, r.done = exc, True
                else:
                    for (r, _), loss in zip(batchable, losses, strict=True):
                        r.loss, r.done = loss, True
        for r in requests:
            if r.done:
                continue
            try:
                r.loss = r.trainer.train_steps(steps)
            except Exception as exc:  # delivered to the node that asked
                r.error = exc
            r.done = True
