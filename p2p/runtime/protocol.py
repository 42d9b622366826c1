"""The node's wire protocol: the wire surfaces of its subsystems, composed.

Each package exports its own messages (``WIRE_MESSAGES`` of :mod:`gossip` and
:mod:`peersampling`, :data:`p2p.wire.messages.MESSAGES` of the wire itself,
grouping's); each strategy declares its own in its plug-in, composed by
:func:`p2p.strategies.strategy_messages`. The node registers their union with the
codec when it is built. Adding a subsystem means adding its surface here, not
editing the codec; adding a strategy touches neither.
"""

from __future__ import annotations

from gossip import WIRE_MESSAGES as GOSSIP_MESSAGES
from p2p.runtime.connectivity.dialback import DIALBACK_MESSAGES
from p2p.runtime.connectivity.punch import PUNCH_MESSAGES
from p2p.runtime.grouping.messages import GROUPING_MESSAGES
from p2p.strategies import strategy_messages
from p2p.wire import codec
from p2p.wire.circuit import CIRCUIT_MESSAGES
from p2p.wire.messages import MESSAGES as P2P_MESSAGES
from peersampling import WIRE_MESSAGES as PEER_SAMPLING_MESSAGES

__all__ = ["NODE_MESSAGES", "node_messages", "register_node_messages"]

#: The node's own subsystems' messages, as (class, wire type name) pairs (the
#: strategies' come from their registry: :func:`node_messages`).
NODE_MESSAGES: tuple[codec.WireMessage, ...] = (
    *P2P_MESSAGES,
    *DIALBACK_MESSAGES,
    *CIRCUIT_MESSAGES,
    *PUNCH_MESSAGES,
    *PEER_SAMPLING_MESSAGES,
    *GOSSIP_MESSAGES,
    *GROUPING_MESSAGES,
)


def node_messages() -> tuple[codec.WireMessage, ...]:
    """Every message a node speaks: its subsystems' and every registered strategy's."""
    return (*NODE_MESSAGES, *strategy_messages())


def register_node_messages() -> list[str]:
    """Register every message a node speaks with the codec (idempotent); returns the names."""
    return codec.register_messages(node_messages())
