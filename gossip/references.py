"""References that both ends of a push-pull exchange hold (requests sent as deltas).

After a completed exchange both ends hold the request's values ``q_A`` and the
reply's delta ``d = q_B - q_A`` bit for bit, so both derive the same reference
with :func:`reference_of` (the midpoint ``q_A + d / 2`` rounded to float32),
named by the exchange's push id and who started it. Either end may later send
a request as ``encode(x - reference)``, small once the two agree, so a coarse
encoding rounds relative to the disagreement; :func:`rebuild` applies the same
operation on both ends, so both merge the same vector.
:class:`PairReferences` keeps the latest two references per peer in an LRU
bounded by count and bytes; they are not checkpointed (after a restart a delta
request is refused and the sender falls back to absolute values).

How it works: docs/design/gossip.md ("The exchange").
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

import numpy as np

#: References kept per peer: the latest exchange's and the one before.
PER_PEER = 2
#: At most this many references in all ...
MAX_REFERENCES = 4096
#: ... and at most this many bytes by default (``reference_store_bytes``).
REFERENCE_STORE_BYTES = 64 * 2**20


class ReferenceKey(NamedTuple):
    """Names one reference held for ``peer``."""

    peer: bytes
    push_id: int  # the push id of the exchange that produced it
    started_here: bool  # True if this node started that exchange


def reference_of(q_a: np.ndarray, d: np.ndarray, *, out: np.ndarray | None = None
                 ) -> np.ndarray:
    """The reference both ends derive from an exchange's request ``q_a`` and reply delta ``d``.

    ``d`` is the decoded reply (``q_B - q_A``).  Both arguments float64, with
    identical bits at both ends; so is the float32 result.  ``out``, if given,
    is a float64 scratch vector of the same length (neither ``q_a`` nor ``d``)
    that holds the intermediate midpoint.
    """
    mid = np.multiply(d, 0.5, out=out)
    mid += q_a
    ref: np.ndarray = mid.astype(np.float32)
    return ref


def rebuild(reference: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """``reference + delta`` in float64, in place in ``delta`` (which must be float64 and ours)."""
    delta += reference
    return delta


class PairReferences:
    """The references held for each peer, latest two per peer, least recently used out first."""

    def __init__(self, max_bytes: int = REFERENCE_STORE_BYTES,
                 max_count: int = MAX_REFERENCES) -> None:
        self.max_bytes = int(max_bytes)
        self.max_count = int(max_count)
        self._refs: OrderedDict[ReferenceKey, np.ndarray] = OrderedDict()  # LRU order
        self._by_peer: dict[bytes, list[ReferenceKey]] = {}  # oldest recorded first
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._refs)

    @property
    def nbytes(self) -> int:
        """Bytes held by the stored references."""
        return self._bytes

    def get(self, key: ReferenceKey) -> np.ndarray | None:
        """The reference named ``key`` (read-only float32), or None if not held."""
        ref = self._refs.get(key)
        if ref is not None:
            self._refs.move_to_end(key)
        return ref

    def latest(self, peer: bytes) -> tuple[ReferenceKey, np.ndarray] | None:
        """The most recently recorded reference held for ``peer``, if any."""
        keys = self._by_peer.get(peer)
        if not keys:
            return None
        key = keys[-1]
        ref = self._refs[key]
        self._refs.move_to_end(key)
        return key, ref

    def record(self, key: ReferenceKey, reference: np.ndarray) -> None:
        """Keep ``reference`` under ``key``: the peer's newest, dropping its oldest beyond two."""
        if reference.nbytes > self.max_bytes:
            return
        if key in self._refs:
            self._drop(key)
        reference.flags.writeable = False
        self._refs[key] = reference
        self._bytes += reference.nbytes
        keys = self._by_peer.setdefault(key.peer, [])
        keys.append(key)
        if len(keys) > PER_PEER:
            self._drop(keys[0])
        while len(self._refs) > self.max_count or self._bytes > self.max_bytes:
            self._drop(next(iter(self._refs)))

    def forget(self, peer: bytes) -> None:
        """Drop every reference held for ``peer``."""
        for key in list(self._by_peer.get(peer, ())):
            self._drop(key)

    def clear(self) -> None:
        """Drop all references."""
        self._refs.clear()
        self._by_peer.clear()
        self._bytes = 0

    def _drop(self, key: ReferenceKey) -> None:
        ref = self._refs.pop(key)
        self._bytes -= ref.nbytes
        keys = self._by_peer[key.peer]
        keys.remove(key)
        if not keys:
            del self._by_peer[key.peer]
