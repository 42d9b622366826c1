"""The parameters of the grouping utility, and the error every grouping function raises.

Kept apart from :mod:`learner.grouping` so that the calibration can build them
without importing the public API module (which imports the calibration).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from learner.grouping.aucccr import pairwise_distances

__all__ = ["GroupingError", "GroupingParams"]


class GroupingError(ValueError):
    """The projections or groups given cannot be grouped (the message says what is wrong)."""


@dataclass(frozen=True)
class GroupingParams:
    """The utility calibration chose: U(a, g) = n(d / scale) * v_a(#g).

    n(x) = 1 / (1 + x) (the thesis' normalizer; `scale` is its "scale"
    hyper-parameter, inverted: a distance of `scale` halves the utility).
    v_a(s) = min(s, cap_a) ** size_exponent: the thesis' size-capped value, with
    each agent's own cap cap_a = min(size_cap, 1 + the number of other agents
    within `near_distance` of it): a group bigger than the set of agents the data
    shows as alike to a is worth no more to a (see :mod:`learner.grouping.calibration`).
    With an infinite `near_distance` every agent's cap is `size_cap` (the thesis' form).
    `size_cap` 1 means no group can pay: everyone stays alone.
    """

    scale: float
    size_cap: int
    size_exponent: float = 0.5
    near_distance: float = math.inf

    def __post_init__(self) -> None:
        if not (self.scale > 0 and math.isfinite(self.scale)):
            raise GroupingError(f"GroupingParams.scale must be a finite number > 0, got {self.scale}")
        if self.size_cap < 1:
            raise GroupingError(f"GroupingParams.size_cap must be >= 1, got {self.size_cap}")
        if not self.size_exponent > 0:
            raise GroupingError(f"GroupingParams.size_exponent must be > 0, got {self.size_exponent}")
        if not self.near_distance >= 0:
            raise GroupingError(f"GroupingParams.near_distance must be >= 0, got {self.near_distance}")

    def normalizer(self, distance: float | np.ndarray) -> np.ndarray:
        """n(d): 1 at distance 0, decreasing, 1/2 at distance `scale`."""
        return 1.0 / (1.0 + np.asarray(distance, dtype=np.float64) / self.scale)

    def value(self, size: float | np.ndarray, cap: float | np.ndarray | None = None) -> np.ndarray:
        """v(s): 1 for a singleton, increasing up to the cap (`size_cap`, or the agent's own
        `cap` when given, whichever is smaller), flat after."""
        limit = np.minimum(float(self.size_cap), np.inf if cap is None else np.asarray(cap))
        capped = np.minimum(np.asarray(size, dtype=np.float64), limit)
        return np.power(capped, self.size_exponent)

    def utility(self, distance: float | np.ndarray, size: float | np.ndarray,
                cap: float | np.ndarray | None = None) -> np.ndarray:
        """U = n(d) * v(s) (with the agent's own `cap` if given)."""
        return self.normalizer(distance) * self.value(size, cap)

    def agent_caps(self, points: np.ndarray) -> np.ndarray:
        """(m,) each row's own size cap (see the class)."""
        m = len(points)
        if not math.isfinite(self.near_distance):
            return np.full(m, float(self.size_cap))
        near = (pairwise_distances(points) <= self.near_distance).sum(axis=1)  # self included
        return np.minimum(near, self.size_cap).astype(np.float64)
