"""Relays: circuits for nodes that peers cannot dial (docs/design/transport.md#relays).

The relay's books (:mod:`.book`, sans-IO), its service (:mod:`.service`), a
node's reservations with relays (:mod:`.client`) and the part of a node that
composes them (:mod:`.host`). The client side of a circuit is the wire's
(:mod:`p2p.wire.circuit`).
"""

from p2p.runtime.relay.book import RELAY_TAG, RelayBook
from p2p.runtime.relay.host import NodeRelay
from p2p.runtime.relay.service import RelayService

__all__ = ["RELAY_TAG", "NodeRelay", "RelayBook", "RelayService"]
