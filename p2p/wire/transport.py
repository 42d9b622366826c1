"""Trio transport: authenticated, optionally sealed request/reply over TCP.

A connection is opened by the requester, runs the handshake
(:mod:`p2p.wire.handshake`), and then carries one request at a time: the requester
sends a message and waits for exactly one reply. :class:`Transport` holds a
node's settings and composes the two sides: :class:`~p2p.wire.dialer.Dialer`
(outgoing connections, pooled per address and closed after ``idle_timeout``)
and :class:`~p2p.wire.responder.Responder` (incoming connections, admitted,
closed when silent for twice that long), each connection's frames through a
:class:`~p2p.wire.stream.MessageStream`. Tests run it over
``trio.testing.memory_stream_pair()`` (:meth:`Transport.serve_stream`, the
``connector`` argument). Circuit addresses go through the relay
(:mod:`p2p.wire.circuit`); TCP connections leave from the listen port.

See docs/design/transport.md.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable

import trio

from common.address import Circuit, HostPort, parse_dial_address, parse_host_port
from common.log_limit import LogLimiter
from p2p.wire.admission import (
    DEFAULT_FRAME_BUDGET,
    DEFAULT_MIN_FRAME_RATE,
    SMALL_FRAME_SIZE,
    Admission,
    AdmissionLimits,
    FrameBudget,
)
from p2p.wire.circuit import open_circuit
from p2p.wire.codec import Message
from p2p.wire.dialer import DIRECT_PATHS, Dialer
from p2p.wire.errors import PeerUnreachable, Rejected, RemoteError, TransportError
from p2p.wire.framing import DEFAULT_MAX_FRAME_SIZE
from p2p.wire.handshake import Handshake, HandshakeError, PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.listen import bind_tcp_listeners, connect_from
from p2p.wire.messages import ERROR_HANDSHAKE, Error
from p2p.wire.peer_text import printable
from p2p.wire.responder import REFUSAL_FIRST_WAIT, Handler, Handover, Responder
from p2p.wire.sealing import DEFAULT_CIPHER, check_cipher
from p2p.wire.side import Connector
from p2p.wire.stream import ByteCount, ConnectionFailure, MessageStream
from p2p.wire.traffic import Traffic

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_READ_TIMEOUT",
    "HANDSHAKE_MAX_FRAME_SIZE",
    "REFUSAL_FIRST_WAIT",
    "ByteCount",
    "DIRECT_PATHS",
    "ConnectionFailure",
    "Connector",
    "Handler",
    "Handover",
    "MessageStream",
    "PeerUnreachable",
    "Rejected",
    "RemoteError",
    "Transport",
    "TransportError",
    "format_address",
    "parse_address",
]

logger = logging.getLogger(__name__)

# Defaults of a node's [limits] (p2p.config takes them from here).
DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 30.0

# Frames accepted before the peer has proved its identity (and swarm key): a HELLO
# with the maximum 4096 tags is ~140 KB. Bounds what unauthenticated connections
# can make the node buffer to max_connections x this, not x max_frame_size.
HANDSHAKE_MAX_FRAME_SIZE = 256 * 1024
# Characters kept of each text in a line a peer caused (room for this node's own
# words around a quoted peer text).
_MAX_OFFENCE_TEXT = 600


def parse_address(address: str) -> tuple[str, int]:
    """Split ``"host:port"`` or ``"[v6]:port"`` (the rule of :mod:`peersampling.address`).

    Raises ``ValueError`` (:class:`~peersampling.address.AddressError`) naming the address.
    """
    parsed = parse_host_port(address)
    return parsed.host, parsed.port


def format_address(host: str, port: int) -> str:
    """Inverse of :func:`parse_address` (brackets IPv6 literals)."""
    return str(HostPort(host, port))



class Transport:
    """Request/reply messaging between authenticated nodes.

    ``tags`` (frozenset of 32-byte model fingerprints) and ``advertise_address``
    may be changed at any time; they are sent in the HELLO of new connections.

    Incoming connections are admitted by :class:`~p2p.wire.admission.Admission`
    (``admission``; default: derived from ``max_connections``): handshake slots
    apart from session slots, caps per source address and node id, silent
    sessions closed first. Outgoing connections are capped apart
    (``max_outgoing``, default ``max_connections``) and never closed to admit
    an incoming one. ``frame_budget`` bounds the bytes all unfinished frames
    hold together (default: 16 MiB or 4 frames of ``max_frame_size``, the
    larger; 0: no bound; frames of at most 64 KiB are counted apart, against
    64 KiB per connection the transport may hold; a larger frame holds it in
    steps as its body arrives, ``FRAME_RESERVE_STEP`` at its header; one
    source's frames announce at most a quarter of it once half of it is
    announced, ``SOURCE_FRAME_SHARE``; a frame refused because
    the whole budget is full is logged as this node being busy, not as the
    sender's offence). A frame must arrive whole within ``read_timeout`` plus
    its size at ``min_frame_rate`` bytes per second (default 128 KiB/s), and
    keep pace with that rate from its header on after ``FRAME_PACE_GRACE``
    (5 s), else its connection is closed and its budget given back. Log lines a peer can cause are rate-limited per source
    (:class:`gossip.log_limit.LogLimiter`).
    """

    #: The sans-IO handshake every connection runs. Only the in-memory simulation
    #: substitutes another (:mod:`p2p.simulation.handshake`: identities it vouches for).
    handshake_class: type[Handshake] = Handshake

    def __init__(
        self,
        identity: Identity,
        listen_host: str,
        listen_port: int,
        tags: frozenset[bytes] = frozenset(),
        swarm_key: bytes | None = None,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        idle_timeout: float = 60.0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        cipher: str = DEFAULT_CIPHER,
        max_messages_per_second: float | None = None,
        advertise_address: str | None = None,
        connector: Connector | None = None,
        max_outgoing: int | None = None,
        admission: AdmissionLimits | None = None,
        frame_budget: int | None = None,
        min_frame_rate: float = DEFAULT_MIN_FRAME_RATE,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        if max_outgoing is not None and max_outgoing < 1:
            raise ValueError(f"max_outgoing must be >= 1, got {max_outgoing}")
        if swarm_key is not None and len(swarm_key) != 32:
            raise ValueError(f"swarm key must be 32 bytes, got {len(swarm_key)}")
        self.identity = identity
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.tags = frozenset(tags)
        self.swarm_key = swarm_key
        self.max_connections = max_connections
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.idle_timeout = idle_timeout
        self.max_frame_size = max_frame_size
        self.cipher = check_cipher(cipher)
        self.advertise_address = advertise_address
        if max_messages_per_second is not None and max_messages_per_second <= 0:
            raise ValueError(f"max_messages_per_second must be > 0, got {max_messages_per_second}")
        self.max_messages_per_second = max_messages_per_second
        # How a direct address is reached (TCP, or a test's in-memory network);
        # _connector adds circuits through relays on top.
        self._base_connector: Connector = connector or self._tcp_connect
        self._connector: Connector = self._connect
        #: Dial TCP from the listen port (docs/design/transport.md#hole-punching).
        self.dial_from_listen_port = True
        self._bound_address: str | None = None
        self.handler: Handler | None = None  # what serve() answers requests with
        #: A circuit through this node itself (it relays for the target): a relay's.
        self.local_circuit: Callable[[bytes], Awaitable[trio.abc.Stream]] | None = None
        self.max_outgoing = max_outgoing or max_connections
        self.admission = Admission(admission or AdmissionLimits.for_connections(
            max_connections, idle_limit=2 * idle_timeout))
        if frame_budget is None:
            frame_budget = max(DEFAULT_FRAME_BUDGET, 4 * max_frame_size)
        # Small frames: room for one unfinished per connection this transport may
        # hold, so honest traffic never runs out of it; counted all the same.
        connections = (self.admission.limits.max_sessions
                       + self.admission.limits.max_handshakes + self.max_outgoing)
        self.frame_budget = FrameBudget(
            frame_budget, SMALL_FRAME_SIZE * connections if frame_budget > 0 else 0)
        if not min_frame_rate > 0:
            raise ValueError(f"min_frame_rate must be > 0 bytes per second, got {min_frame_rate}")
        self.min_frame_rate = min_frame_rate
        self._offences = LogLimiter(logger)  # lines a peer causes: per source and interval
        self.bytes_sent = ByteCount()  # everything this transport's streams wrote
        self.traffic = Traffic()  # requests and replies per type and direction (metrics)
        self._serve_scope: trio.CancelScope | None = None
        self._bound_sockets: list[socket.socket] | None = None  # bound by bind(), not yet served
        self._closed = False
        self.dialer = Dialer(self)  # outgoing connections
        self.responder = Responder(self)  # incoming connections

    # -- addresses ------------------------------------------------------------

    @property
    def listen_address(self) -> str:
        """The address peers should dial: ``advertise_address`` or the bound "host:port"."""
        if self.advertise_address:
            return self.advertise_address
        if self._bound_address is not None:
            return self._bound_address
        return ""

    @property
    def bound_address(self) -> str | None:
        """Actual "host:port" of the listening socket once :meth:`serve` has bound it."""
        return self._bound_address

    @property
    def open_connections(self) -> int:
        """Open connections, incoming (handshaking or authenticated) and outgoing."""
        return self.dialer.open + self.admission.handshakes + self.admission.sessions

    @property
    def pooled_addresses(self) -> list[str]:
        """Addresses with an open outgoing connection."""
        return self.dialer.addresses

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` was called."""
        return self._closed

    # -- server -----------------------------------------------------------------

    def bind(self) -> None:
        """Bind the listening sockets now (:meth:`serve` then uses them).

        Lets a node find out that its port is taken before it does anything
        else. Raises :class:`~p2p.wire.listen.ListenError` naming the address,
        the cause and the fix. Idempotent.
        """
        if self._bound_sockets is None:
            self._bound_sockets = bind_tcp_listeners(self.listen_host or None, self.listen_port,
                                                     reuse_port=True)

    async def serve(
        self, handler: Handler, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen and answer requests with ``handler`` until cancelled or :meth:`aclose`.

        ``task_status.started`` receives the bound "host:port". Ping is answered
        by the transport itself; every other request is passed to ``handler``,
        which returns the reply (``None`` is answered with an ``Error``) or raises
        :class:`Rejected`.
        """
        if self._closed:
            raise RuntimeError("transport is closed")
        self.handler = handler
        self.bind()
        bound, self._bound_sockets = self._bound_sockets or [], None
        listeners = [trio.SocketListener(trio.socket.from_stdlib_socket(s)) for s in bound]
        try:
            host, port = listeners[0].socket.getsockname()[:2]
            self._bound_address = format_address(host, port)
            with trio.CancelScope() as scope:
                self._serve_scope = scope
                async with trio.open_nursery() as nursery:
                    for listener in listeners:
                        nursery.start_soon(self.responder.accept_loop, listener, handler,
                                           nursery)
                    nursery.start_soon(self._reap_idle)
                    logger.info("listening on %s", self._bound_address)
                    task_status.started(self._bound_address)
        finally:
            for listener in listeners:
                await trio.aclose_forcefully(listener)

    async def serve_stream(self, stream: trio.abc.Stream, handler: Handler, remote: str) -> None:
        """Run the responder side of one connection on ``stream`` until it ends
        (:meth:`Responder.serve_stream`: problems are logged, never raised)."""
        await self.responder.serve_stream(stream, handler, remote)

    async def _reap_idle(self) -> None:
        period = max(min(self.idle_timeout / 4, self.admission.limits.silence / 3), 0.05)
        while True:
            await trio.sleep(period)
            now = trio.current_time()
            self._offences.flush(now)
            self.responder.close_expired(now)
            await self.dialer.close_idle(now)

    # -- client -----------------------------------------------------------------

    async def _connect(self, address: str) -> trio.abc.Stream:
        """A stream to ``address``: through its relay for a circuit address."""
        target = parse_dial_address(address)  # AddressError is a ValueError: unreachable
        if isinstance(target, Circuit):
            if str(target.relay) in (self.listen_address, self._bound_address):
                if self.local_circuit is None:  # the peer reserved here: this node relays
                    raise PeerUnreachable(address, "the relay is this node itself")
                return await self.local_circuit(target.target)
            return await open_circuit(self.dialer, target, self._base_connector,
                                      self.connect_timeout)
        return await self._base_connector(address)

    async def _tcp_connect(self, address: str) -> trio.abc.Stream:
        host, port = parse_address(address)
        bound = self._bound_address
        if not self.dial_from_listen_port or bound is None:
            return await trio.open_tcp_stream(host, port)
        local = parse_host_port(bound)
        unspecified = local.host in ("0.0.0.0", "::")
        return await connect_from(host, port, "" if unspecified else local.host, local.port)

    def path_counts(self) -> dict[str, int]:
        """Open outgoing connections by path."""
        counts: dict[str, int] = {}
        for address in self.dialer.addresses:
            path = self.dialer.path(address)
            if path is not None:
                counts[path] = counts.get(path, 0) + 1
        return counts

    def path_to(self, address: str) -> str | None:
        """How the pooled connection to ``address`` goes: ``direct``, ``relayed``,
        ``punched`` or ``reversed`` (None: no connection open)."""
        return self.dialer.path(address)

    async def request(self, address: str, msg: Message, timeout: float | None = None, *,
                      node_id: bytes | None = None) -> Message:
        """Send ``msg`` to ``address`` and return the peer's reply.

        Reuses a pooled connection or opens one (connect + handshake within
        ``connect_timeout``). ``timeout`` (default ``read_timeout``) bounds the
        wait for the reply. If ``node_id`` is given the peer must have that
        identity. Raises :class:`PeerUnreachable` for any delivery failure and
        :class:`RemoteError` (code, reason) when the peer answers with an
        ``Error``; both are :class:`TransportError`.
        """
        return await self.dialer.request(address, msg, timeout, node_id=node_id)

    # -- shared by both sides ---------------------------------------------------------

    def _message_stream(self, stream: trio.abc.Stream,
                        source: str | None = None) -> MessageStream:
        """A stream of this transport's limits; ``source`` (the peer's
        :func:`~p2p.wire.admission.source_of` key) holds at most its share of
        the frame budget."""
        return MessageStream(
            stream, max_frame_size=self.max_frame_size, write_timeout=self.read_timeout,
            sent=self.bytes_sent, budget=self.frame_budget, min_frame_rate=self.min_frame_rate,
            source=source,
        )

    async def _handshake(
        self, ms: MessageStream, *, initiator: bool, expected_node_id: bytes | None,
        first_frame: Callable[[], None] | None = None, seal: bool = False,
    ) -> PeerInfo:
        """Run the handshake on ``ms``; ``seal``: seal the session even without a
        swarm key (both ends must say so: a session through a relay)."""
        hs = self.handshake_class(
            self.identity,
            initiator=initiator,
            listen_address=self.listen_address,
            tags=self.tags,
            swarm_key=self.swarm_key,
            cipher=self.cipher,
            expected_node_id=expected_node_id,
            seal=seal,
        )
        ms.set_receive_limit(min(self.max_frame_size, HANDSHAKE_MAX_FRAME_SIZE), exact=True)
        deadline_scope = trio.move_on_after(self.connect_timeout)
        with deadline_scope:
            try:
                for first in hs.start():
                    await ms.send_payload(first)
                while not hs.done:
                    payload = await ms.receive_payload(self.read_timeout, self.read_timeout)
                    if first_frame is not None:  # told once (admission: no longer mute)
                        first_frame()
                        first_frame = None
                    for out in hs.receive(bytes(payload)):
                        await ms.send_payload(out)
            except HandshakeError as exc:
                if exc.tell_peer:
                    # Tell the peer why (in clear, or sealed once the peer seals) so
                    # that its operator sees the reason.
                    if exc.seal_with is not None:
                        ms.start_sealing(exc.seal_with)
                    await self._tell_before_closing(ms, Error(ERROR_HANDSHAKE, exc.peer_reason))
                raise ConnectionFailure(f"handshake failed: {exc.reason}", "protocol") from None
            except ConnectionFailure as exc:
                kind = exc.kind if exc.kind in ("protocol", "busy") else "io"
                reason = hs.explain_close(exc.reason) if exc.kind in ("eof", "broken") \
                    else exc.reason
                raise ConnectionFailure(f"handshake failed: {reason}", kind) from None
        if deadline_scope.cancelled_caught:
            raise ConnectionFailure(
                f"handshake timed out after {self.connect_timeout:g} s", "protocol"
            )
        assert hs.result is not None
        ms.set_receive_limit(self.max_frame_size)
        if hs.result.keys is not None:
            ms.start_sealing(hs.result.keys)
        return hs.result.peer

    async def _tell_before_closing(self, ms: MessageStream, error: Error) -> None:
        """Send ``error`` as the last message of a connection about to close: within
        a second at most, and a peer that is gone by then is not an error."""
        with trio.move_on_after(min(1.0, self.read_timeout)):
            try:
                await ms.send(error)
            except ConnectionFailure:
                pass

    def _busy(self, source: str, msg: str, *args: object) -> None:
        """One INFO line for a connection this node had no room for: no offence
        of the peer's, but rate-limited per source all the same."""
        self._offences.log(trio.current_time(), source, logging.INFO, msg, *args)

    def _offence(self, source: str, msg: str, *args: object) -> None:
        """One warning line a peer caused, rate-limited per source; text in
        ``args`` (a peer may have chosen much of it) is cut to one short line."""
        args = tuple(printable(a, _MAX_OFFENCE_TEXT) if isinstance(a, str) else a
                     for a in args)
        self._offences.warning(trio.current_time(), source, msg, *args)

    async def aclose(self) -> None:
        """Stop serving and close every pooled connection."""
        self._closed = True
        if self._serve_scope is not None:
            self._serve_scope.cancel()
        for sock in self._bound_sockets or []:
            sock.close()
        self._bound_sockets = None
        await self.dialer.close_all()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> Transport:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
