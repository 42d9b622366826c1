"""Masking epochs plugged into a node: their state, ``PairOffer`` handler and status.

:class:`NodeMaskingHost` is everything ``gossip.privacy = "masked"`` adds to a
:class:`~p2p.runtime.node.Node`, built by the node with itself as ``node`` once
its push-sum cores are:

- it builds the node's :class:`~p2p.runtime.masking.driver.NodeMasking` (None
  unless masked), which the node hands to its gossip driver as the epoch hook,
  with pair offers sent over the node's transport to the addresses of its
  :class:`~p2p.runtime.peer_book.PeerBook`;
- it registers the ``PairOffer`` handler with the node's request dispatcher (in
  every privacy mode: a node that runs no epochs refuses offers);
- :meth:`status` is what the admin commands (``p2p status``) show.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from gossip import InvalidValues, PairAccept, PairOffer
from p2p.runtime.masking.driver import NodeMasking, OfferOverTransport
from p2p.runtime.peer_book import peer_label
from p2p.wire.messages import ERROR_REJECTED, Error

if TYPE_CHECKING:
    from gossip import GossipDriver, PushSum
    from p2p.config import NodeConfig
    from p2p.runtime.entropy import Entropy
    from p2p.runtime.node_transport import NodeTransport
    from p2p.runtime.peer_book import PeerBook
    from p2p.wire.dispatch import RequestDispatcher
    from p2p.wire.handshake import PeerInfo
    from p2p.wire.identity import Identity

__all__ = ["MaskedNode", "NodeMaskingHost"]

logger = logging.getLogger(__name__)


class MaskedNode(Protocol):
    """What :class:`NodeMaskingHost` uses of :class:`~p2p.runtime.node.Node` (a Protocol:
    importing the node here would be an import cycle)."""

    identity: Identity
    config: NodeConfig
    cores: dict[str, PushSum]
    peers: PeerBook
    requests: RequestDispatcher
    transport: NodeTransport
    gossip: GossipDriver
    entropy: Entropy | None

    @property
    def closing(self) -> bool: ...


class NodeMaskingHost:
    """A node's masking epochs and their plumbing (see the module docstring)."""

    def __init__(self, node: MaskedNode) -> None:
        # built before the node's gossip driver (which takes self.masking as its
        # hook): node.gossip is read by the handler only, at request time
        self._node = node
        g = node.config.gossip
        #: the epochs of every shared model (None unless ``gossip.privacy = "masked"``)
        self.masking = (NodeMasking(node.identity.node_id, g.epochs, node.cores,
                                    node.peers.holders,
                                    OfferOverTransport(node.transport, node.peers.addresses,
                                                       timeout=g.push_timeout),
                                    node.peers.holder_count, entropy=node.entropy)
                        if g.masking == "masked" else None)
        node.requests.add(PairOffer, self._serve_offer)

    def status(self) -> dict[str, dict[str, object]] | None:
        """Model name -> its masking epochs' state (None unless privacy is masked)."""
        return None if self.masking is None else self.masking.status()

    async def _serve_offer(self, peer: PeerInfo, msg: PairOffer) -> PairAccept | Error:
        if self._node.closing or self.masking is None:
            return Error(code=ERROR_REJECTED, reason="this node runs no masking epochs")
        try:
            accept = self.masking.on_offer(peer.node_id, msg)
        except InvalidValues as exc:
            logger.debug("pair offer from %s refused: %s", peer_label(peer), exc)
            return Error(code=ERROR_REJECTED, reason=str(exc))
        self._node.gossip.notify_merged()  # noise arrived: start mixing now
        return accept
