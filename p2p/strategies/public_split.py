"""A digest of the task's public split, as the schemes that exchange outputs on it use.

Two nodes compare or distil outputs on the public split only when their digests match:
the same samples in the same order (and, for a scheme that also needs the same network,
the same ``context``).
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["DIGEST_BYTES", "public_digest"]

#: Length of :func:`public_digest`.
DIGEST_BYTES = 16


def public_digest(public_x: np.ndarray, context: str = "") -> bytes:
    """A digest of ``context`` and the public inputs (shape and float32 values)."""
    x = np.ascontiguousarray(public_x, dtype="<f4")
    h = hashlib.blake2b(digest_size=DIGEST_BYTES)
    h.update(context.encode())
    h.update(repr(x.shape).encode())
    h.update(x.tobytes())
    return h.digest()
