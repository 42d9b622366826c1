"""How far one sender has pushed this node, as a vector: the creep budget.

Clipping bounds what one merge moves, not where many merges lead.  A liar
whose requests all land just inside the radius along one direction ``u``
(:class:`lab.sim.adversaries.Creeper`) is merged unclipped at no cost, and walks a
node ``k`` radii in ``~2k`` requests.  Honest updates do not add up like
that: a sender's ``y - x`` points wherever the two models happen to differ,
and each merge shrinks that difference, so the sum of the updates one sender
applied grows like the square root of their number, while a creeper's grows
linearly.  :class:`DriftBudget` keeps, per key, the sum of the (clipped)
updates merged, decaying with ``halflife``, and refuses a merge that would
take its norm over ``cap`` radii.  Keys are partners (peers this node chose
itself, see :class:`gossip.merge_guard.ClipRadius`) one each, and every other
sender shares one key: identities are free, so per identity a budget would
multiply with them.

Merges may undo this node's own training for free.  When nodes train on
different data, each node's training keeps moving it off the consensus and
its merges keep pulling it back: honest updates share that one component and
their sum grows linearly, like a creep's (64 simulated nodes: the strangers'
shared sum pointed against the node's own recent training, cosine -0.72, and
went over 4 radii for 6 % of honest pushes).  So the budget also keeps ``T``,
the decaying sum of this node's own training steps (:meth:`DriftBudget.note_training`,
in radii, decaying as the sums do), and a sum ``S`` counts as
``min ||S + l T||`` over ``0 <= l <= 1``: a key's merges may take back up to
all of that training, and only the rest counts.  What that gives a creeper: up to
``||T||`` more, only in the one direction against this node's own training,
which the training itself keeps pushing back.  Training comes from the node
itself, so no sender sets it.

For models of more than :data:`SKETCH_WIDTH` values the sums are kept as a
count sketch of that width (each value added, with a random sign, into one of
``SKETCH_WIDTH`` buckets): its squared norm is an unbiased estimate of the
sum's (relative spread ``sqrt(2 / width)``, 9 %).  The buckets and signs are
drawn per core from its RNG and never leave it: a sender that knew them could
creep along a direction the sketch does not see.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from gossip.errors import InvalidValues

#: Buckets of the count sketch (a model of at most this many values is summed exactly).
SKETCH_WIDTH = 256

#: Keys remembered (least recently used out first; an evicted partner starts again at 0).
DRIFT_KEYS = 4096

#: The key all non-partner senders share.
STRANGERS = b""


class DriftBudget:
    """Decaying per-key sums of merged updates, capped at ``cap`` radii."""

    def __init__(self, length: int, cap: float, halflife: float,
                 rng: np.random.Generator | None = None) -> None:
        if not (math.isfinite(cap) and cap > 0 and math.isfinite(halflife) and halflife > 0):
            raise InvalidValues(f"drift budget: cap {cap!r} and halflife {halflife!r} must "
                                "be positive finite numbers")
        self.cap = cap
        self._rate = math.log(2.0) / halflife
        self._sums: OrderedDict[bytes, tuple[np.ndarray, float]] = OrderedDict()
        self._training: tuple[np.ndarray, float] | None = None  # T and when
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

    def _value(self, key: bytes, now: float) -> np.ndarray | None:
        entry = self._sums.get(key)
        if entry is None:
            return None
        total, at = entry
        return total * math.exp(-self._rate * max(0.0, now - at))

    def note_training(self, sketched: np.ndarray, now: float) -> None:
        """Add one of this node's own training steps (from :meth:`sketch`, in radii) to
        ``T``, the training its merges may take back for free."""
        if self._training is None:
            self._training = (sketched.copy(), now)
            return
        total, at = self._training
        self._training = (total * math.exp(-self._rate * max(0.0, now - at)) + sketched, now)

    def training(self, now: float) -> np.ndarray | None:
        """``T`` at ``now`` (None before the first training step)."""
        if self._training is None:
            return None
        total, at = self._training
        out: np.ndarray = total * math.exp(-self._rate * max(0.0, now - at))
        return out

    def _counted(self, total: np.ndarray, now: float) -> float:
        # min ||S + l T|| over 0 <= l <= 1: the part of S not taking back own training
        trained = self.training(now)
        if trained is None:
            return float(np.linalg.norm(total))
        tt = float(trained @ trained)
        if tt <= 0.0:
            return float(np.linalg.norm(total))
        share = min(1.0, max(0.0, -float(total @ trained) / tt))
        return float(np.linalg.norm(total + share * trained))

    def used(self, key: bytes, now: float) -> float:
        """The norm of ``key``'s sum at ``now``, less own training taken back."""
        total = self._value(key, now)
        return 0.0 if total is None else self._counted(total, now)

    def after(self, key: bytes, sketched: np.ndarray, now: float) -> float:
        """The norm ``key``'s sum would have with ``sketched`` (from :meth:`sketch`) added,
        less own training taken back."""
        total = self._value(key, now)
        return self._counted(sketched if total is None else total + sketched, now)

    def add(self, key: bytes, sketched: np.ndarray, now: float) -> None:
        """Add a merged update (from :meth:`sketch`) to ``key``'s sum."""
        total = self._value(key, now)
        self._sums.pop(key, None)
        self._sums[key] = (sketched if total is None else total + sketched, now)
        if len(self._sums) > DRIFT_KEYS:
            self._sums.popitem(last=False)
