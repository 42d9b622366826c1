"""Choosing AUCCCR's distance scale and size term from the projections alone.

The utility is U(a, g) = v_a(#g) / (1 + d(p(a), bary(g)) / scale) with
v_a(s) = min(s, cap_a) ** 0.5. Fixed values fail on real projections (how far
two nodes of one task lie apart depends on the task, the network and the
training), so the scale and each agent's cap are read off the sorted pairwise
distances only: the best gap score (below :data:`MIN_GAP_SCORE`: no structure,
everyone alone), the best split whose near pairs form cliques (score >=
:data:`MIN_SPLIT_SCORE`), each agent's cap (1 + its near agents) and the scale
that puts a pair's break-even distance at the geometric middle of the gap,
``sqrt(near * far) / (2 (sqrt 2 - 1))``.

The steps and failure modes: docs/design/partial-models.md ("Automatic groups").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from learner.grouping.aucccr import pairwise_distances
from learner.grouping.params import GroupingError, GroupingParams

__all__ = [
    "MIN_GAP_SCORE",
    "MIN_SPLIT_SCORE",
    "SIZE_EXPONENT",
    "Calibration",
    "calibrate",
    "near_components",
]

#: The gap's score (log jump minus the order statistics' expected log jump, over the
#: latter) below which the distances show no structure.
MIN_GAP_SCORE = 1.5
#: Once a gap shows structure, the lowest score a split between near and far may have.
MIN_SPLIT_SCORE = 0.75
#: v(s) = min(s, cap) ** SIZE_EXPONENT (the thesis' square root).
SIZE_EXPONENT = 0.5


@dataclass(frozen=True)
class Calibration:
    """What :func:`calibrate` chose and why (`reason` is one line for the log and the bench)."""

    params: GroupingParams
    structured: bool
    near_below: float  # largest near distance (nan without structure)
    far_above: float  # smallest far distance (nan without structure)
    gap_score: float
    reason: str


def near_components(distances: np.ndarray, threshold: float) -> list[list[int]]:
    """Connected components of the graph linking agents closer than or at `threshold`."""
    m = len(distances)
    label = list(range(m))

    def root(a: int) -> int:
        while label[a] != a:
            label[a] = label[label[a]]
            a = label[a]
        return a

    for a in range(m):
        for b in range(a + 1, m):
            if distances[a, b] <= threshold:
                label[root(a)] = root(b)
    groups: dict[int, list[int]] = {}
    for a in range(m):
        groups.setdefault(root(a), []).append(a)
    return sorted(groups.values())


def _cliques_only(distances: np.ndarray, threshold: float) -> bool:
    """Whether every component of the near graph at `threshold` is a clique."""
    for component in near_components(distances, threshold):
        block = distances[np.ix_(component, component)]
        if (block > threshold).any():
            return False
    return True


def _gap_scores(sorted_distances: np.ndarray) -> np.ndarray:
    """Score of the split after each sorted distance (index j: j+1 distances below)."""
    d = sorted_distances
    count = d.size
    positive = d > 0
    floor = d[positive].min() if positive.any() else 1.0
    logs = np.log(np.maximum(d, floor * 1e-6))
    jumps = logs[1:] - logs[:-1]
    below = np.arange(1, count)
    above = count - below
    # a smooth density's order statistics jump by about log((j + 1) / j) near the ends
    expected = np.log1p(1.0 / np.minimum(below, above))
    return np.asarray((jumps - expected) / expected)


def calibrate(points: np.ndarray) -> Calibration:
    """The scale and size cap for `points` (rows: the nodes' projections, >= 2 rows)."""
    if points.ndim != 2 or len(points) < 2:
        raise GroupingError(f"calibration needs at least 2 projections as rows, got shape "
                            f"{points.shape}")
    distances = pairwise_distances(points)
    upper = distances[np.triu_indices(len(points), 1)]
    ordered = np.sort(upper)
    typical = float(np.median(ordered)) if ordered.max() > 0 else 1.0
    typical = typical if typical > 0 else float(ordered.max())

    def alone(score: float, why: str) -> Calibration:
        params = GroupingParams(scale=typical, size_cap=1, size_exponent=SIZE_EXPONENT)
        return Calibration(params, False, math.nan, math.nan, score, why)

    if ordered.max() <= 0:
        return alone(0.0, "every projection is the same: no structure, everyone alone")
    if ordered.size < 2:
        # two nodes: one distance, nothing to compare it with
        return alone(0.0, "two nodes: a single distance shows no structure, both alone")
    scores = _gap_scores(ordered)
    best = float(scores.max())
    if best < MIN_GAP_SCORE:
        return alone(best, f"no gap in the pairwise distances (best score {best:.2f} < "
                           f"{MIN_GAP_SCORE}): no structure, everyone alone")
    # the best split whose near pairs form groups of mutually near nodes; once the best
    # gap shows structure, a lesser gap may place the split (MIN_SPLIT_SCORE)
    candidates = [int(j) for j in np.argsort(-scores, kind="stable") if scores[j] >= MIN_SPLIT_SCORE]
    split = next((j for j in candidates if _cliques_only(distances, float(ordered[j]))), None)
    if split is None:
        return alone(best, f"the near pairs of every gap (best score {best:.2f}) chain nodes "
                           "that are not all near each other: no clear groups, everyone alone")
    score = float(scores[split])
    near, far = float(ordered[split]), float(ordered[split + 1])
    components = near_components(distances, near)
    cap = max(len(c) for c in components)
    middle = math.sqrt(max(near, far * 1e-6) * far)
    scale = middle / (2.0 * (2.0 ** SIZE_EXPONENT - 1.0))
    params = GroupingParams(scale=scale, size_cap=cap, size_exponent=SIZE_EXPONENT,
                            near_distance=near)
    return Calibration(params, True, near, far, score,
                       f"gap {near:.3g} -> {far:.3g} (x{far / max(near, 1e-300):.2f}, score "
                       f"{score:.2f}); scale {scale:.3g}, size cap {cap}")
