"""Sans-IO length-prefixed framing: 4-byte big-endian length, then the payload.

The decoder checks a frame's announced length against the limit as soon as the
4 header bytes are known, before buffering any of its payload, so a peer cannot
make us allocate more than ``max_frame_size`` bytes per connection.
"""

from __future__ import annotations

import struct

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FrameDecoder",
    "FrameTooLarge",
    "FramingError",
    "HEADER_SIZE",
    "encode_frame",
    "foreign_protocol",
    "frame_header",
]

HEADER_SIZE = 4
# Large enough for a ~1 MB model vector many times over; a node may lower or raise it.
DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024
_MAX_REPRESENTABLE = 2**32 - 1
_HEADER = struct.Struct(">I")


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


def encode_frame(payload: bytes, max_frame_size: int = _MAX_REPRESENTABLE) -> bytes:
    """Return ``payload`` prefixed with its 4-byte big-endian length.

    Raises :class:`FrameTooLarge` if the payload exceeds ``max_frame_size``.
    """
    return frame_header(len(payload), max_frame_size) + payload


class FrameDecoder:
    """Incremental frame decoder: feed it bytes as they arrive, get whole payloads.

    Works with any chunking, down to one byte at a time. After a
    :class:`FrameTooLarge` the decoder is unusable (the stream cannot be
    resynchronised) and every further :meth:`feed` raises again.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if not 0 < max_frame_size <= _MAX_REPRESENTABLE:
            raise ValueError(
                f"max_frame_size must be in 1..{_MAX_REPRESENTABLE}, got {max_frame_size}"
            )
        self.max_frame_size = max_frame_size
        self._header = bytearray()
        # Pieces of the current payload, joined once complete: one copy per frame
        # and memory proportional to what actually arrived (never preallocated).
        self._chunks: list[bytes] = []
        self._have = 0
        self._expected: int | None = None  # payload length once the header is complete
        self._failed: FrameTooLarge | None = None

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame currently held (header included)."""
        return len(self._header) + self._have

    @property
    def wanted(self) -> int:
        """Bytes that complete the current header or frame: reading at most this
        many never consumes any of the next frame."""
        if self._expected is None:
            return HEADER_SIZE - len(self._header)
        return max(1, self._expected - self._have)

    @property
    def in_frame(self) -> bool:
        """True when part of a frame has been received but not all of it."""
        return self.buffered > 0 or self._expected is not None

    def feed(self, data: bytes | bytearray) -> list[bytes]:
        """Consume ``data`` and return the payloads of all frames it completed."""
        if self._failed is not None:
            raise self._failed
        frames: list[bytes] = []
        end = len(data)
        pos = 0
        while True:
            if self._expected is None:
                take = min(HEADER_SIZE - len(self._header), end - pos)
                self._header += data[pos : pos + take]
                pos += take
                if len(self._header) < HEADER_SIZE:
                    break
                (size,) = _HEADER.unpack(self._header)
                self._header.clear()
                if size > self.max_frame_size:
                    self._failed = FrameTooLarge(size, self.max_frame_size, _HEADER.pack(size))
                    raise self._failed
                self._expected = size
            need = self._expected - self._have
            if need and pos >= end:
                break
            take = min(need, end - pos)
            # bytes(data) is free when data is already bytes and wholly consumed.
            piece = bytes(data) if pos == 0 and take == end else bytes(data[pos : pos + take])
            pos += take
            if take < need:
                self._chunks.append(piece)
                self._have += take
                break
            if self._chunks:
                self._chunks.append(piece)
                piece = b"".join(self._chunks)
                self._chunks = []
                self._have = 0
            frames.append(piece)
            self._expected = None
            if pos >= end:
                break
        return frames
