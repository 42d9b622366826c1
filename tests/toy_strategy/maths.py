"""The toy's maths (numpy only): a running mean."""

from __future__ import annotations

import numpy as np


def running_mean(mean: float, count: int, value: float) -> float:
    """The mean of ``count`` values ``mean`` and one more ``value``."""
    return float(np.average([mean, value], weights=[count, 1])) if count else float(value)
