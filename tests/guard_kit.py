"""What the merge-guard attack tests share: one model fingerprint and a guarded core."""

from __future__ import annotations

import numpy as np

from gossip import GuardSettings, PushSum

FP = bytes(range(32))
#: The creep budget measured against the creep (off by default: see GuardSettings.drift_cap).
DRIFT_CAP = 4.0


def guarded(values: np.ndarray, seed: int) -> PushSum:
    """A push-sum core over a copy of ``values`` with the default merge guard and the
    creep budget on."""
    return PushSum(FP, values.copy(), rng=np.random.default_rng(seed),
                   guard=GuardSettings(drift_cap=DRIFT_CAP))
