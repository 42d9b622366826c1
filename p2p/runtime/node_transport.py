"""What the node runtime needs from a transport.

The node and its adapters for peer sampling and gossip are typed against these
protocols, not against a concrete class: the TCP
:class:`~p2p.wire.transport.Transport` satisfies them, and so does the
in-memory :class:`~p2p.testing.memnet.MemoryTransport` that tests inject.
:func:`node_frame_limit` is the frame cap a node gives its transport, and
:func:`tcp_transport` the TCP transport a daemon (or a relay-only node) listens on.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Protocol

import trio

from p2p.config.schema import NodeConfig, push_frame_bytes
from p2p.wire.admission import AdmissionLimits, receive_frame_limit
from p2p.wire.codec import Message
from p2p.wire.transport import Handler, Transport

if TYPE_CHECKING:
    from p2p.wire.identity import Identity

__all__ = ["SILENT_PERIODS", "NodeTransport", "Requester", "node_admission", "node_frame_limit",
           "tcp_transport"]

#: In a simulation, peer-sampling periods without a request after which an incoming
#: session may give its slot to a newcomer while the slots are under pressure (a
#: daemon's 15 s at its default period of 1 s).
SILENT_PERIODS = 15
#: Sessions one node id may hold at a relay: its own, a waiting reservation (one
#: more while it is replaced) and a circuit being opened.
RELAY_SESSIONS_PER_NODE = 4


def node_frame_limit(config: NodeConfig, layout: Any = None) -> int:
    """The largest frame a node accepts: twice the largest push it can receive
    (float64 values, the widest encoding a peer may choose), at least
    :data:`~p2p.wire.admission.MIN_FRAME_LIMIT`, at most ``limits.max_frame_size``.

    A frame larger than any message a peer may send is refused from its
    header, so an unfinished frame costs the node little. ``layout``: the node's
    built layout (a network.factory module's is only known then; without it such
    a node accepts up to ``limits.max_frame_size``).
    """
    if layout is None:
        if config.network.factory is not None:
            return config.limits.max_frame_size
        layout = config.layout()
    largest = max((layout.vector_length(name) for name in layout.shared_models), default=0)
    if config.strategy.name == "graph":  # it shares no model but sends the whole network
        largest = max(largest, layout.total_parameters)
    return receive_frame_limit(push_frame_bytes(largest), config.limits.max_frame_size)


def node_admission(config: NodeConfig, *, idle_timeout: float = 60.0,
                   simulated: bool = False) -> AdmissionLimits:
    """The admission caps of a node's transport: from ``limits.max_connections``
    (:meth:`AdmissionLimits.for_connections`).  ``idle_timeout``: the
    transport's (sessions silent for twice that are closed whatever the pressure).

    A relay (``relay.serve``) lets a node id hold
    :data:`RELAY_SESSIONS_PER_NODE` sessions. ``simulated``: the silence that lets a session give way is counted in the
    node's peer-sampling periods (:data:`SILENT_PERIODS`).  A simulation runs
    the swarm's clock fast (shuffles every 0.3 s) and its runs last seconds of
    virtual time: the daemon's fixed 15 s outlasted every 1,000-node run, so
    full slots refused newcomers for good.  A daemon keeps the fixed silence:
    a session stays silent while a large push is still arriving (its request
    is counted once the frame is whole), so a silence shorter than a slow
    push's upload would cut honest pushes.
    """
    limits = AdmissionLimits.for_connections(config.limits.max_connections,
                                             idle_limit=2 * idle_timeout)
    if config.relay.serve:
        # a node reserving here holds its waiting connection besides its session,
        # and one more while it asks for a circuit (RELAY_SESSIONS_PER_NODE)
        limits = dataclasses.replace(limits, sessions_per_node=max(
            limits.sessions_per_node, RELAY_SESSIONS_PER_NODE))
    if not simulated:
        return limits
    silence = SILENT_PERIODS * config.peer_sampling.period
    return dataclasses.replace(limits, silence=min(silence, limits.idle_limit))


def tcp_transport(config: NodeConfig, identity: Identity, *, tags: frozenset[bytes],
                  swarm_key: bytes | None, max_frame_size: int) -> Transport:
    """The TCP transport of a node: ``node.listen``, ``node.advertise``, the cipher and
    the ``[limits]`` of ``config`` (not bound yet: :meth:`Transport.bind`)."""
    listen = config.node.listen
    return Transport(
        identity, listen.host, listen.port, tags=tags, swarm_key=swarm_key,
        cipher=config.security.cipher,
        max_connections=config.limits.max_connections,
        connect_timeout=config.limits.connect_timeout,
        read_timeout=config.limits.read_timeout,
        max_frame_size=max_frame_size,
        max_messages_per_second=config.limits.max_messages_per_second,
        admission=node_admission(config),
        advertise_address=None if config.node.advertise is None else str(config.node.advertise),
    )


class Requester(Protocol):
    """Sends one request to a peer and returns its reply."""

    async def request(self, address: str, msg: Message, timeout: float | None = None, *,
                      node_id: bytes | None = None) -> Message:
        """The peer's reply to ``msg``.

        Raises :class:`~p2p.wire.transport.PeerUnreachable` when the request
        may not have been delivered and :class:`~p2p.wire.transport.RemoteError`
        when the peer answered with an error. ``node_id``, if given, is the
        identity the peer must prove.
        """
        ...


class NodeTransport(Requester, Protocol):
    """A transport a node can serve on, send requests over and close."""

    @property
    def listen_address(self) -> str:
        """The address peers should dial (known once serving)."""
        ...

    async def serve(self, handler: Handler,
                    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Answer requests with ``handler`` until cancelled; ``task_status`` gets the address."""
        ...

    async def aclose(self) -> None:
        """Stop serving and close every connection."""
        ...
