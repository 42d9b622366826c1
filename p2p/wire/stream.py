"""One connection's messages: frames, optional AEAD sealing and the codec over a trio stream.

:class:`MessageStream` sends and receives whole frames under the frame rules of
:mod:`p2p.wire.admission` (size, budget, pace). It only needs a
:class:`trio.abc.Stream`; on a :class:`trio.SocketStream` it reads and writes
the socket's descriptor directly (nonblocking, waiting on trio only when the
socket is not ready) and lets the kernel queue whole frames. Every failure is
one :class:`ConnectionFailure` whose ``kind`` says what it means for the
connection. The transport (:mod:`p2p.wire.transport`) runs one per connection.
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import socket
import struct
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import trio

from p2p.wire import codec
from p2p.wire.admission import (
    DEFAULT_MIN_FRAME_RATE,
    FRAME_PACE_GRACE,
    FrameBudget,
    frame_allowance,
    frame_pace_allowance,
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
from p2p.wire.handshake import SessionKeys
from p2p.wire.msgpack_views import LARGE_BIN, first_large_bin
from p2p.wire.sealing import TAG_SIZE, Opener, Sealer, SealError

__all__ = ["Buffer", "ByteCount", "ConnectionFailure", "MessageStream", "Prepended"]

#: Bytes the transport sends without copying them first.
Buffer = bytes | bytearray | memoryview

_SEPARATE_HEADER_ABOVE = 64 * 1024
_HEADER_PACK = struct.Struct(">I").pack  # a frame header (framing.frame_header, unchecked)
# Frame sizes whose layout a stream remembers (see MessageStream._learn_layout).
_LAYOUTS_KEPT = 16

# Sockets are file descriptors that readv/writev accept (not on Windows).
_DIRECT_SOCKET_IO = hasattr(os, "readv") and hasattr(os, "writev") and os.name == "posix"
# Why a step timed out (%-formatted with the step's figures only if it does).
_SEND_TIMED_OUT = "send timed out after %g s"
_MESSAGE_TIMED_OUT = "timed out after %g s waiting for a message"
_REST_TIMED_OUT = "timed out after %g s waiting for rest of a frame"
_FRAME_TOO_SLOW = "frame of %d bytes not complete after %.0f s (slower than %g KiB/s)"
_FRAME_FELL_BEHIND = ("frame of %d bytes fell behind the floor rate: %d bytes received "
                      "%.1f s after its header (%g KiB/s after a %g s grace)")


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
        self._detached = False  # see detach()
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

    def detach(self) -> trio.abc.Stream:
        """Leave framing: the underlying stream, to carry something else from here
        (a relayed circuit, a session that changes direction).

        Bytes already received past the last frame read (whole frames not yet
        read included, in their wire form) are handed over first by a
        :class:`Prepended` stream. :meth:`aclose` no longer closes the stream:
        it is the caller's now.
        """
        rest = b"".join(_HEADER_PACK(len(p)) + bytes(p) for p in self._pending)
        self._pending.clear()
        rest += self._decoder.take_buffered()
        stream, self._detached = self.stream, True
        return Prepended(rest, stream) if rest else stream

    async def aclose(self) -> None:
        """Close the underlying stream without waiting (and give back the frame
        budget an unfinished frame held); after :meth:`detach`, only the latter."""
        self._decoder.release()
        if not self._detached:
            await trio.aclose_forcefully(self.stream)


class Prepended(trio.abc.Stream):
    """``inner`` with ``data`` received first (what framing had read ahead)."""

    def __init__(self, data: bytes, inner: trio.abc.Stream) -> None:
        self._data = data
        self.inner = inner

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._data:
            await trio.lowlevel.checkpoint()
            size = len(self._data) if max_bytes is None else max_bytes
            out, self._data = self._data[:size], self._data[size:]
            return out
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


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
