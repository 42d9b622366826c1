"""What the two sides of a transport (:mod:`~p2p.wire.dialer`, :mod:`~p2p.wire.responder`)
use of the :class:`~p2p.wire.transport.Transport` that holds them: its settings,
its handshake and its rate-limited log lines. A protocol, so that neither side
imports the transport (which imports both)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

from common.log_limit import LogLimiter
from p2p.wire.admission import Admission
from p2p.wire.handshake import PeerInfo
from p2p.wire.messages import Error
from p2p.wire.stream import MessageStream
from p2p.wire.traffic import Traffic

__all__ = ["Connector", "TransportSide"]

#: Opens a stream to ``"host:port"`` (TCP by default; tests pass in-memory ones).
Connector = Callable[[str], Awaitable[trio.abc.Stream]]


class TransportSide(Protocol):
    """The transport as its dialer and responder see it."""

    read_timeout: float
    idle_timeout: float
    connect_timeout: float
    max_outgoing: int
    max_messages_per_second: float | None
    admission: Admission
    _connector: Connector
    _offences: LogLimiter
    _bound_address: str | None
    traffic: Traffic  # requests and replies per type and direction (metrics)

    @property
    def closed(self) -> bool: ...

    def _message_stream(self, stream: trio.abc.Stream,
                        source: str | None = None) -> MessageStream: ...

    async def _handshake(self, ms: MessageStream, *, initiator: bool,
                         expected_node_id: bytes | None,
                         first_frame: Callable[[], None] | None = None,
                         seal: bool = False) -> PeerInfo: ...

    async def _tell_before_closing(self, ms: MessageStream, error: Error) -> None: ...

    def _offence(self, source: str, msg: str, *args: object) -> None: ...

    def _busy(self, source: str, msg: str, *args: object) -> None: ...
