"""Trio transport: authenticated, optionally sealed request/reply over TCP.

A connection is opened by the requester, runs the handshake
(:mod:`p2p.wire.handshake`), and then carries one request at a time: the requester
sends a message and waits for exactly one reply. Outgoing connections are
pooled per address and closed after ``idle_timeout``; the server closes
incoming connections that stay silent for twice that long.

Everything that goes wrong with one connection (malformed frame, unknown
message type, failed handshake, failed decryption, timeout) closes that
connection with one log line naming the peer address and the reason; the
server keeps running.

The connection logic only needs a :class:`trio.abc.Stream`, so tests can run
it over ``trio.testing.memory_stream_pair()`` via :meth:`Transport.serve_stream`
and the ``connector`` argument. On a :class:`trio.SocketStream` it reads and
writes the socket's descriptor directly (nonblocking, waiting on trio only
when the socket is not ready) and lets the kernel queue whole frames.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import math
import os
import socket
import struct
import types
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import trio

from gossip.log_limit import LogLimiter
from p2p.wire import codec
from p2p.wire.admission import (
    DEFAULT_FRAME_BUDGET,
    DEFAULT_MIN_FRAME_RATE,
    FRAME_PACE_GRACE,
    SMALL_FRAME_SIZE,
    Admission,
    AdmissionLimits,
    Decision,
    FrameBudget,
    frame_allowance,
    frame_pace_allowance,
    source_of,
)
from p2p.wire.codec import Message
from p2p.wire.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    HEADER_SIZE,
    FrameBudgetExceeded,
    FrameDecoder,
    FrameTooLarge,
    FramingError,
    foreign_protocol,
    frame_header,
    uninitialized_buffer,
)
from p2p.wire.handshake import Handshake, HandshakeError, PeerInfo, SessionKeys
from p2p.wire.identity import Identity
from p2p.wire.listen import bind_tcp_listeners
from p2p.wire.messages import (
    ERROR_BAD_REQUEST,
    ERROR_HANDSHAKE,
    ERROR_INTERNAL,
    ERROR_NO_REPLY,
    ERROR_SESSION_REFUSED,
    NOT_REQUESTS,
    Error,
    Ping,
    Pong,
)
from p2p.wire.msgpack_views import LARGE_BIN, first_large_bin
from p2p.wire.peer_text import printable
from p2p.wire.sealing import (
    DEFAULT_CIPHER,
    TAG_SIZE,
    Opener,
    Sealer,
    SealError,
    check_cipher,
)
from p2p.wire.traffic import Traffic
from peersampling.address import HostPort, parse_host_port

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_READ_TIMEOUT",
    "ByteCount",
    "Connector",
    "Handler",
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

#: Answers one request from an authenticated peer (``None``: answered with an ``Error``).
Handler = Callable[[PeerInfo, Message], Awaitable[Message | None]]
Connector = Callable[[str], Awaitable[trio.abc.Stream]]
#: Bytes the transport sends without copying them first.
Buffer = bytes | bytearray | memoryview

_SEPARATE_HEADER_ABOVE = 64 * 1024
_HEADER_PACK = struct.Struct(">I").pack  # a frame header (framing.frame_header, unchecked)
# Frame sizes whose layout a stream remembers (see MessageStream._learn_layout).
_LAYOUTS_KEPT = 16
#: Seconds a member refused a session slot after its handshake has to start
#: sending its first request, which is read (never handled) before the refusal
#: is sent as its reply (:meth:`Transport._refuse_session`).
REFUSAL_FIRST_WAIT = 5.0

# Sockets are file descriptors that readv/writev accept (not on Windows).
_DIRECT_SOCKET_IO = hasattr(os, "readv") and hasattr(os, "writev") and os.name == "posix"
# Why a step timed out (%-formatted with the step's figures only if it does).
_SEND_TIMED_OUT = "send timed out after %g s"
_MESSAGE_TIMED_OUT = "timed out after %g s waiting for a message"
_REST_TIMED_OUT = "timed out after %g s waiting for rest of a frame"
_FRAME_TOO_SLOW = "frame of %d bytes not complete after %.0f s (slower than %g KiB/s)"
_FRAME_FELL_BEHIND = ("frame of %d bytes fell behind the floor rate: %d bytes received "
                      "%.1f s after its header (%g KiB/s after a %g s grace)")
# Frames accepted before the peer has proved its identity (and swarm key): a HELLO
# with the maximum 4096 tags is ~140 KB. Bounds what unauthenticated connections
# can make the node buffer to max_connections x this, not x max_frame_size.
HANDSHAKE_MAX_FRAME_SIZE = 256 * 1024
# Characters kept of a peer's Error code, and of each text in a line a peer
# caused (room for this node's own words around a quoted peer text).
_MAX_CODE = 40
_MAX_OFFENCE_TEXT = 600


class TransportError(Exception):
    """Base class of errors raised by :meth:`Transport.request`."""


class PeerUnreachable(TransportError):
    """The request could not be delivered or answered (connect, handshake, I/O, timeout).

    ``maybe_delivered`` is True when the failure came after the request started
    to go out (reply timed out, connection lost mid-exchange): the peer may
    have acted on it and only the reply was lost.
    """

    def __init__(self, address: str, reason: str, *, maybe_delivered: bool = False) -> None:
        super().__init__(f"peer {address} unreachable: {reason}")
        self.address = address
        self.reason = reason
        self.maybe_delivered = maybe_delivered


class RemoteError(TransportError):
    """The peer answered the request with an :class:`~p2p.wire.messages.Error`.

    ``code`` and ``reason`` are the peer's text, cut to one short printable line
    (:func:`~p2p.wire.peer_text.printable`): callers log them, often per request.
    """

    def __init__(self, address: str, code: str, reason: str) -> None:
        code, reason = printable(code, _MAX_CODE), printable(reason)
        super().__init__(f"peer {address} refused the request ({code}): {reason}")
        self.address = address
        self.code = code
        self.reason = reason


class Rejected(Exception):
    """Raised by a request handler to answer with ``Error(code, reason)``."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason


class ConnectionFailure(Exception):
    """This connection is finished; ``kind`` says why.

    Kinds: ``"eof"`` (peer closed between messages), ``"idle"`` (no message
    started within the wait), ``"broken"`` (the stream failed: reset, closed),
    ``"io"`` (timed out or closed mid-frame), ``"protocol"`` (malformed frame
    or message, failed handshake, decrypt failure), ``"busy"`` (this node had
    no room for the peer's frame: not the peer's fault, logged as no offence).
    """

    def __init__(self, reason: str, kind: str = "protocol") -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind

    @property
    def quiet(self) -> bool:
        """True for ordinary endings that deserve no warning."""
        return self.kind in ("eof", "idle")


def parse_address(address: str) -> tuple[str, int]:
    """Split ``"host:port"`` or ``"[v6]:port"`` (the rule of :mod:`peersampling.address`).

    Raises ``ValueError`` (:class:`~peersampling.address.AddressError`) naming the address.
    """
    parsed = parse_host_port(address)
    return parsed.host, parsed.port


def format_address(host: str, port: int) -> str:
    """Inverse of :func:`parse_address` (brackets IPv6 literals)."""
    return str(HostPort(host, port))


async def _tcp_connect(address: str) -> trio.abc.Stream:
    host, port = parse_address(address)
    return await trio.open_tcp_stream(host, port)


@dataclass(eq=False)
class ByteCount:
    """Bytes written to sockets (every frame: header, payload, AEAD tag), summed."""

    total: int = 0


class MessageStream:
    """Frames, optional AEAD sealing and codec on top of one trio stream."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        write_timeout: float = 10.0,
        sent: ByteCount | None = None,
        budget: FrameBudget | None = None,
        min_frame_rate: float = DEFAULT_MIN_FRAME_RATE,
        source: str | None = None,
    ) -> None:
        if not min_frame_rate > 0:
            raise ValueError(f"min_frame_rate must be > 0 bytes per second, got {min_frame_rate}")
        self.stream = stream
        #: A frame must arrive whole within read_timeout + its size at this many
        #: bytes per second (see admission.frame_allowance), and keep pace with
        #: it from its header on after ``frame_grace`` seconds
        #: (admission.frame_pace_allowance).
        self.min_frame_rate = min_frame_rate
        self.frame_grace = FRAME_PACE_GRACE
        # When the frame whose body is arriving started (its header: the first
        # wait in its body) and must be complete, and which body that is
        # (FrameDecoder.bodies_started when they were set).
        self._frame_started = 0.0
        self._frame_deadline = math.inf
        self._deadline_body = 0
        self.sent = sent if sent is not None else ByteCount()  # shared by a transport's streams
        self.max_frame_size = max_frame_size
        self.write_timeout = write_timeout
        # budget: shared by a transport's streams, bounds their unfinished frames together
        # source: the peer's source_of key, whose frames may hold a share of it
        self._decoder = FrameDecoder(max_frame_size, budget, source)
        # Frame size -> where array data began in the last frame of that size:
        # the next is received so that it starts aligned (then decoded arrays
        # view it instead of being copied). Frames of one size share a layout.
        self._data_offsets: dict[int, int | None] = {}
        self._decoder.align_at = self._data_offsets.get
        self._pending: collections.deque[memoryview] = collections.deque()
        self._sealer: Sealer | None = None
        self._opener: Opener | None = None
        self._exact_reads = False
        self._frames_received = 0
        self._block: _Deadlines | None = None  # the enclosing deadlines() block
        # The socket's descriptor, read and written directly (None: another kind
        # of stream, or no descriptors to read, as on Windows). Asked for at each
        # step: -1 once the socket is closed (then trio's calls report it).
        self._fileno: Callable[[], int] | None = (
            _socket_fileno(stream)
            if _DIRECT_SOCKET_IO and isinstance(stream, trio.SocketStream) else None)
        # Set by a send that went out whole when the caller receives next: the
        # answer cannot be there yet, so that receive waits for the socket
        # rather than trying a read bound to fail first (see _read_frame).
        self._answer_awaited = False
        if isinstance(stream, trio.SocketStream):
            _lift_send_limit(stream)

    @property
    def sealed(self) -> bool:
        """True once frames are sealed with session keys."""
        return self._sealer is not None

    def set_receive_limit(self, max_frame_size: int, *, exact: bool = False) -> None:
        """Largest frame accepted from now on (checked from the header, before buffering).

        ``exact`` reads no byte beyond the frame in progress, so that frames
        pipelined behind it are judged by the limit in force when they are read.
        """
        self._decoder.max_frame_size = max_frame_size
        self._exact_reads = exact

    def start_sealing(self, keys: SessionKeys) -> None:
        """Seal every frame from now on (both directions)."""
        self._sealer = keys.sealer()
        self._opener = keys.opener()

    async def send_payload(self, payload: Buffer) -> None:
        """Send one payload as a (sealed) frame."""
        await self.send_parts([payload])

    async def send_parts(self, parts: Sequence[Buffer], *, reply_follows: bool = False) -> int:
        """Send the concatenation of ``parts`` (see :func:`codec.encode_parts`) as
        one (sealed) frame.

        Clear, the parts go out behind the header in one vectored write, not
        copied; sealed, they are encrypted into the outgoing frame buffer
        (see :meth:`Sealer.seal_parts_into`: gathered there first, or, for
        large AES-GCM frames, encrypted from where they lie).

        A checkpoint, like trio's own calls. ``reply_follows``: the caller
        receives on this stream right after (a request, a server awaiting the
        next one), so a frame the socket takes at once is not followed by a
        yield of its own: the receive checkpoints, and yields to wait. Returns the
        payload's size (bytes before header and tag).
        """
        size = 0
        for part in parts:
            size += len(part) if type(part) is bytes else memoryview(part).nbytes
        sealer = self._sealer
        sealed_size = size if sealer is None else size + TAG_SIZE
        if sealed_size > self.max_frame_size:
            try:
                frame_header(sealed_size, self.max_frame_size)
            except FramingError as exc:
                raise ConnectionFailure(f"cannot send: {exc}", "protocol") from None
        header = _HEADER_PACK(sealed_size)
        total = HEADER_SIZE + sealed_size
        out: Sequence[Buffer]
        if sealer is not None:
            frame = uninitialized_buffer(total)
            frame[:HEADER_SIZE] = header
            sealer.seal_parts_into(parts, frame[HEADER_SIZE:])
            out = [frame]
        elif size < _SEPARATE_HEADER_ABOVE:
            out = [b"".join([header, *parts])]
        else:
            out = [header, *parts]
        fd = -1 if self._fileno is None else self._fileno()
        if fd < 0:
            block = self._current_block()
            if block is None:
                with _Deadlines(None) as own:
                    await self._send_stream(out, own)
            else:
                await self._send_stream(out, block)
        else:
            # Bypasses trio's socket methods, which yield after every call (a 1 MB
            # frame took several): cancellation is checked first, then nonblocking
            # vectored writes (header and payload in one, no copy to glue them),
            # waiting only when the socket is full.
            await trio.lowlevel.checkpoint_if_cancelled()
            try:
                sent = os.writev(fd, out)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                raise ConnectionFailure(f"send failed: {exc}", "broken") from None
            if sent == total:  # the common case: the socket took the whole frame
                if reply_follows:
                    self._answer_awaited = True
                else:
                    await trio.lowlevel.cancel_shielded_checkpoint()
            else:
                block = self._current_block()
                if block is None:
                    # A scope of its own, made with the write deadline: its end
                    # drops it (one deadline change instead of three).
                    own = _Deadlines(None)
                    self._arm_write(own, trio.current_time())
                    with own:
                        await self._send_rest(fd, out, sent, own, own=True)
                else:
                    await self._send_rest(fd, out, sent, block)
        self.sent.total += total
        return size

    async def _send_stream(self, out: Sequence[Buffer], block: _Deadlines) -> None:
        """Send ``out`` on a stream that is not a socket (trio's ``send_all``)."""
        try:
            self._arm_write(block, trio.current_time())
            for part in out:
                await self.stream.send_all(part)
            block.disarm()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise ConnectionFailure(f"send failed: {exc or type(exc).__name__}", "broken") from None

    async def _send_rest(self, fd: int, parts: Sequence[Buffer], sent: int,
                         block: _Deadlines, *, own: bool = False) -> None:
        """Write what is left of ``parts`` after the first ``sent`` bytes, waiting
        for the socket whenever it is full (within the write timeout).

        ``own``: ``block`` serves this step only and is armed already; its end
        drops the deadline."""
        if not own:
            self._arm_write(block, trio.current_time())
        views = [memoryview(part).cast("B") for part in parts]
        try:
            while True:
                while views and sent >= len(views[0]):
                    sent -= len(views[0])
                    views.pop(0)
                if not views:
                    break
                if sent:
                    views[0] = views[0][sent:]
                await trio.lowlevel.wait_writable(fd)
                try:
                    sent = os.writev(fd, views)
                except BlockingIOError:
                    sent = 0
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise ConnectionFailure(f"send failed: {exc or type(exc).__name__}", "broken") from None
        if not own:
            block.disarm()

    def _arm_write(self, block: _Deadlines, started: float) -> None:
        # One time limit for the whole frame, from when it started to go out.
        block.arm_at(started + self.write_timeout, _SEND_TIMED_OUT, self.write_timeout, "io")

    async def receive_payload(self, first_timeout: float, read_timeout: float, *,
                              last: bool = False) -> memoryview:
        """Next payload (opened if sealed), a view the caller owns.

        Waits up to ``first_timeout`` for a frame to start and ``read_timeout``
        for each further chunk of it. Large frames are received straight into
        their own buffer and opened in place: no copy after the socket read.
        ``last``: the enclosing :meth:`deadlines` block ends right after this
        step, so the deadline a wait armed is left for the block's end to drop.
        """
        if self._pending:
            self._answer_awaited = False
        else:
            block = self._current_block()
            if block is None:
                own = _Deadlines(None)
                armed = self._answer_awaited
                if armed:
                    # The read waits at once (see _read_frame): the scope is made
                    # with its deadline, which is then not set a second time.
                    self._arm_read(own, first_timeout, read_timeout)
                with own:
                    await self._read_frame(first_timeout, read_timeout, own, True, armed)
            else:
                await self._read_frame(first_timeout, read_timeout, block, last)
        payload = self._pending.popleft()
        self._frames_received += 1
        size = len(payload)
        if self._opener is not None:
            try:
                payload = self._opener.open_in_place(payload)
            except SealError as exc:
                raise ConnectionFailure(f"decrypt failure: {exc}") from None
        if size >= LARGE_BIN and size not in self._data_offsets:
            self._learn_layout(size, payload)
        return payload

    def _learn_layout(self, size: int, payload: memoryview) -> None:
        """Remember where array data starts in a frame of ``size`` bytes."""
        if len(self._data_offsets) >= _LAYOUTS_KEPT:
            self._data_offsets.clear()
        found = first_large_bin(payload)
        self._data_offsets[size] = None if found is None else found[0]

    async def _read_frame(self, first_timeout: float, read_timeout: float,
                          block: _Deadlines, keep_deadline: bool, armed: bool = False) -> None:
        """Receive until at least one whole frame is pending.

        On a socket, reads are nonblocking and the deadline is only armed when
        the socket has nothing to read: ``first_timeout`` from then while no
        frame has started, else ``read_timeout`` (so ``read_timeout`` runs from
        the last chunk received). Like trio's own calls, a checkpoint.
        ``armed``: the caller armed ``block`` for the wait that follows a send
        whose answer is awaited, just before this step.
        """
        fd = -1 if self._fileno is None else self._fileno()
        decoder = self._decoder
        pending = self._pending
        waited = False
        if fd >= 0:
            if self._answer_awaited:
                # Our own frame just went out and this step reads the answer (or
                # the next request): no read can succeed before the peer has run,
                # so wait for the socket straight away. The wait is the step's
                # checkpoint (it raises Cancelled, and yields).
                self._answer_awaited = False
                if not armed:
                    self._arm_read(block, first_timeout, read_timeout)
                waited = True
                try:
                    await trio.lowlevel.wait_readable(fd)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    raise ConnectionFailure(
                        f"receive failed: {exc or type(exc).__name__}", "broken") from None
            else:
                await trio.lowlevel.checkpoint_if_cancelled()
        while not pending:
            target = decoder.get_buffer(decoder.wanted if self._exact_reads else None)
            try:
                if fd < 0:
                    self._arm_read(block, first_timeout, read_timeout)
                    waited = True
                    received = await self._receive_into(target)
                else:
                    try:
                        received = os.readv(fd, [target])
                    except BlockingIOError:
                        self._arm_read(block, first_timeout, read_timeout)
                        waited = True
                        await trio.lowlevel.wait_readable(fd)
                        continue
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise ConnectionFailure(
                    f"receive failed: {exc or type(exc).__name__}", "broken"
                ) from None
            # a frame the decoder cuts below keeps this frame alive in the failure's
            # traceback (the decoder stores it): not the body this view is of
            del target
            if not received:
                if decoder.in_frame:
                    raise ConnectionFailure("connection closed in the middle of a frame", "io")
                raise ConnectionFailure("connection closed by peer", "eof")
            try:
                pending.extend(decoder.buffer_updated(received))
            except FrameBudgetExceeded as exc:
                # Over its source's share: the sender's doing. Over the budget of
                # all connections: this node is busy, the sender did nothing wrong.
                raise ConnectionFailure(f"frame refused: {exc}" if exc.by_source
                                        else f"node busy: {exc}",
                                        "protocol" if exc.by_source else "busy") from None
            except FramingError as exc:
                raise ConnectionFailure(self._describe_bad_frame(exc)) from None
        if not waited:
            await trio.lowlevel.cancel_shielded_checkpoint()
        elif not keep_deadline:
            block.disarm()

    def _arm_read(self, block: _Deadlines, first_timeout: float, read_timeout: float) -> None:
        decoder = self._decoder
        if decoder.in_frame:
            now = trio.current_time()
            size = decoder.frame_size
            if size is None:  # part of a header
                block.arm_at(now + read_timeout, _REST_TIMED_OUT, read_timeout, "io")
                return
            if decoder.bodies_started != self._deadline_body:
                # The first wait in this frame's body, right after its header
                # arrived (reads that need no wait take no time): its clock starts.
                self._deadline_body = decoder.bodies_started
                self._frame_started = now
                self._frame_deadline = now + frame_allowance(size, read_timeout,
                                                             self.min_frame_rate)
            # Holding the budget costs bandwidth: the body keeps pace with the
            # floor rate from its header on (after a grace), judged by the bytes
            # in when a read would wait. A receiver stalled past a deadline it
            # armed is cut when it wakes (a cancelled scope stays cancelled),
            # whatever queued meanwhile: the grace is the stall it tolerates,
            # plus what a body faster than the floor banked. A peer trickling bytes to dodge
            # the read timeout loses the frame (and the budget it holds) with
            # its connection.
            received = decoder.body_received
            pace = self._frame_started + frame_pace_allowance(
                received, self.min_frame_rate, self.frame_grace)
            whole = self._frame_deadline
            if whole <= pace and whole < now + read_timeout:  # a grace over read_timeout
                allowed = frame_allowance(size, read_timeout, self.min_frame_rate)
                block.arm_at(whole, _FRAME_TOO_SLOW,
                             (size, allowed, self.min_frame_rate / 1024), "io")
            elif pace < now + read_timeout:
                block.arm_at(pace, _FRAME_FELL_BEHIND,
                             (size, received, pace - self._frame_started,
                              self.min_frame_rate / 1024, self.frame_grace), "io")
            else:
                block.arm_at(now + read_timeout, _REST_TIMED_OUT, read_timeout, "io")
        else:
            # Formatted only if the deadline strikes: most waits end in time.
            block.arm_at(trio.current_time() + first_timeout, _MESSAGE_TIMED_OUT,
                         first_timeout, "idle")

    def deadlines(self) -> _Deadlines:
        """Context manager running several sends and receives under one cancel
        scope (entering one per step costs more than the step on small frames).

        Each step sets the scope's deadline for itself and clears it when done,
        so code between steps (a request handler) runs without one. A step that
        times out ends the block with :class:`ConnectionFailure` naming it.
        Only steps of the task that entered the block use it; others (a
        concurrent reader) get a scope of their own.
        """
        return _Deadlines(self)

    def _current_block(self) -> _Deadlines | None:
        block = self._block
        if block is None or block.task is not trio.lowlevel.current_task():
            return None
        return block

    async def _receive_into(self, target: memoryview) -> int:
        """Read at most ``len(target)`` bytes of a stream that is not a socket
        into ``target``; 0 at end of stream."""
        data = await self.stream.receive_some(len(target))
        target[: len(data)] = data
        return len(data)

    def _describe_bad_frame(self, exc: FramingError) -> str:
        # A p2p node's first frame (its HELLO) is far below the handshake limit:
        # an oversized first "frame" means the other side speaks something else.
        if self._frames_received or not isinstance(exc, FrameTooLarge):
            return f"bad frame: {exc}"
        what = foreign_protocol(exc.header)
        if what is None:
            return (f"bad frame: {exc} (a node's first frame is far smaller: the peer may "
                    "not speak this protocol)")
        return (f"the peer does not speak this protocol: its first bytes look like {what} "
                "(is this the address of a p2p node?)")

    async def send(self, msg: Message) -> None:
        """Encode and send one message."""
        await self.send_parts(codec.encode_parts(msg))

    async def receive(self, first_timeout: float, read_timeout: float) -> Message:
        """Receive and decode one message."""
        payload = await self.receive_payload(first_timeout, read_timeout)
        try:
            # Read-only: the frame's buffer is handed over, arrays view it (no copy).
            return codec.decode(payload.toreadonly())
        except codec.DecodeError as exc:
            raise ConnectionFailure(f"bad message: {exc}") from None

    async def aclose(self) -> None:
        """Close the underlying stream without waiting (and give back the frame
        budget an unfinished frame held)."""
        self._decoder.release()
        await trio.aclose_forcefully(self.stream)


class _Deadlines:
    """One cancel scope whose deadline each I/O step arms for itself.

    Attached to a stream (:meth:`MessageStream.deadlines`) it serves every step
    of the entering task until the block ends; unattached, one step.
    """

    def __init__(self, stream: MessageStream | None) -> None:
        self._stream = stream
        # Made on entering, with the deadline armed before then (if any): a
        # deadline changed on an entered scope costs trio far more.
        self._scope: trio.CancelScope | None = None
        self._deadline = math.inf
        self.task = trio.lowlevel.current_task()
        # What to report if the armed deadline strikes: a %-format of the reason,
        # its argument(s) and the failure's kind (formatted only then).
        self._timeout: tuple[str, object, str] = ("%s", "", "io")

    def arm_at(self, deadline: float, reason: str, args: object, kind: str) -> None:
        """Time out at ``deadline`` with ``reason % args`` (kind ``kind``)."""
        if self._scope is None:
            self._deadline = deadline
        else:
            self._scope.deadline = deadline
        self._timeout = (reason, args, kind)

    def failure(self) -> ConnectionFailure:
        """What the armed deadline striking means."""
        reason, args, kind = self._timeout
        return ConnectionFailure(reason % args, kind)

    def disarm(self) -> None:
        if self._scope is None:
            self._deadline = math.inf
        else:
            self._scope.deadline = math.inf

    def __enter__(self) -> _Deadlines:
        if self._stream is not None:
            if self._stream._block is not None:
                raise RuntimeError("MessageStream.deadlines() blocks do not nest")
            self._stream._block = self
        self._scope = trio.CancelScope(deadline=self._deadline)
        self._scope.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: types.TracebackType | None) -> bool:
        if self._stream is not None:
            self._stream._block = None
        scope = self._scope
        assert scope is not None, "exited a deadlines block that was never entered"
        handled = scope.__exit__(exc_type, exc, tb)
        if scope.cancelled_caught:
            raise self.failure() from None
        return handled


@dataclass(eq=False)
class _Outgoing:
    address: str
    stream: MessageStream
    peer: PeerInfo
    last_used: float
    lock: trio.Lock = field(default_factory=trio.Lock)
    closed: bool = False


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
        self._connector: Connector = connector or _tcp_connect
        self._bound_address: str | None = None
        self._pool: dict[str, _Outgoing] = {}
        self._dial_locks: dict[str, trio.Lock] = {}
        self._open = 0  # open outgoing connections (incl. handshaking); incoming: admission
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
        self._refusals_waiting = 0  # busy refusals reading the peer's first request
        self._conn_ids = itertools.count()
        # incoming connection id -> (its cancel scope, its remote label)
        self._inbound: dict[int, tuple[trio.CancelScope, str]] = {}
        self.bytes_sent = ByteCount()  # everything this transport's streams wrote
        self.traffic = Traffic()  # requests and replies per type and direction (metrics)
        self._serve_scope: trio.CancelScope | None = None
        self._bound_sockets: list[socket.socket] | None = None  # bound by bind(), not yet served
        self._closed = False

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
        return self._open + self.admission.handshakes + self.admission.sessions

    @property
    def pooled_addresses(self) -> list[str]:
        """Addresses with an open outgoing connection."""
        return [a for a, c in self._pool.items() if not c.closed]

    # -- server -----------------------------------------------------------------

    def bind(self) -> None:
        """Bind the listening sockets now (:meth:`serve` then uses them).

        Lets a node find out that its port is taken before it does anything
        else. Raises :class:`~p2p.wire.listen.ListenError` naming the address,
        the cause and the fix. Idempotent.
        """
        if self._bound_sockets is None:
            self._bound_sockets = bind_tcp_listeners(self.listen_host or None, self.listen_port)

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
                        nursery.start_soon(self._accept_loop, listener, handler, nursery)
                    nursery.start_soon(self._reap_idle)
                    logger.info("listening on %s", self._bound_address)
                    task_status.started(self._bound_address)
        finally:
            for listener in listeners:
                await trio.aclose_forcefully(listener)

    async def _accept_loop(
        self, listener: trio.SocketListener, handler: Handler, nursery: trio.Nursery
    ) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:  # e.g. EMFILE: back off instead of spinning
                logger.warning("accept failed on %s: %s", self._bound_address, exc)
                await trio.sleep(0.1)
                continue
            try:
                peer_host, peer_port = stream.socket.getpeername()[:2]
                remote = format_address(peer_host, peer_port)
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
        decision = self.admission.open_handshake(conn, source, trio.current_time())
        if not decision.admitted:
            self._offence(source, "closing connection from %s: %s", remote, decision.reason)
            await trio.aclose_forcefully(stream)
            return
        self._close_inbound(decision)
        ms = self._message_stream(stream, source)
        scope = trio.CancelScope()
        self._inbound[conn] = (scope, remote)
        try:
            with scope:
                await self._serve_admitted(conn, ms, handler, remote, source)
        finally:
            self._inbound.pop(conn, None)
            self.admission.close(conn)
            await ms.aclose()

    async def _serve_admitted(self, conn: int, ms: MessageStream, handler: Handler,
                              remote: str, source: str) -> None:
        try:
            peer = await self._handshake(ms, initiator=False, expected_node_id=None,
                                         first_frame=lambda: self.admission.first_frame(conn))
            decision = self.admission.finish_handshake(conn, peer.node_id, trio.current_time())
            if not decision.admitted:
                if decision.rule == "max_sessions":  # this node is full: no offence of the peer's
                    self._busy(source, "node busy: no free session slot for %s: %s", remote,
                               decision.reason)
                    await self._refuse_session(ms, decision.reason)
                    return
                raise ConnectionFailure(f"session refused: {decision.reason}", "protocol")
            self._close_inbound(decision)
            logger.debug("accepted %s (node %s)", remote, peer.node_id.hex()[:16])
            limiter = (
                _RateLimiter(self.max_messages_per_second)
                if self.max_messages_per_second is not None
                else None
            )
            idle_wait = self.idle_timeout * 2
            with ms.deadlines():  # one cancel scope for the connection, not one per step
                while True:
                    payload = await ms.receive_payload(idle_wait, self.read_timeout)
                    try:
                        # Read-only: the frame's buffer is handed over, arrays view it.
                        msg = codec.decode(payload.toreadonly())
                    except codec.DecodeError as exc:
                        raise ConnectionFailure(f"bad message: {exc}") from None
                    self.traffic.add("received", type(msg).__name__, payload.nbytes)
                    if limiter is not None:
                        await limiter.wait()  # throttle a flooding peer: it waits for replies
                    reply = await self._dispatch(handler, peer, msg, remote)
                    # Work keeps a session from looking silent: a ping keeps TCP alive
                    # but is none, nor is junk or a request refused with an Error.
                    if type(msg) is not Ping and not isinstance(reply, Error):
                        self.admission.request(conn, trio.current_time())
                    # The next request is awaited right after: no yield of the send's own.
                    sent = await ms.send_parts(self._encode_reply(reply, msg), reply_follows=True)
                    self.traffic.add("sent", type(reply).__name__, sent)
                    # Let go of this request's frame before the next one is allocated
                    # (the allocator hands the same, cache-warm, block back).
                    del payload, msg, reply
        except ConnectionFailure as exc:
            if exc.quiet:
                logger.debug("connection from %s ended: %s", remote, exc.reason)
            elif exc.kind == "busy":  # this node had no room: no offence of the peer's
                self._busy(source, "closing connection from %s: %s", remote, exc.reason)
            else:
                self._offence(source, "closing connection from %s: %s", remote, exc.reason)
        except Exception:  # a bug must not take the whole server down
            logger.exception("closing connection from %s: unexpected error", remote)

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
        wait = self._refusals_waiting < self.admission.limits.max_handshakes
        self._refusals_waiting += wait
        try:
            if wait:
                await ms.receive_payload(min(REFUSAL_FIRST_WAIT, self.read_timeout),
                                         self.read_timeout)
        except ConnectionFailure:
            return  # gone, or its request broke a frame rule: nothing to answer
        finally:
            self._refusals_waiting -= wait
        await self._tell_before_closing(ms, Error(ERROR_SESSION_REFUSED, told))

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
                self._offences.log(trio.current_time(), source_of(remote), logging.INFO,
                                   "closing connection from %s: %s", remote, decision.why_close)
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

    async def _reap_idle(self) -> None:
        period = max(min(self.idle_timeout / 4, self.admission.limits.silence / 3), 0.05)
        while True:
            await trio.sleep(period)
            now = trio.current_time()
            self._offences.flush(now)
            self._close_inbound(Decision(
                True, close=tuple(self.admission.expired(now)),
                why_close="silent session (no request for a while; sooner when session "
                          "slots are short)"), quiet=True)
            for conn in list(self._pool.values()):
                if not conn.lock.locked() and now - conn.last_used >= self.idle_timeout:
                    logger.debug("closing idle connection to %s", conn.address)
                    await self._drop(conn)

    # -- client -----------------------------------------------------------------

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
        reply_timeout = self.read_timeout if timeout is None else timeout
        for attempt in range(2):
            conn = self._pool.get(address)
            if (conn is not None and not conn.closed and not self._closed
                    and (node_id is None or conn.peer.node_id == node_id)
                    and trio.current_time() - conn.last_used < self.idle_timeout):
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
                        reply_timeout, self.read_timeout, last=True)
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
                        self._offence(source_of(address), "closing connection to %s: %s",
                                      address, exc.reason)
                    raise PeerUnreachable(address, exc.reason, maybe_delivered=True) from None
                conn.last_used = trio.current_time()
            finally:
                conn.lock.release()
            try:
                reply = codec.decode(reply_payload.toreadonly())  # handed over: no copy
            except codec.DecodeError as exc:
                await self._drop(conn)
                self._offence(source_of(address), "closing connection to %s: bad reply: %s",
                              address, exc)
                raise PeerUnreachable(address, f"bad reply: {exc}", maybe_delivered=True) from None
            self.traffic.add("sent", type(msg).__name__, sent)
            self.traffic.add("received", type(reply).__name__, reply_payload.nbytes)
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
        if self._closed:
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
        conn = self._pool.get(address)
        if conn is None:
            return None
        stale = trio.current_time() - conn.last_used >= self.idle_timeout
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
        if self._open >= self.max_outgoing and not await self._evict_idle_outgoing():
            raise PeerUnreachable(address, f"outgoing connection limit of {self.max_outgoing} "
                                  "reached")
        self._open += 1
        ms: MessageStream | None = None
        try:
            with trio.move_on_after(self.connect_timeout) as scope:
                try:
                    stream = await self._connector(address)
                except (OSError, ValueError, trio.BrokenResourceError) as exc:
                    raise PeerUnreachable(address, _connect_failure(exc)) from None
                ms = self._message_stream(stream, source_of(address))
                try:
                    peer = await self._handshake(ms, initiator=True, expected_node_id=node_id)
                except ConnectionFailure as exc:
                    if exc.kind == "protocol":
                        self._offence(source_of(address), "closing connection to %s: %s",
                                      address, exc.reason)
                    raise PeerUnreachable(address, exc.reason) from None
            # (no stream yet means the timeout struck while connecting)
            if scope.cancelled_caught or ms is None:
                raise PeerUnreachable(
                    address, f"connect and handshake timed out after {self.connect_timeout:g} s"
                )
        except BaseException:
            self._open -= 1
            if ms is not None:
                await ms.aclose()
            raise
        conn = _Outgoing(address, ms, peer, last_used=trio.current_time())
        self._pool[address] = conn
        return conn

    async def _evict_idle_outgoing(self) -> bool:
        """Close the least recently used idle outgoing connection; False if none is idle."""
        idle = [c for c in self._pool.values() if not c.lock.locked() and not c.closed]
        if not idle:
            return False
        victim = min(idle, key=lambda c: c.last_used)
        logger.debug("evicting idle connection to %s (connection limit)", victim.address)
        await self._drop(victim)
        return True

    async def _drop(self, conn: _Outgoing) -> None:
        """Forget ``conn`` (state first, so it is atomic) and close its stream."""
        if conn.closed:
            return
        conn.closed = True
        self._open -= 1
        if self._pool.get(conn.address) is conn:
            del self._pool[conn.address]
        await conn.stream.aclose()

    # -- shared -------------------------------------------------------------------

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
        first_frame: Callable[[], None] | None = None,
    ) -> PeerInfo:
        hs = self.handshake_class(
            self.identity,
            initiator=initiator,
            listen_address=self.listen_address,
            tags=self.tags,
            swarm_key=self.swarm_key,
            cipher=self.cipher,
            expected_node_id=expected_node_id,
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

    async def aclose(self) -> None:
        """Stop serving and close every pooled connection."""
        self._closed = True
        if self._serve_scope is not None:
            self._serve_scope.cancel()
        for sock in self._bound_sockets or []:
            sock.close()
        self._bound_sockets = None
        for conn in list(self._pool.values()):
            await self._drop(conn)
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> Transport:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _socket_fileno(stream: trio.SocketStream) -> Callable[[], int]:
    """The stream's ``fileno``, asked of the standard library socket that trio
    wraps when there is one (one C call per step instead of two calls); -1
    once the socket is closed, either way."""
    sock = stream.socket
    inner = getattr(sock, "_sock", None)
    if isinstance(inner, socket.socket) and inner.fileno() == sock.fileno():
        return inner.fileno
    return sock.fileno


def _lift_send_limit(stream: trio.SocketStream) -> None:
    """Let the kernel take a whole frame in one write.

    Trio caps the bytes a socket stream may have queued but not yet sent at
    16 KiB (``TCP_NOTSENT_LOWAT``, to keep latency low on interactive streams):
    a 1 MB frame then goes out in several writes, each waiting for the peer's
    acknowledgements, and how many depends on the congestion window of the
    moment. The transport writes whole frames and then waits for a reply, so it
    restores the system's setting (0: ``net.ipv4.tcp_notsent_lowat``, no limit
    unless configured).
    """
    option = getattr(socket, "TCP_NOTSENT_LOWAT", None)
    if option is not None:
        with contextlib.suppress(OSError):  # not a TCP socket (a socketpair in tests)
            stream.setsockopt(socket.IPPROTO_TCP, option, 0)


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
