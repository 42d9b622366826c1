"""Compact encodings of pushed vectors: error bounds, limits, sizes and refusals."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import gossip
from gossip import InvalidValues
from gossip.compression import (
    ENCODINGS,
    INT8_BLOCK,
    EncodedVector,
    decode,
    encode,
    encoded_nbytes,
)

# Worst relative error of round to nearest: half a unit in the last place.
F32_REL = 2.0**-24  # ~6e-8
F16_REL = 2.0**-11  # ~4.9e-4 (normal f16 range)
BF16_REL = 2.0**-8 + 2.0**-24  # rounds float32, which rounded float64 first


def _normal(n: int, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).normal(scale=scale, size=n)


def _relative_error(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.max(np.abs(y - x) / np.abs(x)))


def _forged(encoding: str = "f32", length: int = 4, data: object = None,
            scales: object = None) -> EncodedVector:
    """An EncodedVector as a peer could send it: nothing checked on construction."""
    if data is None:
        data = np.zeros(length, dtype=np.float32)
    if scales is None:
        scales = np.zeros(0, dtype=np.float32)
    return EncodedVector(encoding, length, data, scales)  # type: ignore[arg-type]


def test_public_surface_is_reexported() -> None:
    assert gossip.ENCODINGS == ENCODINGS == ("f64", "f32", "f16", "bf16", "int8")
    assert gossip.INT8_BLOCK == INT8_BLOCK == 256
    assert gossip.encode is encode and gossip.decode is decode
    assert gossip.EncodedVector is EncodedVector and gossip.encoded_nbytes is encoded_nbytes


# --- round trips and error bounds ------------------------------------------------


def test_f64_is_exact_and_owns_its_data() -> None:
    x = _normal(1000)
    v = encode(x, "f64")
    x[0] = 99.0  # the sender's state moves on: the encoded vector must not
    assert v.data[0] != 99.0 and not v.data.flags.writeable
    y = decode(v, 1000)
    assert y.dtype == np.float64 and y.flags.writeable and y.flags.c_contiguous
    assert not np.shares_memory(y, v.data)
    x[0] = y[0]
    assert np.array_equal(y, x)


@pytest.mark.parametrize(
    ("encoding", "bound"), [("f32", F32_REL), ("f16", F16_REL), ("bf16", BF16_REL)])
def test_float_encodings_round_to_within_half_an_ulp(encoding: str, bound: float) -> None:
    # magnitudes over many binades, within the normal range of every format
    rng = np.random.default_rng(1)
    x = rng.choice([-1.0, 1.0], 20_000) * np.exp(rng.uniform(np.log(1e-3), np.log(6e4), 20_000))
    v = encode(x, encoding)
    assert v.length == x.size and v.scales.size == 0
    y = decode(v, x.size)
    error = _relative_error(x, y)
    assert error <= bound
    assert error > bound / 4  # it is a lossy format: the bound is not vacuous


def test_relative_bounds_quoted_in_the_brief() -> None:
    x = _normal(50_000, seed=2) + 3.0 * np.sign(_normal(50_000, seed=3))  # away from 0
    assert _relative_error(x, decode(encode(x, "f32"), x.size)) <= 6e-8
    assert _relative_error(x, decode(encode(x, "f16"), x.size)) <= 5e-4
    assert _relative_error(x, decode(encode(x, "bf16"), x.size)) <= 4e-3


def test_int8_error_is_at_most_half_the_block_scale() -> None:
    n = 10 * INT8_BLOCK + 17
    x = _normal(n, seed=4)
    v = encode(x, "int8")
    assert v.data.dtype == np.int8 and v.scales.dtype == np.float32
    assert v.scales.size == 11
    y = decode(v, n)
    blocks = np.arange(n) // INT8_BLOCK
    block_max = np.array([np.max(np.abs(x[blocks == b])) for b in range(11)])
    # max / 127 rounded up to float32
    assert np.all(v.scales >= block_max / 127)
    assert np.all(v.scales <= block_max / 127 * (1 + 2.0**-23))
    error = np.abs(y - x)
    scale = v.scales.astype(np.float64)[blocks]
    assert np.all(error <= scale / 2 * (1 + 1e-9))
    assert np.max(error / scale) > 0.4  # round to nearest, not a looser rule
    assert v.data.min() >= -127 and v.data.max() <= 127  # never -128 (no wrap-around)
    # the largest value of each block is carried exactly (up to the float32 scale)
    for b in range(11):
        i = np.flatnonzero(blocks == b)[np.argmax(np.abs(x[blocks == b]))]
        assert abs(v.data[i]) == 127 and abs(y[i] - x[i]) <= abs(x[i]) * 1e-7


def test_int8_error_of_a_block_is_relative_to_that_blocks_max() -> None:
    # blocks of very different magnitudes: each keeps ~2 significant digits
    parts = [_normal(INT8_BLOCK, seed=s, scale=m) for s, m in enumerate([1e-6, 1.0, 1e6, 1e-3])]
    x = np.concatenate(parts)
    y = decode(encode(x, "int8"), x.size)
    for b, part in enumerate(parts):
        block = slice(b * INT8_BLOCK, (b + 1) * INT8_BLOCK)
        assert np.max(np.abs(y[block] - part)) <= np.max(np.abs(part)) / 254 * (1 + 1e-6)


def test_int8_zero_blocks_have_zero_scale_and_decode_to_zero() -> None:
    x = np.zeros(3 * INT8_BLOCK + 5)
    x[INT8_BLOCK: 2 * INT8_BLOCK] = np.linspace(-2.0, 2.0, INT8_BLOCK)
    x[-1] = -0.0
    v = encode(x, "int8")
    assert v.scales[[0, 2, 3]].tolist() == [0.0, 0.0, 0.0]
    assert 2.0 / 127 <= v.scales[1] <= 2.0 / 127 * (1 + 2.0**-23)
    y = decode(v, x.size)
    assert np.all(y[:INT8_BLOCK] == 0) and np.all(y[2 * INT8_BLOCK:] == 0)
    assert np.max(np.abs(y - x)) <= 2.0 / 254 * (1 + 1e-6)
    assert np.all(np.isfinite(y))


@pytest.mark.parametrize("n", [0, 1, 2, INT8_BLOCK - 1, INT8_BLOCK, INT8_BLOCK + 1, 1000])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_any_length_round_trips(n: int, encoding: str) -> None:
    x = _normal(n, seed=n)
    v = encode(x, encoding)
    assert v.encoding == encoding and v.length == n and v.data.shape == (n,)
    expected_scales = -(-n // INT8_BLOCK) if encoding == "int8" else 0
    assert v.scales.shape == (expected_scales,)
    y = decode(v, n)
    assert y.shape == (n,) and y.dtype == np.float64
    if n and encoding == "int8":
        # the tail block is scaled by its own max, not a full block's
        tail = x[(n - 1) // INT8_BLOCK * INT8_BLOCK:]
        assert np.max(np.abs(y[-tail.size:] - tail)) <= np.max(np.abs(tail)) / 254 * (1 + 1e-6)
    elif n:
        bound = {"f64": 0.0, "f32": F32_REL, "f16": 1e-3, "bf16": BF16_REL}[encoding]
        # f16 is relative only in its normal range: bound small values absolutely
        assert np.all(np.abs(y - x) <= bound * np.maximum(np.abs(x), 1e-4))


def _bf16_reference(value: float) -> int:
    """Round-to-nearest-even of the float32 bits to their top 16, one value at a time."""
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    low = bits & 0xFFFF
    top = bits >> 16
    if low > 0x8000 or (low == 0x8000 and top & 1):
        top += 1
    return top


def test_bf16_is_round_to_nearest_even_of_float32() -> None:
    rng = np.random.default_rng(5)
    # random float32 bit patterns (finite, not near overflow), plus exact ties
    bits = rng.integers(0, 0x7F000000, 3000, dtype=np.uint32)
    bits[:1000] = (bits[:1000] & 0xFFFF0000) | 0x8000  # halfway cases
    bits[1000:1100] = (bits[1000:1100] & 0xFFFF0000) | 0x7FFF  # just below halfway
    signs = rng.integers(0, 2, 3000, dtype=np.uint32) << 31
    x = (bits | signs).view(np.float32).astype(np.float64)
    v = encode(x, "bf16")
    assert v.data.dtype == np.dtype("<u2")
    assert v.data.tolist() == [_bf16_reference(float(f)) for f in x]
    assert encode(np.array([1.0 + 2.0**-8]), "bf16").data[0] == 0x3F80  # tie, even below
    assert encode(np.array([1.0 + 3 * 2.0**-8]), "bf16").data[0] == 0x3F82  # tie, even above
    # decoding puts the 16 bits back on top of a float32
    assert decode(v, x.size).tolist() == [
        struct.unpack("<f", struct.pack("<I", b << 16))[0] for b in v.data.tolist()]


def test_int8_keeps_its_bound_for_tiny_blocks() -> None:
    # max/127 underflows float32 (to 0 or a subnormal): the scale is rounded up
    x = np.array([1.4e-45, -3e-44, 1e-40, 2.5e-45])
    v = encode(x, "int8")
    assert v.scales[0] > 0 and v.scales[0] >= 1e-40 / 127
    assert np.all(np.abs(decode(v, 4) - x) <= float(v.scales[0]) / 2)


def test_int8_extremes_map_to_plus_minus_127() -> None:
    # every block's extreme lands exactly on +-127, for many magnitudes and signs
    rng = np.random.default_rng(9)
    x = rng.normal(size=(400, INT8_BLOCK)) * np.exp(rng.uniform(-80, 80, size=(400, 1)))
    v = encode(x.ravel(), "int8")
    q = v.data.reshape(400, INT8_BLOCK).astype(np.int16)
    assert np.all(np.abs(q).max(axis=1) == 127) and q.min() >= -127


def test_f16_and_int8_round_ties_to_even() -> None:
    assert decode(encode(np.array([2049.0, 2051.0]), "f16"), 2).tolist() == [2048.0, 2052.0]
    x = np.array([127.0, 0.5, 1.5, 2.5, -0.5])  # scale 1: quantized values are rint(x)
    v = encode(x, "int8")
    assert v.scales.tolist() == [1.0] and v.data.tolist() == [127, 0, 2, 2, 0]


def test_int8_scale_of_a_float64_subnormal_block_is_not_zero() -> None:
    # 5e-324 / 127 underflows to 0 in float64: the scale must still be > 0
    v = encode(np.array([5e-324, 0.0]), "int8")
    assert v.scales[0] > 0 and np.all(np.abs(decode(v, 2)) <= v.scales[0] / 2)


@settings(max_examples=60, deadline=None)
@example(values=[5e-324], encoding="int8")
@given(values=st.lists(st.floats(-1e4, 1e4, allow_nan=False, width=64), max_size=600),
       encoding=st.sampled_from(ENCODINGS))
def test_round_trip_property(values: list[float], encoding: str) -> None:
    x = np.array(values, dtype=np.float64)
    v = encode(x, encoding)
    y = decode(v, x.size)
    assert y.shape == x.shape and np.all(np.isfinite(y))
    if encoding == "int8":
        blocks = np.arange(x.size) // INT8_BLOCK
        assert np.all(np.abs(y - x) <= v.scales.astype(np.float64)[blocks] / 2 * (1 + 1e-9))
        assert x.size == 0 or v.data.min() >= -127
    else:
        ulp = {"f64": 0.0, "f32": F32_REL, "f16": F16_REL, "bf16": BF16_REL}[encoding]
        smallest = {"f64": 0.0, "f32": 2.0**-149, "f16": 2.0**-25, "bf16": 2.0**-133}[encoding]
        assert np.all(np.abs(y - x) <= ulp * np.abs(x) + smallest)
    assert v.nbytes == encoded_nbytes(x.size, encoding)


# --- range limits: never an infinity -----------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "largest_ok", "refused"),
    [
        ("f16", 65519.99, 65520.0),
        ("f32", 3.4028235e38, 3.41e38),
        ("bf16", 3.396e38, 3.3963e38),
        ("int8", 4.32e40, 4.33e40),
    ],
)
def test_values_beyond_the_range_are_refused(encoding: str, largest_ok: float,
                                             refused: float) -> None:
    ok = np.array([1.0, -largest_ok])
    y = decode(encode(ok, encoding), 2)
    assert np.all(np.isfinite(y))
    bad = np.array([1.0, -refused, 2.0])
    with pytest.raises(InvalidValues, match=f"{encoding} cannot hold.*largest \\|value\\| is "
                                            f"{refused:.9g}".replace("+", r"\+")):
        encode(bad, encoding)


def test_the_limits_sit_exactly_at_rounding_to_infinity() -> None:
    # the largest float64 accepted still rounds to a finite value in each format
    for encoding in ("f16", "f32", "bf16", "int8"):
        lo, hi = 1.0, 1e300
        with pytest.raises(InvalidValues):
            encode(np.array([hi]), encoding)
        for _ in range(2000):  # bisect the float64 boundary
            mid = np.nextafter(lo, hi) if hi == np.nextafter(lo, hi) else np.sqrt(lo) * np.sqrt(hi)
            if not lo < mid < hi:
                mid = lo + (hi - lo) / 2
            if mid in (lo, hi):
                break
            try:
                encode(np.array([mid]), encoding)
                lo = mid
            except InvalidValues:
                hi = mid
        assert np.all(np.isfinite(decode(encode(np.array([lo, -lo]), encoding), 2)))
        # and the smallest refused one would round to infinity: the limit is tight
        with np.errstate(over="ignore"):
            if encoding == "f16":
                assert np.isinf(np.float16(hi))
            elif encoding == "f32":
                assert np.isinf(np.float32(hi))
            elif encoding == "bf16":
                assert _bf16_reference(float(np.float32(hi))) == 0x7F80
            else:  # the largest scale is float32's largest value
                assert lo == 127 * float(np.finfo(np.float32).max)
                assert encode(np.array([lo]), "int8").scales[0] == np.finfo(np.float32).max
    assert np.all(np.isfinite(decode(encode(np.array([1e308, -1e308]), "f64"), 2)))
    with np.errstate(over="ignore"):
        assert np.isinf(np.float16(65520.0)) and np.float16(np.nextafter(65520.0, 0)) == 65504


# --- encode refuses bad input ---------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "encoding", "reason"),
    [
        (np.zeros(3), "f8", "unknown encoding 'f8'"),
        (np.zeros(3), None, "unknown encoding None"),
        ([1.0, 2.0], "f32", "numpy array, got list"),
        (np.zeros((2, 2)), "f32", r"1-D, got shape \(2, 2\)"),
        (np.zeros(3, dtype=np.int64), "f32", "float array, got dtype int64"),
        (np.array([1.0, np.nan]), "f16", "finite; value .*nan.* at index 1"),
        (np.array([np.inf, 1.0]), "f64", "finite; value .*inf.* at index 0"),
        (np.array([1.0, -np.inf]), "int8", "finite; value .*inf.* at index 1"),
    ],
)
def test_encode_refuses_bad_input(x: object, encoding: object, reason: str) -> None:
    with pytest.raises(InvalidValues, match=reason):
        encode(x, encoding)  # type: ignore[arg-type]


def test_encode_accepts_float32_input() -> None:
    x = np.linspace(-1, 1, 9, dtype=np.float32)
    assert decode(encode(x, "f32"), 9).tolist() == x.astype(np.float64).tolist()


# --- decode refuses malformed vectors, naming what was wrong ---------------------------

_I8_SCALES = np.ones(1, dtype=np.float32)


@pytest.mark.parametrize(
    ("vector", "length", "reason"),
    [
        ("not a vector", 4, "expected an EncodedVector, got str"),
        (_forged(), -1, "expected length must be a non-negative int"),
        (_forged(), True, "expected length must be a non-negative int"),
        (_forged("f8"), 4, "unknown encoding 'f8'"),
        (_forged(b"f32"), 4, "unknown encoding b'f32'"),  # type: ignore[arg-type]
        (_forged("f32", 5), 4, "f32 vector declares length 5, expected 4"),
        (_forged("f32", 4, np.zeros(5, np.float32)), 4, "f32 data has 5 items, expected 4"),
        (_forged("f32", 4, np.zeros(3, np.float32)), 4, "f32 data has 3 items, expected 4"),
        (_forged("f64", 4, np.zeros(4, np.float32)), 4, "f64 data must have dtype <f8, got <f4"),
        (_forged("f16", 4, np.zeros(4, np.uint16)), 4, "f16 data must have dtype <f2, got <u2"),
        (_forged("bf16", 4, np.zeros(4, np.float16)), 4, "bf16 data must have dtype <u2"),
        (_forged("int8", 4, np.zeros(4, np.uint8), _I8_SCALES), 4, "int8 data must have dtype"),
        (_forged("f32", 4, np.zeros((2, 2), np.float32)), 4, r"f32 data must be 1-D"),
        (_forged("f32", 4, [0.0] * 4), 4, "f32 data must be a numpy array, got list"),
        (_forged("f32", 4, scales=np.ones(1, np.float32)), 4, "f32 scales has 1 items, expected 0"),
        (_forged("f32", 4, scales=np.zeros(0, np.float64)), 4, "f32 scales must have dtype <f4"),
        (_forged("int8", 4, np.zeros(4, np.int8), np.ones(2, np.float32)), 4,
         "int8 scales has 2 items, expected 1"),
        (_forged("int8", 300, np.zeros(300, np.int8), np.ones(1, np.float32)), 300,
         "int8 scales has 1 items, expected 2"),
        (_forged("int8", 4, np.zeros(4, np.int8), np.zeros(0, np.float32)), 4,
         "int8 scales has 0 items, expected 1"),
        (_forged("int8", 4, np.zeros(4, np.int8), np.ones(1, np.float64)), 4,
         "int8 scales must have dtype <f4, got <f8"),
        (_forged("int8", 4, np.zeros(4, np.int8), np.ones((1, 1), np.float32)), 4,
         "int8 scales must be 1-D"),
        (_forged("int8", 4, np.zeros(4, np.int8), np.array([np.nan], np.float32)), 4,
         "int8 scale .*nan.* of block 0 is not finite"),
        (_forged("int8", 300, np.zeros(300, np.int8), np.array([1, np.inf], np.float32)), 300,
         "int8 scale .*inf.* of block 1 is not finite"),
        (_forged("int8", 300, np.zeros(300, np.int8), np.array([1, -0.5], np.float32)), 300,
         "int8 scale .*-0.5.* of block 1 is negative"),
        (_forged("f64", 3, np.array([0.0, np.nan, 1.0])), 3, "f64 value .*nan.* at index 1"),
        (_forged("f32", 3, np.array([0, 0, -np.inf], np.float32)), 3,
         "f32 value .*inf.* at index 2"),
        (_forged("f16", 2, np.array([np.inf, 0], np.float16)), 2, "f16 value .*inf.* at index 0"),
        (_forged("bf16", 3, np.array([0x3F80, 0x7F80, 0], np.uint16)), 3,
         "bf16 value .*inf.* at index 1"),  # the +inf bit pattern
        (_forged("bf16", 2, np.array([0xFFC1, 0], np.uint16)), 2,
         "bf16 value .*nan.* at index 0"),  # a NaN bit pattern
    ],
)
def test_decode_refuses_malformed_vectors(vector: object, length: int, reason: str) -> None:
    before = (vector.data.copy(), vector.scales.copy()) if isinstance(vector, EncodedVector) \
        and isinstance(vector.data, np.ndarray) and isinstance(vector.scales, np.ndarray) else None
    with pytest.raises(InvalidValues, match=reason):
        decode(vector, length)  # type: ignore[arg-type]
    if before is not None:
        assert isinstance(vector, EncodedVector)
        assert np.array_equal(vector.data, before[0], equal_nan=vector.data.dtype.kind == "f")
        assert np.array_equal(vector.scales, before[1], equal_nan=True)


def test_decode_accepts_what_a_codec_hands_over() -> None:
    # read-only views of received bytes (the wire codec's arrays) decode to a fresh copy
    x = _normal(600, seed=6)
    for encoding in ENCODINGS:
        v = encode(x, encoding)
        wire = EncodedVector(encoding, 600, np.frombuffer(v.data.tobytes(), v.data.dtype),
                             np.frombuffer(v.scales.tobytes(), np.float32))
        y = decode(wire, 600)
        assert y.flags.writeable and np.array_equal(y, decode(v, 600))
        y += 1.0  # the caller may modify it


# --- sizes --------------------------------------------------------------------------------


def test_nbytes_of_each_encoding() -> None:
    n = 1_000_000
    sizes = {e: encoded_nbytes(n, e) for e in ENCODINGS}
    assert sizes == {"f64": 8 * n, "f32": 4 * n, "f16": 2 * n, "bf16": 2 * n,
                     "int8": n + 4 * -(-n // INT8_BLOCK)}
    assert 1 / 8 <= sizes["int8"] / sizes["f64"] <= 1 / 8 * 1.02
    x = _normal(n, seed=7)
    for encoding in ENCODINGS:
        assert encode(x, encoding).nbytes == sizes[encoding]
    assert encoded_nbytes(0, "int8") == 0 and encoded_nbytes(1, "int8") == 5


@pytest.mark.parametrize(("length", "encoding", "reason"), [
    (-1, "f32", "non-negative int"), (1.5, "f32", "non-negative int"),
    (True, "f32", "non-negative int"), (3, "i8", "unknown encoding"),
])
def test_encoded_nbytes_refuses_bad_arguments(length: object, encoding: str,
                                              reason: str) -> None:
    with pytest.raises(InvalidValues, match=reason):
        encoded_nbytes(length, encoding)  # type: ignore[arg-type]


def test_equality_and_repr() -> None:
    x = _normal(300, seed=8)
    a, b = encode(x, "int8"), encode(x, "int8")
    assert a == b and a is not b
    assert a != encode(x, "f32") and a != encode(x + 1.0, "int8")
    assert a != EncodedVector("int8", 300, a.data.astype(np.int16), a.scales)
    text = repr(encode(_normal(100_000), "f16"))
    assert text == ("EncodedVector(encoding='f16', length=100000, "
                    "data=<<f2 array of shape (100000,)>, scales=<<f4 array of shape (0,)>)")
