"""Differential-privacy settings of DP-SGD as a validated value object (no torch).

The node's config (``[dp]``) and the synchronous reference build one; the
trainer (:mod:`learner.dp.sgd`) runs DP-SGD with it and the accountant
(:mod:`learner.dp.accounting`) turns its noise into an epsilon.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from learner.errors import FieldError

__all__ = ["DEFAULT_CLIP_NORM", "DEFAULT_DELTA", "DPConfig", "DPConfigError"]

#: delta of the (epsilon, delta) guarantee when none is given: well below 1 / (samples
#: of a shard) for shards of up to ~10,000 samples, as it should be.
DEFAULT_DELTA = 1e-5
#: largest L2 norm a sample's gradient may keep.
DEFAULT_CLIP_NORM = 1.0


class DPConfigError(FieldError):
    """A differential-privacy setting is out of range; the message names the field."""

    prefix = "dp"


def _positive(value: float, name: str) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise DPConfigError(f"expected a finite number > 0, got {value}", field=name)


@dataclass(frozen=True)
class DPConfig:
    """DP-SGD settings.

    clip_norm: each sample's gradient (over all trainable parameters) is
    scaled down to at most this L2 norm. noise_multiplier: the Gaussian noise
    added to the sum of clipped gradients has standard deviation
    ``noise_multiplier * clip_norm`` (0 clips without noise: epsilon is then
    infinite). delta: the delta at which epsilon is reported. epsilon_budget:
    the epsilon a trainer may spend; it refuses steps past it (None: no cap,
    the epsilon spent is reported).
    """

    clip_norm: float = DEFAULT_CLIP_NORM
    noise_multiplier: float = 1.0
    delta: float = DEFAULT_DELTA
    epsilon_budget: float | None = None

    def __post_init__(self) -> None:
        _positive(self.clip_norm, "clip_norm")
        if not (self.noise_multiplier >= 0 and math.isfinite(self.noise_multiplier)):
            raise DPConfigError(f"expected a finite number >= 0, got {self.noise_multiplier}",
                                field="noise_multiplier")
        if not 0.0 < self.delta < 1.0:
            raise DPConfigError(f"expected a number in (0, 1), got {self.delta}", field="delta")
        if self.epsilon_budget is not None:
            _positive(self.epsilon_budget, "epsilon_budget")

    @property
    def noise_std(self) -> float:
        """Standard deviation of the noise added to the sum of clipped gradients."""
        return self.noise_multiplier * self.clip_norm
