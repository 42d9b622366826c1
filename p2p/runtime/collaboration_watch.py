"""The node's collaboration watcher: its status read from the node, and the task logging it.

:mod:`p2p.runtime.collaboration` judges (sans-IO) whether a node shares a model
with a peer it knows, and when that deserves a log line.  :class:`CollaborationWatch`
feeds it from a running node: the peers of its sampler's views (with the tags
last seen, while every known peer is out of the views for a shuffle), its
models' fingerprints, its bootstrap addresses, :attr:`CollaborationWatch.contacts`
(the outcome of each shuffle) and :attr:`CollaborationWatch.exchanges` (the
outcome of each push, both ways). :meth:`CollaborationWatch.run` is the node's
watcher task; :meth:`CollaborationWatch.wait_for_peers` holds the first round
for ``training.min_peers`` peers that hold one of the node's models.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

import trio

from p2p.runtime.collaboration import (
    CollaborationReporter,
    CollaborationStatus,
    ContactLog,
    all_local_tag,
    assess,
    waiting_for_peers,
    with_exchanges,
)
from p2p.runtime.exchanges import ExchangeLedger
from p2p.runtime.relay.book import RELAY_TAG

if TYPE_CHECKING:
    from gossip import Push
    from p2p.config import NodeConfig
    from p2p.runtime.assembly import LearningSetup
    from p2p.runtime.peer_book import PeerBook

__all__ = ["CollaborationWatch", "WatchedNode"]

logger = logging.getLogger(__name__)

#: The tags of a relay that holds no model (a relay-only node).
_RELAY_ONLY = frozenset({RELAY_TAG})


class WatchedNode(Protocol):
    """What :class:`CollaborationWatch` reads of :class:`~p2p.runtime.node.Node` (a Protocol:
    importing the node here would be an import cycle)."""

    config: NodeConfig
    learning: LearningSetup
    swarm_key: bytes | None
    peers: PeerBook
    by_fingerprint: dict[bytes, str]

    def rounds_done(self) -> int: ...


class CollaborationWatch:
    """Whether a node collaborates, and its watcher task (see the module docstring)."""

    def __init__(self, node: WatchedNode,
                 clock: Callable[[], float] = trio.current_time) -> None:
        self._node = node
        self._clock = clock
        #: how shuffles with each address went (the evidence behind an isolation reason)
        self.contacts = ContactLog()
        #: how pushes went, both ways, per model (the evidence behind "collaborating")
        self.exchanges = ExchangeLedger()
        self._recent_peers: dict[bytes, frozenset[bytes]] = {}  # node id -> models, last seen
        self._waiting: tuple[int, int] | None = None  # (known, wanted) while holding round 1

    def interest(self) -> frozenset[bytes]:
        """The tags a peer must hold one of to be worth waiting for: this node's shared
        models' fingerprints; sharing none, its strategy's and network's tag."""
        fingerprints = frozenset(self._node.learning.fingerprints.values())
        if fingerprints:
            return fingerprints
        config = self._node.config
        return frozenset({all_local_tag(config.strategy.name, config.network.spec.notation())})

    def _known_peers(self) -> Mapping[bytes, frozenset[bytes]]:
        """Node id -> tags of every peer of the sampler's views (the last seen while a
        shuffle has taken them all out)."""
        sampler = self._node.peers.started
        isolated = sampler is None or sampler.is_isolated
        peers: dict[bytes, frozenset[bytes]] = {}
        if sampler is not None:
            for entry in sampler.peer_entries():
                d = entry.descriptor
                if d.tags == _RELAY_ONLY:  # a relay-only node: no collaborator
                    continue
                peers[d.node_id] = peers.get(d.node_id, frozenset()) | (d.tags - _RELAY_ONLY)
        if peers or isolated:
            self._recent_peers = peers
        return self._recent_peers

    def holders_known(self) -> int:
        """Known peers holding one of :meth:`interest`'s tags."""
        wanted = self.interest()
        return sum(1 for tags in self._known_peers().values() if tags & wanted)

    def status(self) -> CollaborationStatus:
        """Whether this node exchanges its models with peers it knows, and if not why
        (while it waits for ``training.min_peers`` with fewer holders known: that;
        isolated or knowing no holder, why, which says more)."""
        node = self._node
        sampler = node.peers.started
        peers = self._known_peers()
        status = assess(
            node.learning.fingerprints, peers.values(),
            isolated=sampler is None or sampler.is_isolated,
            bootstrap=[str(b) for b in node.config.node.bootstrap],
            contacts=self.contacts, swarm_key=node.swarm_key is not None,
        )
        if self._waiting is not None:
            return self._wait_status() if status.collaborating else status
        now = self._clock()
        return with_exchanges(status, {name: self.exchanges.model(name, now)
                                       for name in node.learning.fingerprints},
                              self.exchanges.window())

    def _wait_status(self) -> CollaborationStatus:
        assert self._waiting is not None
        node = self._node
        what = (", ".join(node.learning.fingerprints) if node.learning.fingerprints
                else "this node's strategy and network")
        return waiting_for_peers(*self._waiting, what, node.config.training.peer_wait)

    def pushed(self, push: Push, refusal: str | None) -> None:
        """A push of this node was acknowledged (``refusal`` None) or refused by its peer."""
        name = self._node.by_fingerprint.get(push.model)
        if name is None:
            return
        if refusal is None:
            self.exchanges.acked(name, self._clock())
        else:
            self.exchanges.refused_by_peer(name, refusal, self._clock())

    @property
    def waiting(self) -> str | None:
        """While the first round waits for ``training.min_peers``: what it waits for."""
        return None if self._waiting is None else self._wait_status().reason

    async def wait_for_peers(self, stop: trio.Event) -> None:
        """Hold the first round until ``training.min_peers`` known peers hold one of this
        node's models (:meth:`interest`), for at most ``training.peer_wait`` seconds."""
        t = self._node.config.training
        if not t.min_peers or self._node.rounds_done():
            return
        if self.holders_known() >= t.min_peers:
            return
        self._waiting = (self.holders_known(), t.min_peers)
        logger.info("%s", self._wait_status().reason)
        with trio.move_on_after(t.peer_wait) as scope:
            while self.holders_known() < t.min_peers and not stop.is_set():
                self._waiting = (self.holders_known(), t.min_peers)
                await trio.sleep(0.05)
        known, self._waiting = self.holders_known(), None
        if scope.cancelled_caught:
            logger.warning("only %d of %d peers known after %.0f s hold this node's models "
                           "(training.min_peers); training anyway", known, t.min_peers,
                           t.peer_wait)
        elif not stop.is_set():
            logger.info("%d peers known hold this node's models: training starts", known)

    async def run(self) -> None:
        """Log when the node exchanges no model with the peers it knows (rate-limited)."""
        period = self._node.config.peer_sampling.period
        reporter = CollaborationReporter(grace=max(5 * period, 2.0), repeat=60.0)
        while True:
            now = self._clock()
            self.exchanges.round_seen(self._node.rounds_done(), now)
            said = reporter.update(self.status(), now)
            if said is not None:
                logger.log(*said)
            await trio.sleep(min(period, 1.0))
