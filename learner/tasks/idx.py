"""Reader (and a small writer) for IDX files, the format of MNIST, EMNIST and FEMNIST dumps.

An IDX file is: two zero bytes, one type byte, one byte giving the number of
dimensions, then one big-endian uint32 per dimension, then the values in
big-endian order. Files may be gzip-compressed (detected from the content,
not the name).
"""

from __future__ import annotations

import gzip
import logging
import struct
from pathlib import Path

import numpy as np

from learner.data_errors import DataError

__all__ = ["read_idx", "write_idx"]

logger = logging.getLogger(__name__)

# IDX type byte -> big-endian numpy dtype.
_TYPE_CODES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_GZIP_MAGIC = b"\x1f\x8b"
_EXPECTED = "an IDX file (00 00 <type> <ndim>, big-endian uint32 sizes, data), optionally gzipped"


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read IDX file ({exc.strerror or exc})") from exc
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise DataError(f"{path}: corrupt gzip data ({exc}); expected {_EXPECTED}") from exc
    return raw


def read_idx(path: str | Path) -> np.ndarray:
    """Read one IDX file into a native-endian numpy array of its stored shape.

    Raises DataError naming the file when the header is malformed, the type
    byte is unknown or the data length does not match the declared shape.
    """
    path = Path(path)
    raw = _read_bytes(path)
    if len(raw) < 4:
        raise DataError(f"{path}: file too short ({len(raw)} bytes); expected {_EXPECTED}")
    zero0, zero1, type_code, ndim = raw[0], raw[1], raw[2], raw[3]
    if zero0 != 0 or zero1 != 0:
        raise DataError(f"{path}: bad magic {raw[:4].hex()}; expected {_EXPECTED}")
    if type_code not in _TYPE_CODES:
        known = ", ".join(f"0x{code:02X}" for code in _TYPE_CODES)
        raise DataError(f"{path}: unknown IDX type byte 0x{type_code:02X}; expected one of {known}")
    if ndim == 0:
        raise DataError(f"{path}: IDX header declares 0 dimensions; expected at least 1")
    header_end = 4 + 4 * ndim
    if len(raw) < header_end:
        raise DataError(f"{path}: truncated header ({ndim} dimensions declared)")
    shape = struct.unpack(f">{ndim}I", raw[4:header_end])
    dtype = _TYPE_CODES[type_code]
    expected_bytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    actual_bytes = len(raw) - header_end
    if actual_bytes != expected_bytes:
        raise DataError(
            f"{path}: data has {actual_bytes} bytes but shape {tuple(shape)} of "
            f"{dtype.name} needs {expected_bytes}"
        )
    values = np.frombuffer(raw, dtype=dtype, offset=header_end).reshape(shape)
    logger.debug("read IDX %s: shape %s dtype %s", path, shape, dtype)
    return values.astype(dtype.newbyteorder("="))


def write_idx(path: str | Path, array: np.ndarray, *, compress: bool = False) -> None:
    """Write `array` as an IDX file (gzip-compressed if `compress`); used by tests and tools."""
    array = np.asarray(array)
    for code, dtype in _TYPE_CODES.items():
        if dtype.newbyteorder("=") == array.dtype.newbyteorder("="):
            type_code = code
            break
    else:
        raise DataError(f"write_idx: dtype {array.dtype} has no IDX type code")
    if array.ndim == 0 or array.ndim > 255:
        raise DataError(f"write_idx: array must have 1..255 dimensions, got {array.ndim}")
    header = bytes([0, 0, type_code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    payload = header + array.astype(_TYPE_CODES[type_code]).tobytes()
    if compress:
        payload = gzip.compress(payload)
    Path(path).write_bytes(payload)
