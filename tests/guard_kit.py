"""What the merge-guard tests share: one model fingerprint, a guarded core, an exchange."""

from __future__ import annotations

import numpy as np

from gossip import GuardSettings, PushSum

FP = bytes(range(32))


def guarded(values: np.ndarray, seed: int) -> PushSum:
    """A push-sum core over a copy of ``values`` with the default merge guard (the creep
    budget included)."""
    return PushSum(FP, values.copy(), rng=np.random.default_rng(seed), guard=GuardSettings())


def exchange(a: PushSum, a_id: bytes, b: PushSum, b_id: bytes, now: float) -> None:
    """One push-pull exchange: ``a`` sends ``b`` a request and merges its reply."""
    [(_, request)] = a.make_pushes([b_id], now)
    a.on_ack(b_id, b.on_push(a_id, request, now), now)
