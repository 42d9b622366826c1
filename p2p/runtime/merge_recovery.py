"""A node's roll-back of merges that made its model worse on its own held-out data.

After every training round the trainer folds the merges that came in during
the round into the network (:class:`gossip.ModelSync`); with
``gossip.recovery`` on, :meth:`NodeRecovery.sync` measures the loss on a
held-out probe of the node's own data (the first :data:`PROBE_SAMPLES` of its
test part, which no peer sees) before and after, and when
:class:`gossip.recovery.MergeRecovery` calls it a jump for the worse, rolls
the merges back (the node keeps its own training) and blames the peers whose
merges moved the model most; one blamed twice within 20 rounds is struck, as a
peer that took pushes and gave nothing back: no pushes to it for a while, and
out of the peer-sampling views (docs/design/trust.md, "Recovery").
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, Protocol

import torch
import trio

from gossip import LogLimiter, PushSum
from gossip.recovery import MergeRecovery, RecoverySettings
from learner.data_factory import DatasetData

if TYPE_CHECKING:
    from gossip import GossipDriver, ModelSync
    from p2p.runtime.assembly import AnyLearning
    from p2p.runtime.peer_book import PeerBook
    from p2p.runtime.train_runner import TrainRunner

logger = logging.getLogger(__name__)

#: Held-out samples the loss before and after a round's merges is measured on.
PROBE_SAMPLES = 256
#: Seconds a blamed peer gets no pushes when the node does not choose partners by
#: reciprocity (which pauses it itself, doubling at each strike).
BLAME_PAUSE = 60.0


class RecoveringNode(Protocol):
    """What :class:`NodeRecovery` uses of :class:`~p2p.runtime.node.Node`."""

    learning: AnyLearning
    cores: dict[str, PushSum]
    runner: TrainRunner
    gossip: GossipDriver
    peers: PeerBook

    @property
    def sync(self) -> ModelSync: ...


class NodeRecovery:
    """Checks each round's merges against the node's own held-out loss (see the module)."""

    def __init__(self, node: RecoveringNode, settings: RecoverySettings | None = None) -> None:
        self._node = node
        self.judge = MergeRecovery(settings)
        self._probe = _probe(node.learning.data)
        self._offences = LogLimiter(logger)
        self.struck = 0  # strikes given for merges rolled back

    @property
    def rollbacks(self) -> int:
        """Rounds whose merges were rolled back."""
        return self.judge.rollbacks

    async def sync(self) -> None:
        """``node.sync.sync()``, rolled back if the merges made the held-out loss jump
        (the caller holds the model lock)."""
        node = self._node
        if self._probe[1] is None or not len(self._probe[1]):
            node.sync.sync()
            return
        own = await self._loss()  # the network holds this round's own training only
        node.sync.sync()
        merged = await self._loss()
        moved: dict[bytes, float] = {}
        for core in node.cores.values():
            for peer, size in core.take_moved().items():
                moved[peer] = moved.get(peer, 0.0) + size
        verdict = self.judge.judge(own, merged, moved)
        if not verdict.roll_back:
            return
        node.sync.roll_back()
        now = trio.current_time()
        partners = node.gossip.partners
        for peer in verdict.struck:
            self.struck += 1
            if partners is not None:
                partners.strike(peer, now)
            else:
                node.peers.distrust(peer, BLAME_PAUSE)
        self._offences.warning(
            now, ",".join(p.hex() for p in verdict.blamed) or "no peer",
            "rolled back this round's merges (%s); blamed %s, struck %s", verdict.reason,
            ", ".join(p[:4].hex() for p in verdict.blamed) or "no peer",
            ", ".join(p[:4].hex() for p in verdict.struck) or "none")

    async def _loss(self) -> float:
        x, y = self._probe
        assert x is not None and y is not None
        trainer = self._node.learning.trainer
        ev = await self._node.runner.evaluate(functools.partial(trainer.evaluate, x, y))
        return ev.loss


Probe = tuple[Any, Any]


def _probe(data: Any) -> Probe:
    """The first :data:`PROBE_SAMPLES` of the node's test part, as arrays or tensors; (None,
    None) when a user's dataset cannot be read that way (then nothing is rolled back)."""
    if not isinstance(data, DatasetData):  # a task's arrays (NodeData)
        return data.test_x[:PROBE_SAMPLES], data.test_y[:PROBE_SAMPLES]
    if data.test_tensors is not None:
        x, y = data.test_tensors
        return x[:PROBE_SAMPLES], y[:PROBE_SAMPLES]
    try:
        items = [data.test[i] for i in range(min(PROBE_SAMPLES, len(data.test)))]  # type: ignore[arg-type]
        return (torch.stack([torch.as_tensor(x) for x, _ in items]),
                torch.stack([torch.as_tensor(y) for _, y in items]))
    except Exception as exc:  # a user's dataset: any failure is theirs to report
        logger.warning("gossip.recovery: no held-out probe (reading the first %d test samples "
                       "failed: %s); merges are not rolled back. Give data.factory's test set "
                       "(x, y) items of tensors, or set gossip.recovery = false",
                       PROBE_SAMPLES, exc)
        return None, None
