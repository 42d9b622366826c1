"""Compact encodings of the float vectors that push-sum sends.

The push-sum state stays float64; what travels is an :class:`EncodedVector`:
``f64`` as is; ``f32``, ``f16`` rounded to nearest even; ``bf16`` the top 16
bits of the float32 value, rounded to nearest even, stored as ``<u2``; ``int8``
blockwise symmetric quantization (blocks of :data:`INT8_BLOCK` values share one
float32 scale ``max|block| / 127``, so each value errs by at most half its
block's scale). :func:`encode` refuses values the encoding cannot hold (it never
emits an infinity); :func:`decode` checks a received vector in one vectorized
pass. No error feedback here: the core merges and removes exactly the decoded
values, so the rounding residual stays in the sender's own state.

See docs/design/gossip.md and docs/guide/configuration.md (``gossip.encoding``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from gossip.errors import InvalidValues

__all__ = [
    "ENCODINGS",
    "INT8_BLOCK",
    "EncodedVector",
    "decode",
    "encode",
    "encoded_nbytes",
]

ENCODINGS: tuple[str, ...] = ("f64", "f32", "f16", "bf16", "int8")
#: Values per int8 block; each block carries one float32 scale.
INT8_BLOCK = 256

# Little-endian storage dtype of `data` for each encoding.
_DATA_DTYPES: dict[str, np.dtype] = {
    "f64": np.dtype("<f8"),
    "f32": np.dtype("<f4"),
    "f16": np.dtype("<f2"),
    "bf16": np.dtype("<u2"),
    "int8": np.dtype("i1"),
}
_SCALE_DTYPE = np.dtype("<f4")
_NO_SCALES = np.zeros(0, dtype=_SCALE_DTYPE)
_NO_SCALES.flags.writeable = False

# Smallest magnitude that would round to infinity in each float format (values
# below it round to a finite value). f16: halfway between 65504 and 2**16.
# f32: halfway between its largest value 2**128 - 2**104 and 2**128. bf16 goes
# through float32 first: a float64 below this bound rounds to at most the
# float32 just under the bf16 halfway point 2**128 - 2**119.
_F16_LIMIT = 65520.0
_F32_LIMIT = 2.0**128 - 2.0**103
_BF16_LIMIT = 2.0**128 - 2.0**119 - 2.0**103
# int8 scale = max|block| / 127, rounded up to float32, must be finite: at most
# float32's largest value 2**128 - 2**104.
_INT8_LIMIT = float(np.nextafter((2.0**128 - 2.0**104) * 127.0, np.inf))
_LIMITS: dict[str, float] = {
    "f64": float("inf"),
    "f32": _F32_LIMIT,
    "f16": _F16_LIMIT,
    "bf16": _BF16_LIMIT,
    "int8": _INT8_LIMIT,
}


@dataclass(frozen=True, eq=False)
class EncodedVector:
    """A float vector as it travels: ``encoding`` names how ``data`` holds it.

    - ``encoding``: one of :data:`ENCODINGS`;
    - ``length``: number of values;
    - ``data``: 1-D; ``<f8`` for f64, ``<f4`` f32, ``<f2`` f16, ``<u2`` bf16
      (top 16 bits of float32), ``i1`` for int8;
    - ``scales``: 1-D float32, one per block of :data:`INT8_BLOCK` values for
      int8 (``max|block| / 127`` rounded up), empty for the others.

    Construction checks nothing (a peer's vector is checked by :func:`decode`).
    Equality compares the encoding, the length and the arrays' dtypes and
    contents; hashing is by identity, like the messages that carry it.
    """

    encoding: str
    length: int
    data: np.ndarray
    scales: npt.NDArray[np.float32]

    @property
    def nbytes(self) -> int:
        """Payload bytes: ``data`` plus ``scales``."""
        return int(self.data.nbytes) + int(self.scales.nbytes)

    def __repr__(self) -> str:
        # A summary: messages holding vectors are logged, and a vector may be large.
        return (
            f"EncodedVector(encoding={self.encoding!r}, length={self.length!r}, "
            f"data={_describe(self.data)}, scales={_describe(self.scales)})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EncodedVector):
            return NotImplemented
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
                if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
                    return False
                if a.dtype != b.dtype or not np.array_equal(a, b):
                    return False
            elif a != b:
                return False
        return True

    __hash__ = object.__hash__


def _describe(a: object) -> str:
    if isinstance(a, np.ndarray):
        return f"<{a.dtype.str} array of shape {a.shape}>"
    return f"{a!r:.40}"


def encoded_nbytes(length: int, encoding: str) -> int:
    """Payload bytes of ``length`` values in ``encoding`` (data plus int8 scales)."""
    _check_encoding(encoding)
    if isinstance(length, bool) or not isinstance(length, int | np.integer) or length < 0:
        raise InvalidValues(f"length must be a non-negative int, got {length!r}")
    n = int(length)
    scales = _int8_blocks(n) * _SCALE_DTYPE.itemsize if encoding == "int8" else 0
    return n * _DATA_DTYPES[encoding].itemsize + scales


# ---------------------------------------------------------------------------
# Encoding


def encode(x: np.ndarray, encoding: str) -> EncodedVector:
    """Encode 1-D finite float vector ``x`` in ``encoding`` (round to nearest).

    The result owns its arrays (a later change of ``x`` does not show) and they
    are read-only. Raises :class:`InvalidValues` for an unknown encoding, an
    input that is not a 1-D real float array, a non-finite value, or a value too
    large for the encoding (naming the largest magnitude found).
    """
    _check_encoding(encoding)
    x = _as_float64_vector(x)
    n = int(x.shape[0])
    if encoding == "int8":
        data, scales = _encode_int8(x)  # checks the range from its block extremes
    else:
        if n:
            _check_range(x, float(x.min()), float(x.max()), encoding)
        data, scales = _encode_float(x, encoding), _NO_SCALES
    data.flags.writeable = False
    return EncodedVector(encoding, n, data, scales)


def _check_encoding(encoding: object) -> None:
    if encoding not in _DATA_DTYPES:
        raise InvalidValues(f"unknown encoding {encoding!r:.40}; expected one of {list(ENCODINGS)}")


def _as_float64_vector(x: object) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise InvalidValues(f"values must be a numpy array, got {type(x).__name__}")
    if x.ndim != 1:
        raise InvalidValues(f"values must be 1-D, got shape {x.shape}")
    if x.dtype.kind != "f":
        raise InvalidValues(f"values must be a float array, got dtype {x.dtype}")
    # float64 input (the push-sum state) is used as is: no copy before encoding.
    return x if x.dtype == np.float64 else x.astype(np.float64)


def _check_range(x: np.ndarray, lo: float, hi: float, encoding: str) -> None:
    # lo, hi: min and max of x, two reductions and no temporary; they propagate
    # NaN and show infinities.
    if not (np.isfinite(lo) and np.isfinite(hi)):
        bad = int(np.flatnonzero(~np.isfinite(x))[0])
        raise InvalidValues(f"values must be finite; value {float(x[bad])!r} at index {bad}")
    largest = max(hi, -lo)
    limit = _LIMITS[encoding]
    if largest >= limit:
        raise InvalidValues(
            f"{encoding} cannot hold values of magnitude {limit:.9g} or more (they would "
            f"round to infinity); largest |value| is {largest:.9g}"
        )


def _encode_float(x: np.ndarray, encoding: str) -> np.ndarray:
    if encoding == "f64":
        return x.astype(_DATA_DTYPES["f64"], copy=True)
    if encoding == "f32":
        return x.astype(_DATA_DTYPES["f32"])
    if encoding == "f16":
        # numpy rounds float64 to float16 directly, to nearest even.
        return x.astype(_DATA_DTYPES["f16"])
    # bf16: round the float32 bits to their top 16, to nearest even: add 0x7FFF
    # plus the lowest kept bit, then drop the low half. Finite inputs below
    # _BF16_LIMIT never carry into the infinity pattern.
    bits = x.astype(np.float32).view(np.uint32)
    carry = bits >> 16
    carry &= 1
    carry += 0x7FFF
    bits += carry
    bits >>= 16
    return bits.astype(_DATA_DTYPES["bf16"])


def _int8_blocks(n: int) -> int:
    return -(-n // INT8_BLOCK)


def _encode_int8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = int(x.shape[0])
    full = n // INT8_BLOCK
    blocks = _int8_blocks(n)
    # Per-block max |x| from block max and min (no |x| temporary); their
    # extremes are those of x, for the range check.
    highs = np.empty(blocks, dtype=np.float64)
    lows = np.empty(blocks, dtype=np.float64)
    if full:
        head = x[: full * INT8_BLOCK].reshape(full, INT8_BLOCK)
        np.max(head, axis=1, out=highs[:full])
        np.min(head, axis=1, out=lows[:full])
    if blocks > full:
        tail = x[full * INT8_BLOCK :]
        highs[full], lows[full] = tail.max(), tail.min()
    if blocks:
        _check_range(x, float(lows.min()), float(highs.max()), "int8")
    absmax = np.maximum(highs, -lows)
    exact = absmax / 127.0
    scales = exact.astype(_SCALE_DTYPE)
    # Round the scale up, never down: then |x| / scale <= 127 and the error of
    # every value is at most half its block's scale, even where float32 runs out
    # of precision (tiny blocks whose scale would round to 0 or a subnormal).
    # (absmax / 127 itself underflows to 0 for float64 subnormals)
    low = (scales < exact) | ((scales == 0) & (absmax > 0))
    if low.any():
        scales[low] = np.nextafter(scales[low], np.float32(np.inf))
    # Quantize with the float32 scale the receiver will multiply by.
    # In float64: 1 / a subnormal float32 scale overflows float32.
    wide = scales.astype(np.float64)
    inverse = np.divide(1.0, wide, out=np.zeros(blocks, dtype=np.float64), where=wide > 0)
    q = np.empty(n, dtype=np.float64)
    if full:
        np.multiply(head, inverse[:full, None], out=q[: full * INT8_BLOCK].reshape(full, INT8_BLOCK))
    if blocks > full:
        np.multiply(tail, inverse[full], out=q[full * INT8_BLOCK :])
    # No clip needed: |x| <= 127 * scale up to float64 rounding, so the product
    # is at most a few ulps above 127 and rint gives at most 127 (a 128 would
    # wrap around in the int8 cast).
    np.rint(q, out=q)
    data = q.astype(_DATA_DTYPES["int8"])
    scales.flags.writeable = False
    return data, scales


# ---------------------------------------------------------------------------
# Decoding


def decode(v: EncodedVector, length: int) -> np.ndarray:
    """Decode ``v``, expected to hold ``length`` values, to a new writeable float64 array.

    Checks, in one vectorized pass over the values: a known encoding, the
    expected length, ``data`` 1-D with the encoding's dtype and ``length``
    items, ``scales`` 1-D float32 with one scale per int8 block (none for the
    other encodings), every value and scale finite, no negative scale. Raises
    :class:`InvalidValues` naming what was wrong; ``v`` is never modified.
    """
    if not isinstance(v, EncodedVector):
        raise InvalidValues(f"expected an EncodedVector, got {type(v).__name__}")
    if isinstance(length, bool) or not isinstance(length, int | np.integer) or length < 0:
        raise InvalidValues(f"expected length must be a non-negative int, got {length!r}")
    n = int(length)
    encoding = v.encoding
    if type(encoding) is not str or encoding not in _DATA_DTYPES:
        raise InvalidValues(f"unknown encoding {encoding!r:.40}; expected one of {list(ENCODINGS)}")
    if type(v.length) is not int or v.length != n:
        raise InvalidValues(f"{encoding} vector declares length {v.length!r:.40}, expected {n}")
    data, scales = v.data, v.scales
    _check_array(data, _DATA_DTYPES[encoding], n, f"{encoding} data")
    if encoding == "int8":
        _check_array(scales, _SCALE_DTYPE, _int8_blocks(n), "int8 scales")
        _check_scales(scales)
        return _decode_int8(data, scales, n)
    _check_array(scales, _SCALE_DTYPE, 0, f"{encoding} scales")
    if not _all_finite(data, encoding):
        _refuse_non_finite(_decode_float(data, encoding), encoding)
    return _decode_float(data, encoding)


def _check_array(a: object, dtype: np.dtype, size: int, what: str) -> None:
    if not isinstance(a, np.ndarray):
        raise InvalidValues(f"{what} must be a numpy array, got {type(a).__name__}")
    # Kind and size, not byte order: a codec on a big-endian host gives native arrays.
    if a.dtype.kind != dtype.kind or a.dtype.itemsize != dtype.itemsize:
        raise InvalidValues(f"{what} must have dtype {dtype.str}, got {a.dtype.str}")
    if a.ndim != 1:
        raise InvalidValues(f"{what} must be 1-D, got shape {a.shape}")
    if a.shape[0] != size:
        raise InvalidValues(f"{what} has {a.shape[0]} items, expected {size}")


def _check_scales(scales: np.ndarray) -> None:
    if scales.size == 0:
        return
    lo, hi = float(scales.min()), float(scales.max())
    if not (np.isfinite(lo) and np.isfinite(hi)):
        bad = int(np.flatnonzero(~np.isfinite(scales))[0])
        raise InvalidValues(f"int8 scale {float(scales[bad])!r} of block {bad} is not finite")
    if lo < 0:
        bad = int(np.flatnonzero(scales < 0)[0])
        raise InvalidValues(f"int8 scale {float(scales[bad])!r} of block {bad} is negative")


def _decode_float(data: np.ndarray, encoding: str) -> np.ndarray:
    if encoding == "bf16":
        # The 16 bits are the top half of a float32.
        bits = data.astype(np.uint32)
        bits <<= 16
        return bits.view(np.float32).astype(np.float64)
    # A copy in every case (astype copies by default), so the result is writeable
    # and independent of the received buffer.
    return data.astype(np.float64)


# Exponent bits of float16 and bfloat16: all set means infinity or NaN.
_EXPONENT_BITS = {"f16": 0x7C00, "bf16": 0x7F80}


def _all_finite(data: np.ndarray, encoding: str) -> bool:
    # Checked on the compact data, before widening: fewer bytes to read, and a
    # bad vector costs no output array.
    if data.size == 0:
        return True
    mask = _EXPONENT_BITS.get(encoding)
    if mask is None:  # f64, f32
        return bool(np.isfinite(data).all())
    bits = data if data.dtype.isnative else data.astype(data.dtype.newbyteorder("="))
    return int(np.bitwise_and(bits.view(np.uint16), mask).max()) != mask


def _refuse_non_finite(out: np.ndarray, encoding: str) -> None:
    bad = int(np.flatnonzero(~np.isfinite(out))[0])
    raise InvalidValues(f"{encoding} value {float(out[bad])!r} at index {bad} is not finite")


def _decode_int8(data: np.ndarray, scales: np.ndarray, n: int) -> np.ndarray:
    out = data.astype(np.float64)
    full = n // INT8_BLOCK
    if full:
        head = out[: full * INT8_BLOCK].reshape(full, INT8_BLOCK)
        head *= scales[:full, None]
    if n > full * INT8_BLOCK:
        out[full * INT8_BLOCK :] *= scales[full]
    return out
