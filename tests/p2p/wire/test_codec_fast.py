"""The codec's generated fast paths: same bytes and same messages as the
generic per-field path, and every value they do not handle left to it."""

from __future__ import annotations

from dataclasses import dataclass

import msgpack
import numpy as np
import pytest

from gossip.compression import EncodedVector, encode
from gossip.messages import Push, PushAck
from p2p.runtime.protocol import register_node_messages
from p2p.wire import codec
from p2p.wire.codec import DecodeError, EncodeError

register_node_messages()


@dataclass(frozen=True)
class Part:
    label: str
    size: int | None


@dataclass(frozen=True, eq=False)
class Mixed:
    count: int
    ratio: float
    blob: bytes
    flag: bool
    maybe: float | None
    part: Part
    spare: Part | None
    numbers: tuple[int, ...]
    vector: np.ndarray

    def __post_init__(self) -> None:
        if self.count == 13:
            raise ValueError("13 is refused")


codec.register(Mixed, "test_fast_mixed")


def _mixed(**changes: object) -> Mixed:
    fields: dict[str, object] = dict(
        count=3, ratio=0.5, blob=b"\x00\x01", flag=True, maybe=None, part=Part("a", 4),
        spare=None, numbers=(1, 2), vector=np.arange(3, dtype="<f8"))
    fields.update(changes)
    return Mixed(**fields)  # type: ignore[arg-type]


def _generic_encode(msg: object) -> dict[str, object]:
    return codec._encode_fields(codec._CLASS_CODECS[type(msg)], msg)


def _same(a: Mixed, b: Mixed) -> bool:
    return (a.count, a.ratio, a.blob, a.flag, a.maybe, a.part, a.spare, a.numbers) == \
        (b.count, b.ratio, b.blob, b.flag, b.maybe, b.part, b.spare, b.numbers) \
        and np.array_equal(a.vector, b.vector)


@pytest.mark.parametrize("changes", [
    {},
    {"maybe": 1.5, "spare": Part("b", None)},
    {"count": np.int64(3), "ratio": 2, "blob": bytearray(b"xy")},  # converted: generic path
])
def test_fast_encode_gives_the_generic_bytes(changes: dict[str, object]) -> None:
    msg = _mixed(**changes)
    expected = _generic_encode(msg)
    expected.update(v=codec.PROTOCOL_VERSION, t="test_fast_mixed")
    assert codec.encode(msg) == msgpack.packb(expected, use_bin_type=True)
    assert b"".join(bytes(p) for p in codec.encode_parts(msg)) == codec.encode(msg)


def test_fast_encode_leaves_converted_values_to_the_generic_path() -> None:
    fast = codec._CLASS_CODECS[Mixed].fast_encode
    assert fast(_mixed()) is not None
    assert fast(_mixed(count=np.int64(3))) is None
    assert fast(_mixed(part=Part("a", np.int64(4)))) is None  # type: ignore[arg-type]  # nested
    assert fast(_mixed(numbers=("x",))) is None  # a generic field's own check


def test_fast_decode_round_trips_and_falls_back() -> None:
    for msg in (_mixed(), _mixed(maybe=0.25, spare=Part("z", 9))):
        decoded = codec.decode(codec.encode(msg))
        assert isinstance(decoded, Mixed) and _same(decoded, msg)
    fast = codec._CLASS_CODECS[Mixed].fast_decode
    wire: dict[object, object] = {}
    wire.update(_generic_encode(_mixed()))
    assert fast(dict(wire)) is not None
    assert fast({**wire, "count": True}) is None  # bool is not int
    assert fast({**wire, "ratio": 1}) is None  # an int is not a float
    assert fast({**wire, "part": {"label": "a"}}) is None  # nested keys missing
    assert fast({**wire, "extra": 1}) is None
    assert fast({**wire, "count": 13}) is None  # __post_init__ refuses


@pytest.mark.parametrize(("changes", "message"), [
    ({"count": True}, "Mixed.count: expected int, got bool"),
    ({"ratio": 1}, "Mixed.ratio: expected float, got int"),
    ({"part": {"label": "a", "size": "4"}}, "Mixed.part.size"),
    ({"count": 13}, "rejected by Mixed: 13 is refused"),
])
def test_errors_are_the_generic_paths(changes: dict[str, object], message: str) -> None:
    body = _generic_encode(_mixed())
    body.update(changes, v=codec.PROTOCOL_VERSION, t="test_fast_mixed")
    with pytest.raises(DecodeError, match=message.replace(".", r"\.")):
        codec.decode(msgpack.packb(body, use_bin_type=True))


def test_encode_errors_are_the_generic_paths() -> None:
    with pytest.raises(EncodeError, match=r"Mixed\.part\.size: expected int \| None"):
        codec.encode(_mixed(part=Part("a", "4")))  # type: ignore[arg-type]


def test_push_and_ack_take_the_fast_paths() -> None:
    push = Push(b"m" * 32, 7, encode(np.linspace(0, 1, 1 << 15), "f32"), 0.5, want_reply=True)
    ack = PushAck(b"m" * 32, 7, EncodedVector("f64", 2, np.ones(2), np.zeros(0, np.float32)))
    for msg in (push, ack):
        assert codec._CLASS_CODECS[type(msg)].fast_encode(msg) is not None
        parts = codec.encode_parts(msg)
        payload = memoryview(b"".join(bytes(p) for p in parts)).toreadonly()
        assert codec.decode(payload) == msg
    # the large array of a push is still sent by reference, not copied
    parts = codec.encode_parts(push)
    assert any(isinstance(p, memoryview) and p.nbytes == push.values.data.nbytes for p in parts)
