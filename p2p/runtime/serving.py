"""The node's answers to its peers' requests, routed by type.

:class:`NodeServing` owns the node's :class:`~p2p.wire.dispatch.RequestDispatcher`
and answers what the node itself serves: a ``Push`` is merged into the push-sum
core of the model it names (refused while the node shuts down, or for a model it
does not hold), a ``ShuffleRequest`` goes to the peer sampler once its sender
is the connected peer, and any other unregistered type gets ``Error(bad_request)``.
The parts that plug in (masking, grouping, relays, the strategy) register their
own handlers with :attr:`NodeServing.requests`. Every refusal is counted and
logged once per peer and interval. See docs/design/architecture.md.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

import trio

from gossip import LogLimiter, Push, PushAck, RejectedPush
from p2p.runtime.peer_book import peer_label
from p2p.wire.dispatch import RequestDispatcher
from p2p.wire.messages import ERROR_BAD_REQUEST, ERROR_REJECTED, Error
from peersampling import ShuffleReply, ShuffleRequest

if TYPE_CHECKING:
    from gossip import GossipDriver, PushSum
    from p2p.runtime.collaboration_watch import CollaborationWatch
    from p2p.wire.codec import Message
    from p2p.wire.handshake import PeerInfo
    from peersampling import PeerSampler

__all__ = ["NodeServing", "ServedNode"]

logger = logging.getLogger("p2p.runtime.node")  # the node's lines keep its logger's name


class ServedNode(Protocol):
    """What :class:`NodeServing` reads of :class:`~p2p.runtime.node.Node` (a Protocol:
    importing the node here would be an import cycle), at request time only."""

    by_fingerprint: dict[bytes, str]
    cores: dict[str, PushSum]
    gossiped: dict[str, PushSum]
    gossip: GossipDriver
    collaboration_watch: CollaborationWatch
    counters: dict[str, int]

    @property
    def closing(self) -> bool: ...
    @property
    def sampler(self) -> PeerSampler: ...


class NodeServing:
    """A node's request dispatcher and its own handlers (see the module docstring)."""

    def __init__(self, node: ServedNode) -> None:
        self._node = node
        #: routes each request by its type; plug-ins add their handlers
        self.requests = RequestDispatcher(on_unknown=self._unexpected_request)
        self.requests.add(ShuffleRequest, self._serve_shuffle)
        self.requests.add(Push, self._serve_push)
        # lines a peer's requests cause: one per peer and interval, then a summary
        # (read by admin_commands.offence_counts as "requests")
        self._offences = LogLimiter(logger)

    def _refuse(self, peer: PeerInfo, msg: str, *args: object) -> None:
        """Count a refused request and log its line (rate-limited per peer)."""
        self._node.counters["rejected_messages"] += 1
        self._offences.warning(trio.current_time(), peer.node_id.hex(), msg, *args)

    async def _serve_push(self, peer: PeerInfo, msg: Push) -> PushAck | Error:
        node = self._node
        if node.closing:
            return Error(code=ERROR_REJECTED, reason="node is shutting down")
        name = node.by_fingerprint.get(msg.model)
        if name is None:
            self._refuse(peer, "push from %s for a model this node does not hold (%s)",
                         peer_label(peer), msg.model[:4].hex())
            return Error(code=ERROR_REJECTED, reason="this node does not hold that model")
        core = node.cores[name] if name in node.cores else node.gossiped[name]
        exchanges = node.collaboration_watch.exchanges
        try:
            ack = core.on_push(peer.node_id, msg, trio.current_time())
        except RejectedPush as exc:
            # the core has logged the one warning line for this offence
            logger.debug("push of %s from %s rejected: %s", name, peer_label(peer), exc)
            exchanges.refused_here(name, str(exc), trio.current_time())
            return Error(code=ERROR_REJECTED, reason=str(exc))
        exchanges.merged(name, trio.current_time())
        node.gossip.notify_merged()
        return ack

    async def _serve_shuffle(self, peer: PeerInfo, msg: ShuffleRequest) -> ShuffleReply | Error:
        # A peer may only offer its own fresh descriptor as the sender, never another node's.
        if msg.sender.node_id != peer.node_id:
            self._refuse(peer, "shuffle from %s claims to come from node %s", peer_label(peer),
                         msg.sender.node_id[:4].hex())
            return Error(code=ERROR_BAD_REQUEST, reason="shuffle sender is not the peer")
        return self._node.sampler.on_request(msg, trio.current_time())

    async def _unexpected_request(self, peer: PeerInfo, msg: Message) -> Error:
        # Ping never gets here: the transport answers it itself.
        self._refuse(peer, "unexpected %s from %s", type(msg).__name__, peer_label(peer))
        return Error(code=ERROR_BAD_REQUEST, reason=f"{type(msg).__name__} is not a request")
