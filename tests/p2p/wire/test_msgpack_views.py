"""Zero-copy large arrays: decoding views the payload, encoding references the array.

The fast paths must give exactly what msgpack and the field-by-field walk
give, for well-formed and malformed payloads alike; only where array data
lives differs.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p2p.wire import codec, msgpack_views
from p2p.wire.codec import DecodeError
from p2p.wire.msgpack_views import LARGE_BIN, first_large_bin, unpack_with_views

BIG = np.random.default_rng(1).standard_normal(LARGE_BIN // 8 + 100)  # > 64 KiB of data


@dataclass(frozen=True, eq=False)
class Bulk:
    name: str
    values: np.ndarray
    extra: bytes


@dataclass(frozen=True, eq=False)
class Either:
    pair: tuple[np.ndarray, int] | tuple[np.ndarray, str]


codec.register(Bulk, "test_bulk")
codec.register(Either, "test_either")


def _placed(payload: bytes, offset_of_data: int, misalign: int = 0,
            readonly: bool = True) -> memoryview:
    """``payload`` copied into a buffer where its array data starts on a 64-byte
    boundary (plus ``misalign`` bytes)."""
    raw = np.empty(len(payload) + 128, dtype=np.uint8)
    pad = (-(raw.ctypes.data + offset_of_data) % 64) + misalign
    raw[pad : pad + len(payload)] = np.frombuffer(payload, dtype=np.uint8)
    view = raw[pad : pad + len(payload)].data
    return view.toreadonly() if readonly else view


def _data_offset(payload: bytes | memoryview) -> int:
    found = first_large_bin(memoryview(payload))
    assert found is not None
    return found[0]


def test_first_large_bin_finds_array_data_and_only_map_values() -> None:
    payload = codec.encode(Bulk("x", BIG, b"tail"))
    start, stop = first_large_bin(memoryview(payload))  # type: ignore[misc]
    assert stop - start == BIG.nbytes
    assert payload[start:stop] == BIG.tobytes()
    # from the first bytes alone, too (as a frame's beginning)
    assert first_large_bin(memoryview(payload)[: start + 10]) == (start, stop)
    big = b"\x01" * LARGE_BIN
    for value in (big, [big], {big: 1}, {"k": b"small"}, [1, 2, {"a": "b"}]):
        # top level, array item, map key, small bins: none is viewed
        assert first_large_bin(memoryview(msgpack.packb(value, use_bin_type=True))) is None
    assert first_large_bin(memoryview(msgpack.packb({"k": [{"deep": big}]}))) is not None


def test_a_remembered_layout_is_checked_not_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    # A payload that differs from one walked before only in scalar values takes
    # the walk's answer from its layout; one that differs in a byte the walk
    # branched on (here the bin's length) is walked again.
    first = bytearray(codec.encode(Bulk("abc", BIG, b"tail")))
    found = first_large_bin(memoryview(first))
    assert found is not None
    start, stop = found
    same_layout = bytearray(codec.encode(Bulk("xyz", BIG + 1, b"other")))

    def no_walk(data: memoryview, read: list[tuple[int, int]]) -> None:
        raise AssertionError("walked")

    with monkeypatch.context() as patch:
        patch.setattr(msgpack_views, "_walk", no_walk)
        assert first_large_bin(memoryview(same_layout)) == (start, stop)
    shorter = bytearray(first)
    shorter[start - 4 : start] = (stop - start - 8).to_bytes(4, "big")  # the bin32 length
    assert first_large_bin(memoryview(shorter)) == (start, stop - 8) == \
        msgpack_views._walk(memoryview(shorter), [])
    for cut in (b"\xc1", b"\x91"):  # the name's first byte: not a string any more
        changed = bytearray(first)
        name_at = first.index(b"\xa3abc")
        changed[name_at : name_at + 1] = cut
        assert first_large_bin(memoryview(changed)) == msgpack_views._walk(
            memoryview(changed), [])


@settings(max_examples=150, deadline=None)
@given(name=st.text(max_size=300), extra=st.binary(max_size=20), n=st.integers(0, 3))
def test_layouts_give_what_walking_gives(name: str, extra: bytes, n: int) -> None:
    payload = memoryview(codec.encode(Bulk(name, BIG[: LARGE_BIN // 8 + n], extra)))
    walked = msgpack_views._walk(payload, [])
    assert first_large_bin(payload) == walked
    assert first_large_bin(payload) == walked  # (the second from its layout)
    assert walked is not None and bytes(payload[walked[0] : walked[1]]) == \
        BIG[: LARGE_BIN // 8 + n].tobytes()


_BIN = b"\xc6\x00\x01\x00\x00"  # the header of a 64 KiB bin


@pytest.mark.parametrize("data", [
    b"\x81\xa1k\xc1" + _BIN,                       # a byte msgpack never uses
    b"\x82\xa1k\xd6\x00\x00\x00\x00\x00\xa1l" + _BIN,  # an ext value before the bin
    b"\xdd\xff\xff\xff\xff" + b"\x00" * 200,        # an array announcing 4 billion items
    b"\x81\xa1k" + _BIN[:3],                        # a bin header cut short
    b"\x81\x91\x01" + _BIN,                         # a map whose key is an array
])
def test_first_large_bin_gives_up_rather_than_guess(data: bytes) -> None:
    assert first_large_bin(memoryview(data)) is None
    # (the content of a bin may lie beyond what the walk is given: a frame's beginning)
    assert first_large_bin(memoryview(b"\x81\xa1k" + _BIN)) == (8, 8 + LARGE_BIN)


def test_arrays_view_an_immutable_aligned_payload() -> None:
    payload = codec.encode(Bulk("x", BIG, b"tail"))
    view = _placed(payload, _data_offset(payload))
    out = codec.decode(view)
    assert isinstance(out, Bulk) and np.array_equal(out.values, BIG)
    assert np.shares_memory(out.values, np.frombuffer(view, dtype=np.uint8))
    assert out.values.flags.aligned and not out.values.flags.writeable
    assert out.extra == b"tail" and type(out.extra) is bytes


def test_arrays_are_copied_from_mutable_or_misaligned_payloads() -> None:
    payload = codec.encode(Bulk("x", BIG, b"tail"))
    offset = _data_offset(payload)
    writable = _placed(payload, offset, readonly=False)  # aligned, but the caller may change it
    for buffer in (writable, bytearray(payload), _placed(payload, offset, misalign=3)):
        out = codec.decode(buffer)
        assert isinstance(out, Bulk) and np.array_equal(out.values, BIG)
        assert not np.shares_memory(out.values, np.frombuffer(buffer, dtype=np.uint8))
        assert out.values.flags.aligned and not out.values.flags.writeable


def test_a_large_bytes_field_decodes_to_bytes() -> None:
    blob = bytes(range(256)) * 300  # 76,800 bytes: most of the payload
    out = codec.decode(codec.encode(Bulk("x", np.zeros(1), blob)))
    assert isinstance(out, Bulk) and type(out.extra) is bytes and out.extra == blob


def test_unpack_with_views_matches_unpackb() -> None:
    big, second = b"\x07" * 3 * LARGE_BIN, b"\x08" * LARGE_BIN
    payload = msgpack.packb({"a": 1, "b": {"c": big, "d": [1, "x"]}, "e": second},
                            use_bin_type=True)
    out = unpack_with_views(memoryview(payload), raw=False)
    assert isinstance(out, dict)
    first = out["b"]["c"]
    assert isinstance(first, memoryview) and first.readonly and first == big
    assert type(out["e"]) is bytes  # only the first large bin is viewed; the rest is msgpack's
    assert {**out, "b": {**out["b"], "c": bytes(first)}} == msgpack.unpackb(payload, raw=False)
    # a small bin in a large payload is not worth keeping all of it alive
    mostly_other = msgpack.packb({"c": second, "d": [second] * 3}, use_bin_type=True)
    assert type(unpack_with_views(memoryview(mostly_other))["c"]) is bytes  # type: ignore[index]


@pytest.mark.parametrize("ext", [
    msgpack.ExtType(0, b"\x00\x00\x00\x00"),  # looks exactly like the placeholder
    msgpack.ExtType(5, b"xy"),
])
def test_an_ext_value_after_the_viewed_bin_is_still_refused(ext: msgpack.ExtType) -> None:
    payload = msgpack.packb({"c": b"\x07" * LARGE_BIN, "x": ext}, use_bin_type=True)
    with pytest.raises(ValueError):
        unpack_with_views(memoryview(payload))
    with pytest.raises(DecodeError, match="malformed msgpack"):
        codec.decode(payload)


def _outcome(payload: bytes | bytearray | memoryview) -> object:
    try:
        msg = codec.decode(payload)
    except DecodeError:
        return DecodeError
    assert isinstance(msg, Bulk)
    return (msg.name, msg.values.tobytes(), msg.extra)


_INTS = st.integers(-(2**63), 2**64 - 1)


@settings(max_examples=150, deadline=None)
@given(
    extra=st.dictionaries(st.text(max_size=6), _INTS | st.binary(max_size=8)
                          | st.lists(_INTS, max_size=3), max_size=3),
    cut=st.integers(min_value=0, max_value=200),
    flip=st.tuples(st.integers(min_value=0, max_value=150), st.integers(1, 255)),
    where=st.sampled_from(["none", "cut", "flip", "trail"]),
)
def test_fast_and_copying_decode_agree(extra: dict, cut: int, flip: tuple[int, int],
                                       where: str) -> None:
    fields = {"v": codec.PROTOCOL_VERSION, "t": "test_bulk", "name": "n",
              "values": {"dtype": "<f8", "n": BIG.size, "data": BIG.tobytes()},
              "extra": b"e", **extra}
    payload = bytearray(msgpack.packb(fields, use_bin_type=True))
    if where == "cut":
        del payload[_data_offset(bytes(payload)) - cut :]
    elif where == "flip" and flip[0] < len(payload):
        payload[flip[0]] ^= flip[1]
    elif where == "trail":
        payload += b"\x01"
    fast = _outcome(bytes(payload))  # immutable: arrays may view it
    assert fast == _outcome(payload)  # mutable: msgpack copies everything


def test_encode_parts_references_large_arrays_however_packed() -> None:
    msg = Bulk("x", BIG, b"tail")
    parts = codec.encode_parts(msg)
    assert b"".join(parts) == codec.encode(msg)
    assert any(isinstance(p, memoryview) and np.shares_memory(np.frombuffer(p), BIG)
               for p in parts)
    # the message's own bytes contain the marker: the field-by-field walk takes over
    clash = Bulk("x", BIG, codec._marker(0))
    parts = codec.encode_parts(clash)
    assert b"".join(parts) == codec.encode(clash)
    assert any(isinstance(p, memoryview) and np.shares_memory(np.frombuffer(p), BIG)
               for p in parts)


def test_encode_parts_forgets_arrays_of_a_union_option_that_did_not_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_walk(msg: object) -> list[bytes | memoryview]:
        raise AssertionError("the fast path should have handled this message")

    monkeypatch.setattr(codec, "_encode_parts_walking", no_walk)
    msg = Either((BIG, "second option"))  # the first option takes BIG, then fails on the str
    parts = codec.encode_parts(msg)
    assert b"".join(parts) == codec.encode(msg)
    out = codec.decode(b"".join(parts))
    assert isinstance(out, Either) and np.array_equal(out.pair[0], BIG)
    assert out.pair[1] == "second option"
