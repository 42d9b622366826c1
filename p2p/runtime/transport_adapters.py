"""Gossip's and peer sampling's transports over a node's request transport.

The gossip driver delivers pushes through a
:class:`~gossip.driver.PushTransport` (peers are node ids, failures are
:class:`~gossip.errors.PushRefused` / :class:`~gossip.errors.PushUndelivered`)
and peer sampling sends shuffles through a request function raising its own
``PeerUnreachable``; both run over one :class:`~p2p.runtime.node_transport.Requester`
(TCP or in-memory).  The daemon (:mod:`p2p.runtime.node`) and the trainer-less
:class:`~lab.averaging.peers.AveragingPeer` use these same adapters; this
module loads no torch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TypeVar

import trio

from gossip import Push, PushAck, PushRefused, PushUndelivered
from p2p.runtime.collaboration import ContactLog
from p2p.runtime.node_transport import Requester
from p2p.wire.codec import Message
from p2p.wire.transport import PeerUnreachable, RemoteError, TransportError
from peersampling import PeerUnreachable as ShuffleFailed
from peersampling import ShuffleReply, ShuffleRequest

__all__ = ["PushOverTransport", "ShuffleOverTransport", "request_as_gossip"]

log = logging.getLogger(__name__)

R = TypeVar("R", bound=Message)


class PushOverTransport:
    """Gossip's push transport over a node's connections.

    Peers are node ids; their addresses come from the descriptors peer
    sampling handed out (``addresses``, kept up to date by the owner).
    Transport errors become the gossip driver's: a refusal or a wrong reply is
    :class:`PushRefused`, a delivery failure :class:`PushUndelivered`
    (``maybe_delivered`` as the transport saw it).  ``on_unreachable(address)``,
    if given, hears of pushes that surely did not arrive (a slow but live
    holder, whose push may have arrived, is not reported).  ``timeout`` bounds
    the wait for each acknowledgement.  ``on_outcome(push, refusal)``, if given,
    hears of each push acknowledged (``refusal`` None) or refused (the peer's reason).
    """

    def __init__(self, transport: Requester, addresses: Mapping[bytes, str], *,
                 timeout: float, on_unreachable: Callable[[str], None] | None = None,
                 on_outcome: Callable[[Push, str | None], None] | None = None) -> None:
        self._transport = transport
        self._addresses = addresses
        self._on_unreachable = on_unreachable
        self._on_outcome = on_outcome
        self._timeout = timeout

    async def push(self, peer: bytes, push: Push) -> PushAck:
        """Deliver ``push`` to ``peer`` and return its acknowledgement."""
        try:
            ack = await request_as_gossip(self._transport, self._addresses, peer, push, PushAck,
                                          timeout=self._timeout,
                                          on_unreachable=self._on_unreachable)
        except PushRefused as exc:
            if self._on_outcome is not None:  # the peer's own words, without its address
                cause = exc.__cause__
                self._on_outcome(push, cause.reason if isinstance(cause, RemoteError)
                                 else exc.reason)
            raise
        if self._on_outcome is not None:
            self._on_outcome(push, None)
        return ack


async def request_as_gossip(transport: Requester, addresses: Mapping[bytes, str], peer: bytes,
                            msg: Message, expected: type[R], *, timeout: float,
                            on_unreachable: Callable[[str], None] | None = None) -> R:
    """Send ``msg`` to the node ``peer`` and return its reply of type ``expected``.

    Failures in the gossip driver's terms: a refusal or a reply of another
    type is :class:`PushRefused`, a delivery failure :class:`PushUndelivered`
    (``on_unreachable(address)`` hears of the sure ones).
    """
    address = addresses.get(peer)
    if address is None:
        raise PushUndelivered("no known address", maybe_delivered=False)
    try:
        reply = await transport.request(address, msg, node_id=peer, timeout=timeout)
    except RemoteError as exc:
        raise PushRefused(f"{address}: {exc.reason}") from exc
    except PeerUnreachable as exc:
        if not exc.maybe_delivered and on_unreachable is not None:
            on_unreachable(address)
        raise PushUndelivered(str(exc), maybe_delivered=exc.maybe_delivered) from exc
    if not isinstance(reply, expected):
        log.warning("%s to %s answered with %s", type(msg).__name__, address,
                    type(reply).__name__)
        raise PushRefused(f"{address} answered with {type(reply).__name__}")
    return reply


class ShuffleOverTransport:
    """Peer sampling's request/reply transport over a node's connections.

    With a :class:`ContactLog`, each outcome is noted there (the evidence
    behind an isolation reason) before the reply or the error is passed on.
    """

    def __init__(self, transport: Requester, contacts: ContactLog | None = None) -> None:
        self._transport = transport
        self._contacts = contacts

    async def request(self, address: str, req: ShuffleRequest) -> ShuffleReply:
        """Send ``req`` to ``address`` and return its reply (``ShuffleFailed`` otherwise)."""
        try:
            reply = await self._transport.request(address, req)
        except RemoteError as exc:
            self._failed(address, str(exc))
            raise ShuffleFailed(address, f"refused the shuffle: {exc.reason}") from exc
        except PeerUnreachable as exc:
            # the transport's reasons for a connection made but not admitted
            # start with "handshake" (failed, timed out, refused by the peer)
            self._failed(address, exc.reason, handshake=exc.reason.startswith("handshake"))
            # exc's own text starts "peer <address> unreachable": not twice
            raise ShuffleFailed(address, f"unreachable: {exc.reason}") from exc
        except TransportError as exc:
            self._failed(address, str(exc))
            raise ShuffleFailed(address, str(exc)) from exc
        except trio.Cancelled:
            # peer sampling gives each exchange the shuffle timeout (or the node stops)
            self._failed(address, "no answer within the shuffle timeout")
            raise
        if not isinstance(reply, ShuffleReply):
            reason = f"answered a shuffle with {type(reply).__name__}"
            self._failed(address, reason)
            raise ShuffleFailed(address, reason)
        if self._contacts is not None:
            self._contacts.answered(address)
        return reply

    def _failed(self, address: str, reason: str, *, handshake: bool = False) -> None:
        if self._contacts is not None:
            self._contacts.failed(address, reason, handshake=handshake)
