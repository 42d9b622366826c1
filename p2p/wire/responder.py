"""The server side of a transport: admit incoming connections, run their handshake,
answer their requests.

Incoming connections are admitted by :class:`~p2p.wire.admission.Admission`
(handshake slots apart from session slots, caps per source and node id, silent
sessions closed first). Each admitted connection answers one request at a time:
Ping by the transport itself, every other request by the node's handler.
Everything that goes wrong with one connection closes that connection with one
log line (rate-limited per source); the server keeps running. A handler may
answer with a :class:`Handover`: the reply is sent, then the connection leaves
the request/reply loop (and its admission slot) to carry something else.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from common.address import AddressError, HostPort, is_circuit, parse_host_port
from p2p.wire import codec
from p2p.wire.admission import Decision, source_of
from p2p.wire.codec import Message
from p2p.wire.errors import Rejected
from p2p.wire.handshake import PeerInfo
from p2p.wire.messages import (
    ERROR_BAD_REQUEST,
    ERROR_INTERNAL,
    ERROR_NO_REPLY,
    ERROR_SESSION_REFUSED,
    NOT_REQUESTS,
    Error,
    Observe,
    Observed,
    Ping,
    Pong,
)
from p2p.wire.side import TransportSide
from p2p.wire.stream import ConnectionFailure, MessageStream

__all__ = ["REFUSAL_FIRST_WAIT", "Handler", "Handover", "Responder"]

logger = logging.getLogger("p2p.wire.transport")

#: Answers one request from an authenticated peer (``None``: answered with an ``Error``).
Handler = Callable[[PeerInfo, Message], Awaitable[Message | None]]
#: Seconds a member refused a session slot after its handshake has to start
#: sending its first request, which is read (never handled) before the refusal
#: is sent as its reply (:meth:`Transport._refuse_session`).
REFUSAL_FIRST_WAIT = 5.0


@dataclass(frozen=True)
class Handover:
    """A handler's answer that ends the request/reply use of its connection.

    ``reply`` is sent as usual; then the connection's stream leaves framing
    (:meth:`MessageStream.detach`) and its admission slot, and ``take(stream,
    peer)`` runs with it (a relay's circuit, a session changing direction).
    The stream is closed when ``take`` returns, unless ``close`` is False
    (``take`` gave it to someone else). Not a wire message: the responder
    never encodes it.
    """

    reply: Message
    take: Callable[[trio.abc.Stream, PeerInfo], Awaitable[None]]
    close: bool = True


class Responder:
    """The incoming connections of ``transport`` (its admission, limits and handshake)."""

    def __init__(self, transport: TransportSide) -> None:
        self._t = transport  # its admission, limits, handshake and log lines
        self.refusals_waiting = 0  # busy refusals reading the peer's first request
        self._conn_ids = itertools.count()
        # incoming connection id -> (its cancel scope, its remote label)
        self._inbound: dict[int, tuple[trio.CancelScope, str]] = {}

    async def accept_loop(
        self, listener: trio.SocketListener, handler: Handler, nursery: trio.Nursery
    ) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:  # e.g. EMFILE: back off instead of spinning
                logger.warning("accept failed on %s: %s", self._t._bound_address, exc)
                await trio.sleep(0.1)
                continue
            try:
                peer_host, peer_port = stream.socket.getpeername()[:2]
                remote = str(HostPort(_unmapped(peer_host), peer_port))
            except OSError:
                remote = "unknown"
            nursery.start_soon(self.serve_stream, stream, handler, remote)

    async def serve_stream(self, stream: trio.abc.Stream, handler: Handler, remote: str) -> None:
        """Run the responder side of one connection on ``stream`` until it ends.

        Never raises for connection problems: they are logged (one warning per
        source and interval, the rest summed up) and the stream is closed.
        ``remote`` names the peer in log lines; its host is the source the
        admission caps count (see :mod:`p2p.wire.admission`).
        """
        source = source_of(remote)
        conn = next(self._conn_ids)
        decision = self._t.admission.open_handshake(conn, source, trio.current_time())
        if not decision.admitted:
            self._t._offence(source, "closing connection from %s: %s", remote, decision.reason)
            await trio.aclose_forcefully(stream)
            return
        self._close_inbound(decision)
        ms = self._t._message_stream(stream, source)
        scope = trio.CancelScope()
        self._inbound[conn] = (scope, remote)
        try:
            with scope:
                await self._serve_admitted(conn, ms, handler, remote, source)
        finally:
            self._inbound.pop(conn, None)
            self._t.admission.close(conn)
            await ms.aclose()

    async def _serve_admitted(self, conn: int, ms: MessageStream, handler: Handler,
                              remote: str, source: str) -> None:
        try:
            admission = self._t.admission
            peer = await self._t._handshake(ms, initiator=False, expected_node_id=None,
                                            first_frame=lambda: admission.first_frame(conn),
                                            seal=is_circuit(remote))  # through a relay
            decision = admission.finish_handshake(conn, peer.node_id, trio.current_time())
            if not decision.admitted:
                if decision.rule == "max_sessions":  # this node is full: no offence of the peer's
                    self._t._busy(source, "node busy: no free session slot for %s: %s",
                                  remote, decision.reason)
                    await self._refuse_session(ms, decision.reason)
                    return
                raise ConnectionFailure(f"session refused: {decision.reason}", "protocol")
            self._close_inbound(decision)
            peer = dataclasses.replace(peer, remote=remote)  # what handlers may check it by
            handover = await self._requests(conn, ms, handler, peer, remote)
        except ConnectionFailure as exc:
            if exc.quiet:
                logger.debug("connection from %s ended: %s", remote, exc.reason)
            elif exc.kind == "busy":  # this node had no room: no offence of the peer's
                self._t._busy(source, "closing connection from %s: %s", remote, exc.reason)
            else:
                self._t._offence(source, "closing connection from %s: %s", remote, exc.reason)
            return
        except Exception:  # a bug must not take the whole server down
            logger.exception("closing connection from %s: unexpected error", remote)
            return
        # The connection is handed over: no longer a session, so it holds no slot.
        self._inbound.pop(conn, None)
        self._t.admission.close(conn)
        stream = ms.detach()
        close = True
        try:
            await handover.take(stream, peer)
            close = handover.close
        except Exception:
            logger.exception("closing connection from %s: unexpected error after handover",
                             remote)
        finally:
            if close:
                await trio.aclose_forcefully(stream)

    async def _requests(self, conn: int, ms: MessageStream, handler: Handler, peer: PeerInfo,
                        remote: str) -> Handover:
        """Answer ``peer``'s requests until one is answered with a :class:`Handover`
        (returned once its reply is sent); raises :class:`ConnectionFailure` when
        the connection ends."""
        admission = self._t.admission
        logger.debug("accepted %s (node %s)", remote, peer.node_id.hex()[:16])
        limiter = (
            _RateLimiter(self._t.max_messages_per_second)
            if self._t.max_messages_per_second is not None
            else None
        )
        idle_wait = self._t.idle_timeout * 2
        with ms.deadlines():  # one cancel scope for the connection, not one per step
            while True:
                payload = await ms.receive_payload(idle_wait, self._t.read_timeout)
                try:
                    # Read-only: the frame's buffer is handed over, arrays view it.
                    msg = codec.decode(payload.toreadonly())
                except codec.DecodeError as exc:
                    raise ConnectionFailure(f"bad message: {exc}") from None
                self._t.traffic.add("received", type(msg).__name__, payload.nbytes)
                if limiter is not None:
                    await limiter.wait()  # throttle a flooding peer: it waits for replies
                reply = await self._dispatch(handler, peer, msg, remote)
                if isinstance(reply, Handover):
                    await ms.send_parts(self._encode_reply(reply.reply, msg))
                    return reply
                # Work keeps a session from looking silent: a ping keeps TCP alive
                # but is none, nor is junk or a request refused with an Error.
                if type(msg) is not Ping and not isinstance(reply, Error):
                    admission.request(conn, trio.current_time())
                # The next request is awaited right after: no yield of the send's own.
                sent = await ms.send_parts(self._encode_reply(reply, msg), reply_follows=True)
                self._t.traffic.add("sent", type(reply).__name__, sent)
                # Let go of this request's frame before the next one is allocated
                # (the allocator hands the same, cache-warm, block back).
                del payload, msg, reply
        raise AssertionError("unreachable")  # the loop only ends by returning or raising

    async def _refuse_session(self, ms: MessageStream, reason: str) -> None:
        """Tell a peer whose handshake completed that this node has no session
        slot for it (the caller then closes the connection).

        The peer proved membership (with a swarm key) and already seals, so the
        refusal goes sealed, as the reply to its first request. That request is
        received first, never handled: left unread, it would turn the close into
        a reset, which can reach the peer before it reads the reply. It must
        start within :data:`REFUSAL_FIRST_WAIT` and then arrives under the
        frame rules of any request (pace, budget): a model push over a slow
        link takes seconds. The connection holds no admission slot meanwhile,
        so at most ``max_handshakes`` refusals wait at once; beyond that the
        reply goes out at once (the reset may then beat it).
        """
        told = f"node busy: no free session slot ({reason}); try again later"
        wait = self.refusals_waiting < self._t.admission.limits.max_handshakes
        self.refusals_waiting += wait
        try:
            if wait:
                await ms.receive_payload(min(REFUSAL_FIRST_WAIT, self._t.read_timeout),
                                         self._t.read_timeout)
        except ConnectionFailure:
            return  # gone, or its request broke a frame rule: nothing to answer
        finally:
            self.refusals_waiting -= wait
        await self._t._tell_before_closing(ms, Error(ERROR_SESSION_REFUSED, told))

    def close_expired(self, now: float) -> None:
        """Close the sessions the admission finds silent for too long."""
        self._close_inbound(Decision(
            True, close=tuple(self._t.admission.expired(now)),
            why_close="silent session (no request for a while; sooner when session "
                      "slots are short)"), quiet=True)

    def _close_inbound(self, decision: Decision, *, quiet: bool = False) -> None:
        """Close the incoming connections the admission gave up (their slots are
        free already); one INFO line each (rate-limited), DEBUG when ``quiet``."""
        for conn in decision.close:
            entry = self._inbound.pop(conn, None)
            if entry is None:
                continue
            scope, remote = entry
            if quiet:
                logger.debug("closing connection from %s: %s", remote, decision.why_close)
            else:
                self._t._offences.log(trio.current_time(), source_of(remote), logging.INFO,
                                      "closing connection from %s: %s", remote,
                                      decision.why_close)
            scope.cancel()

    @staticmethod
    def _encode_reply(reply: Message, request: Message) -> list[bytes | memoryview]:
        try:
            return codec.encode_parts(reply)
        except codec.EncodeError as exc:
            logger.error("cannot send reply to %s: %s", type(request).__name__, exc)
            return codec.encode_parts(
                Error(ERROR_INTERNAL, "handler returned an unsendable reply"))

    async def _dispatch(self, handler: Handler, peer: PeerInfo, msg: Message,
                        remote: str) -> Message:
        if isinstance(msg, Ping):
            return Pong(msg.nonce)
        if isinstance(msg, Observe):
            return Observed(peer.remote if _is_host_port(peer.remote) else "")
        if isinstance(msg, NOT_REQUESTS):
            return Error(ERROR_BAD_REQUEST, f"{type(msg).__name__} is not a request")
        try:
            reply = await handler(peer, msg)
        except Rejected as exc:
            return Error(exc.code, exc.reason)
        except Exception:
            logger.exception("handler failed on %s from %s", type(msg).__name__, remote)
            return Error(ERROR_INTERNAL, f"handler failed on {type(msg).__name__}")
        if reply is None:
            return Error(ERROR_NO_REPLY, f"no reply to {type(msg).__name__}")
        return reply


class _RateLimiter:
    """Token bucket: ``rate`` messages per second, bursts of up to ``max(1, rate)``."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate)
        self.tokens = self.capacity
        self.updated = trio.current_time()

    async def wait(self) -> None:
        now = trio.current_time()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens < 1.0:
            await trio.sleep((1.0 - self.tokens) / self.rate)
            self.tokens = 1.0
            self.updated = trio.current_time()
        self.tokens -= 1.0


def _is_host_port(remote: str) -> bool:
    """Whether a connection's remote label is an address (in-memory streams have labels)."""
    try:
        parse_host_port(remote)
    except AddressError:
        return False
    return True


def _unmapped(host: str) -> str:
    """``a.b.c.d`` for an IPv4 peer on a dual-stack listener (``::ffff:a.b.c.d``)."""
    if host.startswith("::ffff:") and "." in host:
        return host[len("::ffff:"):]
    return host
