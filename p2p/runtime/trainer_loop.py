"""The node's trainer task: SGD rounds, their sync and evaluations, until stopped.

:class:`TrainerLoop` is owned by :class:`~p2p.runtime.node.Node` and started in
its nursery. Each round runs ``training.steps_per_round`` SGD steps through the
node's :class:`~p2p.runtime.train_runner.TrainRunner` under the model lock, skips
a round that left non-finite values (:class:`~p2p.runtime.finite_guard.FiniteGuard`),
folds merges in (:class:`~gossip.ModelSync`, or the merge recovery), evaluates every
``training.eval_every`` rounds and signals gossip. After the last round, or once the
privacy budget is spent, it keeps syncing so merges still reach the network.
See docs/design/architecture.md ("The node's tasks").
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Protocol

import trio

from p2p.runtime.progress import Progress, ProgressSource, log_budget_spent, log_progress

if TYPE_CHECKING:
    from gossip import GossipDriver, ModelSync
    from learner.trainer import Evaluation
    from p2p.config import NodeConfig
    from p2p.runtime.assembly import AnyLearning
    from p2p.runtime.collaboration_watch import CollaborationWatch
    from p2p.runtime.finite_guard import FiniteGuard
    from p2p.runtime.grouping.host import NodeGroupingHost
    from p2p.runtime.merge_recovery import NodeRecovery
    from p2p.runtime.strategy_host import StrategySupervisor
    from p2p.runtime.timing import TimingStats
    from p2p.runtime.train_runner import TrainRunner

__all__ = ["TrainedNode", "TrainerLoop"]

logger = logging.getLogger("p2p.runtime.node")  # the node's lines keep its logger's name


class TrainedNode(ProgressSource, Protocol):
    """What :class:`TrainerLoop` uses of :class:`~p2p.runtime.node.Node` (a Protocol:
    importing the node here would be an import cycle). ``learning`` and ``sync`` are
    read at each use: automatic grouping replaces them while the node runs."""

    config: NodeConfig
    learning: AnyLearning
    progress: Progress
    runner: TrainRunner
    finite: FiniteGuard
    sync: ModelSync
    gossip: GossipDriver
    recovery: NodeRecovery | None
    strategy_supervisor: StrategySupervisor
    grouping_host: NodeGroupingHost
    collaboration_watch: CollaborationWatch
    timings: dict[str, TimingStats]
    counters: dict[str, int]

    @property
    def model_lock(self) -> trio.Lock: ...


class TrainerLoop:
    """A node's trainer task (see the module docstring); ``stop``: the node's stop request."""

    def __init__(self, node: TrainedNode, stop: trio.Event) -> None:
        self._node = node
        self._stop = stop

    async def run(self, done: trio.Event) -> None:
        """Train until stopped; ``done`` is set once the current round has finished."""
        node = self._node
        t = node.config.training
        trainer = node.learning.trainer
        try:
            await node.collaboration_watch.wait_for_peers(self._stop)
            while not self._stop.is_set():
                budget_spent = not trainer.can_train(t.steps_per_round)
                if ((t.rounds and node.progress.round >= t.rounds) or budget_spent
                        or node.finite.stopped):
                    if not node.progress.finished:
                        # evaluate before saying finished: whoever waits for the
                        # end reads the final accuracy
                        async with node.model_lock:
                            self.record_evaluation(await self.evaluation())
                        node.progress.finished = True
                        if budget_spent:
                            log_budget_spent(node)
                        elif not node.finite.stopped:
                            logger.info("finished %d rounds; still serving peers", t.rounds)
                    # Keep averaging after the last round so late peers still
                    # find partners; the model only changes through merges now.
                    async with node.model_lock:
                        node.sync.sync()
                    node.gossip.signal_round()
                    await self.pause(max(t.round_interval, 0.2))
                    continue
                await node.grouping_host.hold(self._stop)
                await node.runner.wait_turn()  # a simulation's schedule, outside the lock
                if await self.train_round():
                    node.gossip.signal_round()
                await self.pause(t.round_interval)
        finally:
            done.set()

    async def train_round(self) -> bool:
        """One round, its sync and evaluation; False when it left non-finite values (the
        state before it is restored: :class:`~p2p.runtime.finite_guard.FiniteGuard`)."""
        node = self._node
        t = node.config.training
        trainer = node.learning.trainer
        t0 = time.perf_counter()
        async with node.model_lock:
            node.finite.keep()
            try:
                loss = await node.runner.train_steps(trainer, t.steps_per_round)
            except Exception as exc:
                if trainer.loss_term is None:
                    raise
                # the strategy's term failed (a bug): switch it off, never the node
                node.finite.rollback()
                node.strategy_supervisor.failed("loss term", exc)
                return False
            node.timings["train_round"].add(time.perf_counter() - t0)
            done_rounds = node.progress.round + 1
            problem = node.finite.problem(loss, no_loss_ok=trainer.privacy is not None)
            if problem is not None:
                node.finite.restore(done_rounds, problem, trio.current_time())
                node.counters["nonfinite_rounds"] = node.finite.events
                return False
            node.finite.good()
            if node.recovery is not None:
                await node.recovery.sync()  # rolled back if the merges made it worse
            else:
                node.sync.sync()
            node.strategy_supervisor.after_round()
            ev = (await self.evaluation()) if done_rounds % t.eval_every == 0 else None
            # the round and its evaluation become visible together
            node.progress.round = done_rounds
            node.progress.steps += t.steps_per_round
            node.progress.loss = loss if math.isfinite(loss) else None
            if ev is not None:
                self.record_evaluation(ev)
        return True

    async def pause(self, seconds: float) -> None:
        """Sleep between rounds, waking at once on a stop request."""
        with trio.move_on_after(seconds):
            await self._stop.wait()

    async def evaluation(self) -> Evaluation:
        """Evaluate on the test part in a worker thread (caller holds the model lock).

        A CNN's evaluation takes long enough to stall admin requests and
        pushes if it ran on the event loop.
        """
        return await self._node.runner.evaluate(self._node.learning.evaluate)

    def record_evaluation(self, ev: Evaluation) -> None:
        """Make an evaluation the node's progress, and log its line."""
        node = self._node
        custom = node.learning.custom_metrics and "accuracy" not in ev.metrics
        node.progress.accuracy = None if custom else ev.accuracy
        node.progress.metrics = dict(ev.metrics)
        node.progress.test_loss = ev.loss
        node.progress.history.append((time.time(), node.progress.round, ev.accuracy))
        log_progress(node)
