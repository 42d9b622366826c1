"""How far other nodes' merges have moved this node, against how far it trained: the creep budget.

Clipping bounds what one merge moves, not where many merges lead: a liar whose
merges all pull one way walks a node any distance, one in-radius merge at a
time. Honest merges add up, with this node's own training taken back, to about
as much as its own training. :class:`DriftBudget` keeps ``S``, the decaying sum
of the movement every merge made (all senders together: identities are free),
and ``T``, the decaying sum of this node's own training steps, both decaying
with this node's own pushes; ``S`` counts as ``min ||S + l T||`` over
``0 <= l <= 1`` and may reach ``cap * ||T||`` (at least ``floor`` times the
model's norm). Only this node sets ``T``. Models of more than
:data:`SKETCH_WIDTH` values keep the sums as a private count sketch.

How it works: docs/design/trust.md ("The creep budget: a bound liars cannot move").
"""

from __future__ import annotations

import math

import numpy as np

from gossip.errors import InvalidValues

#: Buckets of the count sketch (a model of at most this many values is summed exactly).
SKETCH_WIDTH = 256

#: Bisection steps when a merge is scaled to fit the budget (2**-30 of the update).
_FIT_STEPS = 30
#: A merge may take a sum that is over the limit (honest convergence after the
#: warm-up, or a limit that shrank) this share of the limit further: the last
#: tiny steps of an honest average then still merge, while a liar needs a thousand
#: merges to gain one limit.
SLACK = 1e-3


class DriftBudget:
    """Decaying sums of merge movement ``S`` and own training ``T``; ``S`` within ``cap ||T||``."""

    def __init__(self, length: int, cap: float, halflife: float, floor: float = 0.0,
                 rng: np.random.Generator | None = None) -> None:
        if not (math.isfinite(cap) and cap > 0 and math.isfinite(halflife) and halflife > 0
                and math.isfinite(floor) and floor >= 0):
            raise InvalidValues(f"drift budget: cap {cap!r} and halflife {halflife!r} must "
                                f"be positive finite numbers, floor {floor!r} >= 0")
        self.cap = cap
        self.floor = floor
        self._rate = math.log(2.0) / halflife
        width = min(length, SKETCH_WIDTH) if length > 0 else 0
        self._sum = (np.zeros(width), 0.0)  # S and when
        self._training = (np.zeros(width), 0.0)  # T and when
        self._bucket: np.ndarray | None = None
        self._sign: np.ndarray | None = None
        if length > SKETCH_WIDTH:
            gen = rng if rng is not None else np.random.default_rng()
            self._bucket = gen.integers(0, SKETCH_WIDTH, size=length, dtype=np.uint16)
            self._sign = np.where(gen.random(length) < 0.5, -1.0, 1.0).astype(np.float32)

    def sketch(self, update: np.ndarray) -> np.ndarray:
        """``update`` as this budget sums it (itself, or its count sketch)."""
        if self._bucket is None or self._sign is None:
            return np.asarray(update, dtype=np.float64).copy()
        out: np.ndarray = np.bincount(self._bucket, weights=self._sign * update,
                                      minlength=SKETCH_WIDTH)
        return out

    def _decayed(self, entry: tuple[np.ndarray, float], now: float) -> np.ndarray:
        total, at = entry
        out: np.ndarray = total * math.exp(-self._rate * max(0.0, now - at))
        return out

    def note_training(self, sketched: np.ndarray, now: float) -> None:
        """Add one of this node's own training steps (from :meth:`sketch`) to ``T``."""
        self._training = (self._decayed(self._training, now) + sketched, now)

    def training(self, now: float) -> np.ndarray:
        """``T`` at ``now``."""
        return self._decayed(self._training, now)

    def limit(self, own_norm: float, now: float, least: float = 0.0) -> float:
        """What ``S`` may count at ``now``: ``cap ||T||``, at least ``floor * own_norm``
        and ``least`` (a newcomer's catch-up, set by the caller)."""
        return max(self.cap * float(np.linalg.norm(self.training(now))), self.floor * own_norm,
                   least)

    def _counted(self, total: np.ndarray, trained: np.ndarray) -> float:
        # min ||S + l T|| over 0 <= l <= 1: the part of S not taking back own training
        tt = float(trained @ trained)
        if tt <= 0.0:
            return float(np.linalg.norm(total))
        share = min(1.0, max(0.0, -float(total @ trained) / tt))
        return float(np.linalg.norm(total + share * trained))

    def used(self, now: float) -> float:
        """``S`` as counted at ``now``, own training taken back."""
        return self._counted(self._decayed(self._sum, now), self.training(now))

    def fit(self, sketched: np.ndarray, own_norm: float, now: float,
            least: float = 0.0) -> float:
        """The largest share ``c`` in [0, 1] of a merge's movement (``sketched``) that keeps
        the counted sum within :meth:`limit` (at least ``least``), or within :data:`SLACK`
        of the limit above what it counts already if that is more (a merge that shrinks
        the sum always fits)."""
        total, trained = self._decayed(self._sum, now), self.training(now)
        limit = self.limit(own_norm, now, least)
        bound = max(limit, self._counted(total, trained) + SLACK * limit)
        if self._counted(total + sketched, trained) <= bound:
            return 1.0
        low, high = 0.0, 1.0  # counted(c) is convex in c, within the bound at 0
        for _ in range(_FIT_STEPS):
            mid = 0.5 * (low + high)
            if self._counted(total + mid * sketched, trained) <= bound:
                low = mid
            else:
                high = mid
        return low

    def add(self, sketched: np.ndarray, now: float) -> None:
        """Add a merge's movement (from :meth:`sketch`) to ``S``."""
        self._sum = (self._decayed(self._sum, now) + sketched, now)
