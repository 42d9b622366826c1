"""Sans-IO length-prefixed framing: 4-byte big-endian length, then the payload.

The decoder checks a frame's announced length against the limit as soon as the
4 header bytes are known, before buffering any of its payload, so a peer cannot
make us hold more than ``max_frame_size`` bytes per connection.

Receiving is zero-copy for large frames: :meth:`FrameDecoder.get_buffer` hands
out the place where the next bytes belong (the body of the frame in progress,
or a small staging area while a header is awaited), the caller reads into it
(``socket.recv_into``) and reports how many bytes arrived with
:meth:`FrameDecoder.buffer_updated`. :meth:`FrameDecoder.feed` does the same
for callers that already hold the bytes.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable

import numpy as np

from p2p.wire.admission import SMALL_FRAME_SIZE, FrameBudget

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FrameBudgetExceeded",
    "FrameDecoder",
    "FrameTooLarge",
    "FramingError",
    "HEADER_SIZE",
    "encode_frame",
    "foreign_protocol",
    "frame_header",
    "uninitialized_buffer",
]

HEADER_SIZE = 4
# Large enough for a ~1 MB model vector many times over; a node may lower or raise it.
DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024
_MAX_REPRESENTABLE = 2**32 - 1
_HEADER = struct.Struct(">I")
# Staging area for headers and small frames: one read usually brings a whole
# small message (an ack, a shuffle) together with its header.
_STAGE_SIZE = SMALL_FRAME_SIZE
# What a read between frames asks for after a frame too large for the stage:
# the next is likely as large, and everything read into the stage beyond its
# header is copied into the frame's own buffer (up to 64 KiB per frame).
# Enough for a header, the message's head and any small frames behind it.
_AFTER_LARGE_READ = 4096
# Boundary to which FrameDecoder.align_at places a byte of a frame's body (a
# cache line: more than any numpy dtype needs).
_ALIGNMENT = 64

#: Given the size of a frame's body, the offset in it of a byte worth aligning
#: (where array data is expected to start), or None.
AlignAt = Callable[[int], int | None]


def _address(array: np.ndarray) -> int:
    """Address of a writable array's first byte (what ``array.ctypes.data``
    says, at a quarter of its cost: that builds a helper object per call)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(array))  # type: ignore[arg-type]


class FramingError(Exception):
    """A byte stream that is not a valid sequence of frames."""


class FrameTooLarge(FramingError):
    """A frame whose length exceeds the configured maximum.

    ``header`` holds the 4 bytes that announced it, when known: a stream whose
    first "length" is huge is often another protocol (see :func:`foreign_protocol`).
    """

    def __init__(self, size: int, limit: int, header: bytes = b"") -> None:
        super().__init__(f"frame of {size} bytes exceeds the maximum frame size of {limit} bytes")
        self.size = size
        self.limit = limit
        self.header = header


class FrameBudgetExceeded(FramingError):
    """A frame refused by the :class:`~p2p.wire.admission.FrameBudget`: the
    bytes held by unfinished frames (all connections together) would pass the
    budget, or the frames announced by its ``source`` the share one source may
    announce. ``received``: the frame had that many bytes of its body in and
    could not grow (None: refused at its header).

    ``by_source`` tells the two apart: False means the node is busy (other
    connections hold the budget), not that this sender did anything wrong.
    Made right after the refusal, from the budget's state (which explains it).
    """

    def __init__(self, size: int, budget: FrameBudget, *, small: bool = False,
                 source: str | None = None, received: int | None = None) -> None:
        group = None if small or received is not None else budget.refused_share(size, source)
        what = (f"frame of {size} bytes refused" if received is None
                else f"frame of {size} bytes cut after {received} bytes of its body")
        if group is not None:
            message = (f"{what}: unfinished frames from {group} already announce "
                       f"{budget.held_by(group)} bytes; one source may announce "
                       f"{budget.source_limit} of the {budget.limit} bytes all frames "
                       "may hold together")
        else:
            held, limit = (budget.small_held, budget.small_limit) if small \
                else (budget.held, budget.limit)
            kind = "small frames" if small else "frames"
            message = (f"{what}: unfinished {kind} already hold "
                       f"{held} of the {limit} bytes they may hold together")
        super().__init__(message)
        self.size = size
        self.by_source = group is not None


# First bytes another server sends (or a client of another protocol sends us)
# and what they are; a p2p frame header is a big-endian length, never text.
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"HTTP", "an HTTP response"),
    (b"GET ", "an HTTP request"),
    (b"POST", "an HTTP request"),
    (b"HEAD", "an HTTP request"),
    (b"PUT ", "an HTTP request"),
    (b"<", "HTML or XML, as an HTTP server sends"),
    (b"SSH-", "an SSH server's banner"),
    (b"\x16\x03", "a TLS handshake"),
    (b"\x15\x03", "a TLS alert"),
)


def foreign_protocol(prefix: bytes) -> str | None:
    """What the first bytes of a stream look like when they cannot start a frame
    of this protocol (``"an HTTP response"``...), or None when they could."""
    for signature, what in _SIGNATURES:
        if prefix.startswith(signature):
            return what
    if len(prefix) >= 2 and all(32 <= b < 127 or b in (9, 10, 13) for b in prefix):
        return f"text ({prefix.decode('ascii')!r})"
    return None


def frame_header(size: int, max_frame_size: int = _MAX_REPRESENTABLE) -> bytes:
    """The 4-byte big-endian header of a ``size``-byte payload.

    Raises :class:`FrameTooLarge` if ``size`` exceeds ``max_frame_size``.
    """
    if size > max_frame_size or size > _MAX_REPRESENTABLE:
        raise FrameTooLarge(size, min(max_frame_size, _MAX_REPRESENTABLE))
    return _HEADER.pack(size)


def encode_frame(payload: bytes | bytearray | memoryview,
                 max_frame_size: int = _MAX_REPRESENTABLE) -> bytes:
    """Return ``payload`` prefixed with its 4-byte big-endian length.

    Raises :class:`FrameTooLarge` if the payload exceeds ``max_frame_size``.
    """
    return frame_header(len(payload), max_frame_size) + payload


def uninitialized_buffer(size: int) -> memoryview:
    """A writable ``size``-byte buffer whose content is undefined.

    Unlike ``bytearray(size)`` it is not zero-filled first, so a buffer about
    to be overwritten (by a socket read or a cipher) costs no extra pass, and
    its pages are only backed by memory as they are written.
    """
    return np.empty(size, dtype=np.uint8).data.cast("B")


class FrameDecoder:
    """Incremental frame decoder: give it bytes as they arrive, get whole payloads.

    Works with any chunking, down to one byte at a time. Payloads are writable
    memoryviews owned by the caller (a sealed frame can be opened in place).
    After a :class:`FrameTooLarge` the decoder is unusable (the stream cannot
    be resynchronised) and every further call raises again.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 budget: FrameBudget | None = None, source: str | None = None) -> None:
        #: Consulted when a frame's buffer is allocated, with the frame's size:
        #: the byte it names lands on a 64-byte boundary, so that arrays viewed
        #: in the payload are aligned (see codec.decode).
        self.align_at: AlignAt | None = None
        if not 0 < max_frame_size <= _MAX_REPRESENTABLE:
            raise ValueError(
                f"max_frame_size must be in 1..{_MAX_REPRESENTABLE}, got {max_frame_size}"
            )
        self.max_frame_size = max_frame_size
        #: Shared with other decoders: a frame body is reserved there before
        #: any of it is read (a large one in steps, ahead of the bytes that
        #: arrive: see FrameBudget) and released when complete (or by
        #: :meth:`release`).
        self.budget = budget
        #: Whose frames these are, for the budget's share per source (a
        #: :func:`~p2p.wire.admission.source_of` key; None: no share applies).
        #: May be set later (when the stream learns its peer): frames started
        #: from then on count against it.
        self.source = source
        self._reserved = 0  # bytes the frame in progress holds in the budget
        self._announced = 0  # its size, if the budget admitted it (0: nothing to give back)
        self._reserved_small = False  # taken from the small frames' allowance
        self._reserved_source: str | None = None  # what the reservation counted against
        #: Frame bodies started so far (one per frame that did not arrive with
        #: its header): tells a caller timing frames that a new one began.
        self.bodies_started = 0
        # Bytes received but not yet parsed live in _stage[_start:_end]; only a
        # partial header (< 4 bytes) ever stays there between reads. Not
        # zero-filled: its pages only take memory as reads reach them, and most
        # reads (acks, shuffles) touch the first one only, which matters with
        # thousands of connections in one simulated process.
        self._stage = uninitialized_buffer(_STAGE_SIZE)
        self._start = 0
        self._end = 0
        # The frame in progress once its header is known and its body did not
        # arrive with it: received straight into its final buffer.
        self._body: memoryview | None = None
        self._have = 0
        # The last frame did not fit the stage (see _AFTER_LARGE_READ).
        self._large_last = False
        self._failed: FramingError | None = None

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame currently held (its header included)."""
        if self._body is not None:
            return HEADER_SIZE + self._have
        return self._end - self._start

    @property
    def wanted(self) -> int:
        """Bytes that complete the current header or frame: reading at most this
        many never consumes any of the next frame."""
        if self._body is None:
            return HEADER_SIZE - (self._end - self._start)
        return len(self._body) - self._have

    @property
    def in_frame(self) -> bool:
        """True when part of a frame has been received but not all of it."""
        return self._body is not None or self._end > self._start

    def get_buffer(self, limit: int | None = None) -> memoryview:
        """Where the next received bytes go: a writable view of at most ``limit``
        bytes (and never more than :attr:`wanted` while a frame body is read).

        Write into it, then call :meth:`buffer_updated` with the count written.
        """
        if self._failed is not None:
            raise self._failed
        if self._body is not None:
            size = len(self._body) - self._have
            if limit is not None:
                size = min(size, limit)
            return self._body[self._have : self._have + size]
        if self._start:
            # Keep the partial header (if any) at the front of the stage.
            pending = self._end - self._start
            self._stage[:pending] = bytes(self._stage[self._start : self._end])
            self._start, self._end = 0, pending
        size = (_AFTER_LARGE_READ if self._large_last else _STAGE_SIZE) - self._end
        if limit is not None:
            size = min(size, limit)
        return self._stage[self._end : self._end + size]

    def buffer_updated(self, nbytes: int) -> list[memoryview]:
        """Account for ``nbytes`` written into the last :meth:`get_buffer` view;
        return the payloads of the frames this completed."""
        if self._failed is not None:
            raise self._failed
        if self._body is not None:
            self._have += nbytes
            if self._have < len(self._body):
                # Reads are not held back at what the frame holds (that would
                # cost a read per step): a read past it grows the frame at once,
                # or cuts it.
                if self._announced and self._have > self._reserved:
                    self._grow()
                return []
            body, self._body, self._have = self._body, None, 0
            self.release()
            return [body]
        self._end += nbytes
        return self._parse_stage()

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Consume ``data`` and return the payloads of all frames it completed."""
        frames: list[memoryview] = []
        view = memoryview(data).cast("B")
        pos, end = 0, len(view)
        while True:
            target = self.get_buffer(end - pos)
            take = len(target)
            target[:] = view[pos : pos + take]
            # a failure raised below keeps this frame alive in its traceback (the
            # decoder stores it): the body it viewed must not stay alive with it
            del target
            pos += take
            frames += self.buffer_updated(take)
            if pos >= end:
                return frames

    @property
    def frame_size(self) -> int | None:
        """Size of the frame whose body is arriving (its header is known and the
        body did not come with it), else None."""
        return None if self._body is None else len(self._body)

    @property
    def body_received(self) -> int:
        """Bytes of the body of the frame in progress received so far (those
        that came with its header included); 0 between frames."""
        return self._have

    def take_buffered(self) -> bytes:
        """The bytes received but not yet part of a whole frame (a partial header,
        or a frame's header and the part of its body in), handed over and
        forgotten: the stream leaves framing (:meth:`MessageStream.detach`)."""
        if self._body is not None:
            data = _HEADER.pack(len(self._body)) + bytes(self._body[: self._have])
            self._body, self._have = None, 0
        else:
            data = bytes(self._stage[self._start : self._end])
        self._start = self._end = 0
        self.release()
        return data

    def release(self) -> None:
        """Give back the budget the frame in progress holds (its connection is
        closing, or it is complete). Idempotent."""
        if self._announced and self.budget is not None:
            if self._reserved_small:
                self.budget.release_small(self._reserved)
            else:
                self.budget.release(self._announced, self._reserved_source,
                                    held=self._reserved)
        self._reserved = self._announced = 0

    def _new_body(self, size: int, available: int) -> memoryview:
        """The buffer of a frame of ``size`` bytes whose header has arrived,
        with ``available`` bytes of its body already staged."""
        self.bodies_started += 1
        # Frames no larger than the staging area must get through when large
        # frames have spent the budget (a handshake message, an ack): they draw
        # on an allowance of their own, whole.
        if self.budget is not None:
            small = size <= _STAGE_SIZE
            source = self.source
            # A large frame holds what has arrived, and room for as much again
            # (at least a step): announcing a frame costs no budget worth having.
            take = size if small else min(size, max(self.budget.step, 2 * available))
            if not (self.budget.reserve_small(size) if small
                    else self.budget.reserve(size, source, take=take)):
                self._start = self._end = 0
                failure = FrameBudgetExceeded(size, self.budget, small=small, source=source)
                self._failed = failure
                raise failure
            self._reserved, self._announced, self._reserved_small = take, size, small
            self._reserved_source = source
        offset = self.align_at(size) if self.align_at is not None else None
        if offset is None or not 0 <= offset < size:
            return uninitialized_buffer(size)
        raw = np.empty(size + _ALIGNMENT, dtype=np.uint8)
        pad = -(_address(raw) + offset) % _ALIGNMENT
        return raw[pad : pad + size].data

    def _grow(self) -> None:
        """The frame in progress filled what it holds in the budget: hold as
        much again (at least a step, at most the frame), or fail (the frame's
        budget is given back, and the decoder is unusable: its connection is
        cut)."""
        assert self.budget is not None and self._body is not None
        size = len(self._body)
        target = min(size, max(self._reserved + self.budget.step, 2 * self._have))
        if not self.budget.grow(target - self._reserved):
            failure = FrameBudgetExceeded(size, self.budget, source=self._reserved_source,
                                          received=self._have)
            self.release()
            self._body, self._have = None, 0
            self._failed = failure
            raise failure
        self._reserved = target

    def _parse_stage(self) -> list[memoryview]:
        frames: list[memoryview] = []
        stage = self._stage
        while self._end - self._start >= HEADER_SIZE:
            (size,) = _HEADER.unpack_from(stage, self._start)
            if size > self.max_frame_size:
                self._start = self._end = 0
                self._failed = FrameTooLarge(size, self.max_frame_size, _HEADER.pack(size))
                raise self._failed
            body_start = self._start + HEADER_SIZE
            available = self._end - body_start
            if available >= size:
                # Whole small frame: copied out so that the stage can be reused.
                frames.append(memoryview(bytearray(stage[body_start : body_start + size])))
                self._start = body_start + size
                self._large_last = False
                continue
            # The body arrives later, straight into a buffer of its final size.
            self._body = self._new_body(size, available)
            self._large_last = size > _STAGE_SIZE
            self._body[:available] = stage[body_start : self._end]
            self._have = available
            self._start = self._end = 0
            break
        if self._start == self._end:
            self._start = self._end = 0
        return frames
