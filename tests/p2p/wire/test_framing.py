"""Length-prefixed framing: any chunking, limits checked before buffering."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2p.wire import framing
from p2p.wire.framing import FrameDecoder, FrameTooLarge, encode_frame


def test_encode_frame_prefixes_big_endian_length() -> None:
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_frame(b"") == b"\x00\x00\x00\x00"


def test_one_byte_at_a_time() -> None:
    payloads = [b"hello", b"", b"x" * 1000, bytes(range(256))]
    stream = b"".join(encode_frame(p) for p in payloads)
    decoder = FrameDecoder(max_frame_size=4096)
    out: list[bytes] = []
    for i in range(len(stream)):
        out.extend(decoder.feed(stream[i : i + 1]))
    assert out == payloads
    assert not decoder.in_frame


@given(
    payloads=st.lists(st.binary(max_size=300), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=10),
)
def test_any_chunking_gives_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(p) for p in payloads)
    points = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    decoder = FrameDecoder(max_frame_size=300)
    out: list[bytes] = []
    for start, end in zip(points, points[1:], strict=False):
        out.extend(decoder.feed(stream[start:end]))
    assert out == payloads


def test_oversized_length_refused_from_header_alone() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    # Only the header arrives: the refusal must not wait for (or buffer) the payload.
    with pytest.raises(FrameTooLarge) as info:
        decoder.feed(struct.pack(">I", 2**31))
    assert info.value.size == 2**31 and info.value.limit == 1024
    assert "2147483648" in str(info.value) and "1024" in str(info.value)
    assert decoder.buffered == 0
    with pytest.raises(FrameTooLarge):  # the stream cannot be resynchronised
        decoder.feed(b"\x00\x00\x00\x01a")


def test_oversized_frame_refused_byte_by_byte_without_buffering() -> None:
    decoder = FrameDecoder(max_frame_size=10)
    header = struct.pack(">I", 11)
    for b in header[:3]:
        assert decoder.feed(bytes([b])) == []
    with pytest.raises(FrameTooLarge):
        decoder.feed(header[3:] + b"y" * 11)
    assert decoder.buffered == 0


def test_frame_at_the_limit_is_accepted() -> None:
    decoder = FrameDecoder(max_frame_size=10)
    assert decoder.feed(encode_frame(b"z" * 10)) == [b"z" * 10]


def test_partial_frame_is_held_until_complete() -> None:
    decoder = FrameDecoder(max_frame_size=100)
    frame = encode_frame(b"abcdef")
    assert decoder.feed(frame[:6]) == []
    assert decoder.in_frame and decoder.buffered == 6  # header included
    assert decoder.feed(frame[6:] + frame[:2]) == [b"abcdef"]
    assert decoder.in_frame


def test_encode_frame_refuses_oversized_payload() -> None:
    with pytest.raises(FrameTooLarge):
        encode_frame(b"a" * 11, max_frame_size=10)


def test_invalid_limit_rejected() -> None:
    with pytest.raises(ValueError, match="max_frame_size"):
        FrameDecoder(0)


# --- receiving into the decoder's buffers (get_buffer / buffer_updated) ---------------


def _receive(decoder: FrameDecoder, data: bytes, read_size: int) -> list[bytes]:
    """Deliver ``data`` the way a socket does: at most ``read_size`` bytes per read,
    written into the view the decoder hands out."""
    out: list[bytes] = []
    pos = 0
    while pos < len(data):
        target = decoder.get_buffer(read_size)
        take = min(len(target), len(data) - pos)
        assert take > 0
        target[:take] = data[pos : pos + take]
        pos += take
        out += [bytes(p) for p in decoder.buffer_updated(take)]
    return out


@settings(max_examples=50, deadline=None)
@given(sizes=st.lists(st.integers(0, 200_000), min_size=1, max_size=4),
       read_size=st.sampled_from([997, 4096, 65536, 1 << 20]))
def test_reading_into_the_decoder_gives_the_same_frames(sizes: list[int], read_size: int) -> None:
    payloads = [bytes([i + 1]) * n for i, n in enumerate(sizes)]
    decoder = FrameDecoder(max_frame_size=200_000)
    stream = b"".join(encode_frame(p) for p in payloads)
    assert _receive(decoder, stream, read_size) == payloads
    assert not decoder.in_frame and decoder.buffered == 0


def test_large_body_is_read_straight_into_its_own_buffer() -> None:
    decoder = FrameDecoder(max_frame_size=1 << 20)
    body = bytes(range(256)) * 1024  # 256 KiB
    frame = encode_frame(body)
    first = decoder.get_buffer()
    first[:100] = frame[:100]
    assert decoder.buffer_updated(100) == []
    assert decoder.buffered == 100 and decoder.wanted == len(body) - 96
    rest = decoder.get_buffer()
    assert len(rest) == len(body) - 96  # the whole remainder, nothing of the next frame
    rest[:] = frame[100:]
    (payload,) = decoder.buffer_updated(len(rest))
    assert payload == body
    # The payload is the buffer the socket wrote into (no copy), and it is writable
    # (a sealed frame is opened in place).
    assert payload.obj is rest.obj and not payload.readonly


def test_after_a_large_frame_the_next_read_between_frames_is_small() -> None:
    # The part of a read that lands in the stage beyond the header is copied
    # into the frame's own buffer: after a large frame (the next is likely as
    # large) a read between frames asks for a few KiB, not the whole stage.
    decoder = FrameDecoder(max_frame_size=1 << 20)
    assert len(decoder.get_buffer()) == framing._STAGE_SIZE
    large = bytes(range(256)) * 800  # 200 KiB
    assert decoder.feed(encode_frame(large)) == [large]
    first = decoder.get_buffer()
    assert len(first) == framing._AFTER_LARGE_READ < framing._STAGE_SIZE
    # the next large frame: its header and head come through the stage, the
    # rest is read straight into the frame's buffer
    frame = encode_frame(large[::-1])
    first[:] = frame[: len(first)]
    assert decoder.buffer_updated(len(first)) == []
    rest = decoder.get_buffer()
    assert len(rest) == len(frame) - len(first)
    rest[:] = frame[len(first):]
    (payload,) = decoder.buffer_updated(len(rest))
    assert payload == large[::-1] and payload.obj is rest.obj
    # a small frame whole in the stage: reads between frames are full-size again
    assert decoder.feed(encode_frame(b"ack")) == [b"ack"]
    assert len(decoder.get_buffer()) == framing._STAGE_SIZE


def test_small_payloads_survive_later_reads() -> None:
    # Small frames are parsed out of a staging area that later reads reuse:
    # a payload handed out must not change when more bytes arrive.
    decoder = FrameDecoder(max_frame_size=100)
    first = decoder.feed(encode_frame(b"first") + encode_frame(b"second"))
    assert first == [b"first", b"second"]
    decoder.feed(encode_frame(b"X" * 50) + encode_frame(b"Y" * 3)[:5])
    assert first == [b"first", b"second"]
    assert decoder.feed(b"YY") == [b"YYY"]


def test_get_buffer_respects_the_limit_and_the_header() -> None:
    decoder = FrameDecoder(max_frame_size=100)
    assert len(decoder.get_buffer(3)) == 3
    assert decoder.wanted == 4
    decoder.feed(b"\x00\x00")
    assert decoder.wanted == 2
    assert len(decoder.get_buffer(decoder.wanted)) == 2


def test_oversized_header_read_into_the_decoder_is_refused_for_good() -> None:
    decoder = FrameDecoder(max_frame_size=1000)
    target = decoder.get_buffer()
    target[:4] = struct.pack(">I", 1001)
    with pytest.raises(FrameTooLarge, match="1001 bytes exceeds the maximum frame size of 1000"):
        decoder.buffer_updated(4)
    assert decoder.buffered == 0
    with pytest.raises(FrameTooLarge):
        decoder.get_buffer()
    with pytest.raises(FrameTooLarge):
        decoder.buffer_updated(0)


def test_truncated_frame_stays_incomplete() -> None:
    decoder = FrameDecoder(max_frame_size=1 << 20)
    frame = encode_frame(b"z" * 100_000)
    assert decoder.feed(frame[:-1]) == []
    assert decoder.in_frame and decoder.buffered == len(frame) - 1 and decoder.wanted == 1
    assert decoder.feed(frame[-1:]) == [b"z" * 100_000]


def test_feed_accepts_any_byte_buffer() -> None:
    decoder = FrameDecoder(max_frame_size=100)
    frame = encode_frame(b"abc")
    assert decoder.feed(bytearray(frame)) == [b"abc"]
    assert decoder.feed(memoryview(frame)) == [b"abc"]


def test_align_at_places_the_named_byte_of_a_large_body_on_a_64_byte_boundary() -> None:
    decoder = FrameDecoder(max_frame_size=1 << 20)
    asked: list[int] = []

    def align_at(size: int) -> int | None:
        asked.append(size)
        return {200_000: 13, 150_000: None, 120_000: 10**9}.get(size)

    decoder.align_at = align_at
    for size in (200_000, 150_000, 120_000):  # aligned, no preference, out of range
        body = bytes(range(256)) * (size // 256) + b"!" * (size % 256)
        frames = decoder.feed(encode_frame(body))
        assert frames == [body]
        if size == 200_000:
            address = np.frombuffer(frames[0], dtype=np.uint8).ctypes.data
            assert (address + 13) % 64 == 0
    assert asked == [200_000, 150_000, 120_000]
    assert decoder.feed(encode_frame(b"small")) == [b"small"]  # whole in the stage: not asked
    assert asked == [200_000, 150_000, 120_000]
