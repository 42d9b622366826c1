"""What the merge-guard attack tests share: one model fingerprint and a guarded core."""

from __future__ import annotations

import numpy as np

from gossip import GuardSettings, PushSum

FP = bytes(range(32))


def guarded(values: np.ndarray, seed: int) -> PushSum:
    """A push-sum core over a copy of ``values`` with the default merge guard (the creep
    budget included)."""
    return PushSum(FP, values.copy(), rng=np.random.default_rng(seed), guard=GuardSettings())
