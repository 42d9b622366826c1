"""Length-prefixed framing: any chunking, limits checked before buffering."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    assert decoder.in_frame and decoder.buffered == 2
    assert decoder.feed(frame[6:] + frame[:2]) == [b"abcdef"]
    assert decoder.in_frame


def test_encode_frame_refuses_oversized_payload() -> None:
    with pytest.raises(FrameTooLarge):
        encode_frame(b"a" * 11, max_frame_size=10)


def test_invalid_limit_rejected() -> None:
    with pytest.raises(ValueError, match="max_frame_size"):
        FrameDecoder(0)
