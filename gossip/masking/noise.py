"""Cryptographically secure masks for the masked exchange.

Masks are Gaussian vectors whose randomness comes from a ChaCha20 keystream
(the ``cryptography`` package) keyed with 32 bytes from ``os.urandom``.  A
numpy generator seeded once would be predictable from its own outputs; a
stream cipher is not.  For reproducible simulations and tests a key can be
given explicitly (e.g. drawn from a seeded ``numpy.random.Generator``).
"""

from __future__ import annotations

import os

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

KEY_BYTES = 32
_TWO_POW_53 = float(1 << 53)


class MaskSource:
    """Gaussian masks from a ChaCha20 keystream (Box-Muller on 53-bit uniforms)."""

    def __init__(self, key: bytes | None = None) -> None:
        if key is None:
            key = os.urandom(KEY_BYTES)
        if not isinstance(key, bytes) or len(key) != KEY_BYTES:
            raise ValueError(f"mask key must be {KEY_BYTES} bytes, got {key!r:.40}")
        nonce = bytes(16)  # fresh random key per source, so a fixed nonce is safe
        self._stream = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor()

    def _uniform(self, count: int) -> np.ndarray:
        """``count`` uniforms in (0, 1], 53 bits each."""
        raw = self._stream.update(bytes(8 * count))
        bits = np.frombuffer(raw, dtype="<u8") >> np.uint64(11)
        return (bits.astype(np.float64) + 1.0) / _TWO_POW_53

    def normal(self, size: int, std: float) -> np.ndarray:
        """A float64 vector of ``size`` independent N(0, std^2) values."""
        if size < 0 or not np.isfinite(std) or std < 0:
            raise ValueError(f"mask size must be >= 0 and std finite >= 0, got {size}, {std}")
        half = (size + 1) // 2
        u1, u2 = self._uniform(half), self._uniform(half)
        radius = np.sqrt(-2.0 * np.log(u1))
        angle = 2.0 * np.pi * u2
        out = np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])[:size]
        return out * std


def mask_source_from(rng: np.random.Generator | None) -> MaskSource:
    """A mask source keyed from ``rng`` (reproducible) or from os.urandom (if None)."""
    if rng is None:
        return MaskSource()
    return MaskSource(rng.bytes(KEY_BYTES))
