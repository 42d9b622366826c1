"""The node's collaboration watcher: its status read from the node, and the task logging it.

:mod:`p2p.runtime.collaboration` judges (sans-IO) whether a node shares a model
with a peer it knows, and when that deserves a log line.  :class:`CollaborationWatch`
feeds it from a running node: the peers of its sampler's views (with the tags
last seen, while every known peer is out of the views for a shuffle), its
models' fingerprints, its bootstrap addresses and :attr:`CollaborationWatch.contacts`,
the outcome of each shuffle (peer sampling's transport notes them there).
:meth:`CollaborationWatch.run` is the node's watcher task.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

import trio

from p2p.runtime.collaboration import (
    CollaborationReporter,
    CollaborationStatus,
    ContactLog,
    assess,
)
from p2p.runtime.relay.book import RELAY_TAG

if TYPE_CHECKING:
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


class CollaborationWatch:
    """Whether a node collaborates, and its watcher task (see the module docstring)."""

    def __init__(self, node: WatchedNode) -> None:
        self._node = node
        #: how shuffles with each address went (the evidence behind an isolation reason)
        self.contacts = ContactLog()
        self._recent_peers: dict[bytes, frozenset[bytes]] = {}  # node id -> models, last seen

    def status(self) -> CollaborationStatus:
        """Whether a known peer holds one of this node's models, and if not why."""
        node = self._node
        sampler = node.peers.started
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
        else:  # every known peer is out of the views for a shuffle right now
            peers = self._recent_peers
        return assess(
            node.learning.fingerprints, peers.values(),
            isolated=isolated,
            bootstrap=[str(b) for b in node.config.node.bootstrap],
            contacts=self.contacts, swarm_key=node.swarm_key is not None,
        )

    async def run(self) -> None:
        """Log when the node shares no model with any peer it knows (rate-limited)."""
        period = self._node.config.peer_sampling.period
        reporter = CollaborationReporter(grace=max(5 * period, 2.0), repeat=60.0)
        while True:
            said = reporter.update(self.status(), trio.current_time())
            if said is not None:
                logger.log(*said)
            await trio.sleep(min(period, 1.0))
