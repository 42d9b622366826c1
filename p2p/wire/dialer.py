"""The client side of a transport: pooled outgoing connections, one request at a time each.

A connection is opened by the requester (connect, then the handshake within
``connect_timeout``), pooled per address, reused while it is fresh and closed
after ``idle_timeout``. Outgoing connections are capped apart from incoming
ones (``max_outgoing``): the least recently used idle one makes room for a new
dial; none is ever closed to admit an incoming connection. Each connection has
a *path*: ``direct``, ``relayed`` (through a relay's circuit), or a direct one
that replaced a relayed one (``punched``, ``reversed``: :meth:`Dialer.adopt`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

import trio

from common.address import is_circuit
from p2p.wire import codec
from p2p.wire.admission import source_of
from p2p.wire.codec import Message
from p2p.wire.errors import PeerUnreachable, RemoteError
from p2p.wire.handshake import PeerInfo
from p2p.wire.messages import ERROR_HANDSHAKE, ERROR_SESSION_REFUSED, Error
from p2p.wire.peer_text import printable
from p2p.wire.side import Connector, TransportSide
from p2p.wire.stream import ConnectionFailure, MessageStream

__all__ = ["DIRECT_PATHS", "Dialer"]

logger = logging.getLogger("p2p.wire.transport")

#: Paths that do not go through a relay.
DIRECT_PATHS = frozenset({"direct", "punched", "reversed"})
#: A circuit is a connection to the relay, a relay round trip and the handshake
#: through it: it gets this many times ``connect_timeout``.
CIRCUIT_TIMEOUT_FACTOR = 2


@dataclass(eq=False)
class _Outgoing:
    address: str
    stream: MessageStream
    peer: PeerInfo
    last_used: float
    lock: trio.Lock = field(default_factory=trio.Lock)
    closed: bool = False
    path: str = "direct"
    retired: bool = False  # replaced by a better path: closed once its request ends


class Dialer:
    """The outgoing connections of ``transport`` (its limits, connector and handshake)."""

    def __init__(self, transport: TransportSide) -> None:
        self._t = transport  # its limits, connector, handshake and log lines
        self.pool: dict[str, _Outgoing] = {}
        self._dial_locks: dict[str, trio.Lock] = {}
        self.open = 0  # open outgoing connections, handshaking ones included
        #: Told of each new relayed connection (address, peer): hole punching's cue.
        self.on_relayed: Callable[[str, PeerInfo], None] | None = None
        #: The addresses to try, in order, when ``address`` does not answer (a
        #: signed descriptor's alternates); None: none.
        self.alternates: Callable[[str], Sequence[str]] | None = None

    async def request(
        self,
        address: str,
        msg: Message,
        timeout: float | None = None,
        *,
        node_id: bytes | None = None,
    ) -> Message:
        """Send ``msg`` to ``address`` and return the peer's reply.

        Reuses a pooled connection or opens one (connect + handshake within
        ``connect_timeout``). ``timeout`` (default ``read_timeout``) bounds the
        wait for the reply. If ``node_id`` is given the peer must have that
        identity. Raises :class:`PeerUnreachable` for any delivery failure and
        :class:`RemoteError` (code, reason) when the peer answers with an
        ``Error``; both are :class:`TransportError`.
        """
        # EncodeError: a bug in the caller, not the peer. The parts reference the
        # message's arrays (no copy): messages are immutable, and so are their arrays.
        payload = codec.encode_parts(msg)
        reply_timeout = self._t.read_timeout if timeout is None else timeout
        for attempt in range(2):
            conn = self.pool.get(address)
            if (conn is not None and not conn.closed and not self._t.closed
                    and (node_id is None or conn.peer.node_id == node_id)
                    and trio.current_time() - conn.last_used < self._t.idle_timeout):
                fresh = False  # the common case, as _connection would find it
            else:
                conn, fresh = await self._connection(address, node_id)
            try:
                conn.lock.acquire_nowait()  # free: no scheduler round trip (the I/O checkpoints)
            except trio.WouldBlock:
                await conn.lock.acquire()
            try:
                if conn.closed:
                    continue  # dropped while we waited for the lock
                try:
                    # No deadlines() block: the send arms one only if it must wait
                    # (rarely), and the reply's wait gets a scope made with its
                    # deadline (one deadline change less per request).
                    sent = await conn.stream.send_parts(payload, reply_follows=True)
                    reply_payload = await conn.stream.receive_payload(
                        reply_timeout, self._t.read_timeout, last=True)
                except BaseException as exc:
                    if not isinstance(exc, ConnectionFailure):
                        # Cancelled mid-request: a late reply would be read as the answer
                        # to the next request, so this connection cannot be reused.
                        await self._drop(conn)
                        raise
                    await self._drop(conn)
                    # A pooled connection the peer closed while idle: retry once on a new one.
                    if exc.kind in ("eof", "broken") and not fresh and attempt == 0:
                        continue
                    if exc.kind == "protocol":
                        self._t._offence(source_of(address), "closing connection to %s: %s",
                                         address, exc.reason)
                    raise PeerUnreachable(address, exc.reason, maybe_delivered=True) from None
                conn.last_used = trio.current_time()
            finally:
                conn.lock.release()
                if conn.retired:
                    await self._drop(conn)
            try:
                reply = codec.decode(reply_payload.toreadonly())  # handed over: no copy
            except codec.DecodeError as exc:
                await self._drop(conn)
                self._t._offence(source_of(address),
                                 "closing connection to %s: bad reply: %s", address, exc)
                raise PeerUnreachable(address, f"bad reply: {exc}", maybe_delivered=True) from None
            self._t.traffic.add("sent", type(msg).__name__, sent)
            self._t.traffic.add("received", type(reply).__name__, reply_payload.nbytes)
            if isinstance(reply, Error):
                if reply.code == ERROR_HANDSHAKE and fresh:
                    # refused at the end of the handshake (the peer checks our
                    # identity last): a handshake failure, and the peer closes
                    await self._drop(conn)
                    raise PeerUnreachable(address, "handshake failed: peer refused the "
                                                   f"handshake: {printable(reply.reason)}")
                if reply.code == ERROR_SESSION_REFUSED and fresh:
                    # handshake done, but the peer had no session slot: it closes,
                    # and it did not handle the request
                    await self._drop(conn)
                    raise PeerUnreachable(address, f"session refused: {printable(reply.reason)}")
                raise RemoteError(address, reply.code, reply.reason)
            return reply
        raise PeerUnreachable(address, "connection closed repeatedly")

    async def _connection(self, address: str, node_id: bytes | None) -> tuple[_Outgoing, bool]:
        if self._t.closed:
            raise PeerUnreachable(address, "transport is closed")
        conn = await self._reusable(address, node_id)
        if conn is not None:
            return conn, False
        lock = self._dial_locks.setdefault(address, trio.Lock())
        try:
            async with lock:
                conn = await self._reusable(address, node_id)  # another task may have dialled
                if conn is not None:
                    return conn, False
                return await self._dial(address, node_id), True
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._dial_locks.pop(address, None)

    async def _reusable(self, address: str, node_id: bytes | None) -> _Outgoing | None:
        conn = self.pool.get(address)
        if conn is None:
            return None
        stale = trio.current_time() - conn.last_used >= self._t.idle_timeout
        wrong = node_id is not None and conn.peer.node_id != node_id
        if conn.closed or ((stale or wrong) and not conn.lock.locked()):
            await self._drop(conn)
            return None
        if wrong and node_id is not None:  # in use by another request: another node's now
            raise PeerUnreachable(
                address,
                f"identity mismatch: expected node {node_id.hex()[:16]}, "
                f"connected node is {conn.peer.node_id.hex()[:16]}",
            )
        return conn

    async def _dial(self, address: str, node_id: bytes | None) -> _Outgoing:
        """Connect to ``address``, else to its :attr:`alternates` in order."""
        routes = [address, *(self.alternates(address) if self.alternates else ())]
        failures: list[PeerUnreachable] = []
        for route in routes:
            try:
                ms, peer = await self.open_session(route, node_id, self._t._connector)
                break
            except PeerUnreachable as exc:
                failures.append(exc)
        else:
            if len(failures) == 1:
                raise failures[0]
            raise PeerUnreachable(address, "; ".join(
                [failures[0].reason] + [f"alternate {f.address}: {f.reason}"
                                        for f in failures[1:]]))
        conn = _Outgoing(address, ms, peer, last_used=trio.current_time(),
                         path="relayed" if is_circuit(route) else "direct")
        self.pool[address] = conn
        if conn.path == "relayed" and self.on_relayed is not None:
            self.on_relayed(address, peer)
        return conn

    async def adopt(self, address: str, stream: trio.abc.Stream, node_id: bytes,
                    path: str) -> None:
        """Make ``stream`` (connected to node ``node_id``, say by a hole punch) the
        pooled connection to ``address``, after a handshake as initiator on it.

        The connection it replaces is closed once no request uses it. Raises
        :class:`PeerUnreachable` (and closes ``stream``) if the handshake fails.
        """

        async def given(_: str) -> trio.abc.Stream:
            return stream

        ms, peer = await self.open_session(address, node_id, given, seal=False)
        old = self.pool.get(address)
        self.pool[address] = _Outgoing(address, ms, peer, last_used=trio.current_time(),
                                       path=path)
        if old is not None:
            old.retired = True
            if not old.lock.locked():
                await self._drop(old)

    def path(self, address: str) -> str | None:
        """The path of the open connection to ``address`` (None: none open)."""
        conn = self.pool.get(address)
        return None if conn is None or conn.closed else conn.path

    @contextlib.asynccontextmanager
    async def session(self, address: str, node_id: bytes | None, *,
                      connector: Connector | None = None,
                      ) -> AsyncIterator[tuple[MessageStream, PeerInfo]]:
        """A connection of its own to ``address`` (connected and handshaken, never
        pooled), closed when the block ends: a dial-back that must not ride a
        pooled connection, a relay's circuit. ``connector``: how to reach the
        address (default: the transport's). Raises :class:`PeerUnreachable`."""
        ms, peer = await self.open_session(address, node_id, connector or self._t._connector)
        try:
            yield ms, peer
        finally:
            self.open -= 1
            await ms.aclose()

    async def open_session(self, address: str, node_id: bytes | None, connector: Connector,
                           *, seal: bool | None = None) -> tuple[MessageStream, PeerInfo]:
        """Connect and run the handshake within ``connect_timeout`` (twice that
        through a relay); counted in :attr:`open` until the caller gives it back
        (``open -= 1``). ``seal``: seal even without a swarm key (default: for
        a circuit address). Raises :class:`PeerUnreachable`."""
        if self.open >= self._t.max_outgoing and not await self._evict_idle_outgoing():
            raise PeerUnreachable(address, f"outgoing connection limit of {self._t.max_outgoing} "
                                  "reached")
        self.open += 1
        ms: MessageStream | None = None
        timeout = self._t.connect_timeout * (CIRCUIT_TIMEOUT_FACTOR if is_circuit(address)
                                             else 1)
        try:
            with trio.move_on_after(timeout) as scope:
                try:
                    stream = await connector(address)
                except (OSError, ValueError, trio.BrokenResourceError) as exc:
                    raise PeerUnreachable(address, _connect_failure(exc)) from None
                ms = self._t._message_stream(stream, source_of(address))
                try:
                    peer = await self._t._handshake(
                        ms, initiator=True, expected_node_id=node_id,
                        seal=is_circuit(address) if seal is None else seal)
                except ConnectionFailure as exc:
                    if exc.kind == "protocol":
                        self._t._offence(source_of(address), "closing connection to %s: %s",
                                         address, exc.reason)
                    raise PeerUnreachable(address, exc.reason) from None
            # (no stream yet means the timeout struck while connecting)
            if scope.cancelled_caught or ms is None:
                raise PeerUnreachable(address, "connect and handshake timed out after "
                                               f"{timeout:g} s")
        except BaseException:
            self.open -= 1
            if ms is not None:
                await ms.aclose()
            raise
        return ms, peer

    async def _evict_idle_outgoing(self) -> bool:
        """Close the least recently used idle outgoing connection; False if none is idle."""
        idle = [c for c in self.pool.values() if not c.lock.locked() and not c.closed]
        if not idle:
            return False
        victim = min(idle, key=lambda c: c.last_used)
        logger.debug("evicting idle connection to %s (connection limit)", victim.address)
        await self._drop(victim)
        return True

    @property
    def addresses(self) -> list[str]:
        """Addresses with an open outgoing connection."""
        return [a for a, c in self.pool.items() if not c.closed]

    async def close_idle(self, now: float) -> None:
        """Close the connections unused for ``idle_timeout`` (none is in use)."""
        for conn in list(self.pool.values()):
            if not conn.lock.locked() and now - conn.last_used >= self._t.idle_timeout:
                logger.debug("closing idle connection to %s", conn.address)
                await self._drop(conn)

    async def close_all(self) -> None:
        for conn in list(self.pool.values()):
            await self._drop(conn)

    async def _drop(self, conn: _Outgoing) -> None:
        """Forget ``conn`` (state first, so it is atomic) and close its stream."""
        if conn.closed:
            return
        conn.closed = True
        self.open -= 1
        if self.pool.get(conn.address) is conn:
            del self.pool[conn.address]
        await conn.stream.aclose()


def _connect_failure(exc: BaseException) -> str:
    """``connect failed: connection refused (nothing listens there)`` rather than
    trio's ``all attempts to connect to ... failed``: the first attempt's errno."""
    causes: list[BaseException] = [exc]
    while causes:
        cause = causes.pop(0)
        if isinstance(cause, ConnectionRefusedError):
            return "connect failed: connection refused (nothing listens on that port)"
        if isinstance(cause, OSError) and cause.strerror:
            return f"connect failed: {cause.strerror.lower()}"
        if isinstance(cause, BaseExceptionGroup):
            causes.extend(cause.exceptions)
        if cause.__cause__ is not None:
            causes.append(cause.__cause__)
    return f"connect failed: {exc or type(exc).__name__}"
