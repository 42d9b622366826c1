"""The node's wire protocol: the wire surfaces of its subsystems, composed.

Each package exports its own messages (``WIRE_MESSAGES`` of :mod:`gossip` and
:mod:`peersampling`, :data:`p2p.wire.messages.MESSAGES` of the wire itself);
the node registers their union with the codec when it is built. Adding a
subsystem means adding its surface here, not editing the codec.
"""

from __future__ import annotations

from gossip import WIRE_MESSAGES as GOSSIP_MESSAGES
from p2p.runtime.connectivity.dialback import DIALBACK_MESSAGES
from p2p.runtime.connectivity.punch import PUNCH_MESSAGES
from p2p.runtime.grouping.messages import GROUPING_MESSAGES
from p2p.strategy.fedlinked_messages import FEDLINKED_MESSAGES
from p2p.strategy.graph_messages import GRAPH_MESSAGES
from p2p.wire import codec
from p2p.wire.circuit import CIRCUIT_MESSAGES
from p2p.wire.messages import MESSAGES as P2P_MESSAGES
from peersampling import WIRE_MESSAGES as PEER_SAMPLING_MESSAGES

__all__ = ["NODE_MESSAGES", "register_node_messages"]

#: Every message a node speaks, as (class, wire type name) pairs.
NODE_MESSAGES: tuple[codec.WireMessage, ...] = (
    *P2P_MESSAGES,
    *DIALBACK_MESSAGES,
    *CIRCUIT_MESSAGES,
    *PUNCH_MESSAGES,
    *PEER_SAMPLING_MESSAGES,
    *GOSSIP_MESSAGES,
    *GROUPING_MESSAGES,
    *FEDLINKED_MESSAGES,
    *GRAPH_MESSAGES,
)


def register_node_messages() -> list[str]:
    """Register every message a node speaks with the codec (idempotent); returns the names."""
    return codec.register_messages(NODE_MESSAGES)
