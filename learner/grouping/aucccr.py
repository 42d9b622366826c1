"""AUCCCR, the thesis' utility-driven clustering (chapter 4), over numpy arrays.

Agents are rows of ``points`` (their projections); the caller gives the
utility ``utility(distance, size, cap)`` with ``utility(0, 1, cap) == 1``
(alone) and each agent's size cap (:mod:`learner.grouping.calibration`).
Distances are computed element-wise (no BLAS) so two machines given the same
points compute bit-identical utilities and so the same grouping.
:func:`cluster_conv` is Algorithm 8 (``atomic=True``: an agent ignores its own
effect on a group), :func:`aucccr` the driver of Algorithm 6 (k = 1, 2, ...
until ``momentum`` successive k bring no gain, best assignment kept).
``labels[a]`` is agent a's group, -1 when alone; everything is deterministic
for the points and the generator given. See docs/design/partial-models.md
("Automatic groups").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "AucccrResult",
    "UtilityFn",
    "aucccr",
    "canonical_labels",
    "cluster_conv",
    "member_utilities",
    "move_utilities",
    "pairwise_distances",
]

logger = logging.getLogger(__name__)

#: utility(distance to the barycentre, group size, the agent's size cap) -> utility,
#: element-wise on broadcastable arrays
UtilityFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]

# The proofs bound both loops; these caps only guard against a utility that breaks
# the proofs' assumptions (e.g. one returning NaN).
_MAX_OUTER = 10_000
_MAX_INNER = 10_000


def _norms(diff: np.ndarray) -> np.ndarray:
    """Euclidean norm over the last axis, element-wise (no BLAS: bit-reproducible)."""
    return np.sqrt(np.sum(diff * diff, axis=-1))


def pairwise_distances(points: np.ndarray) -> np.ndarray:
    """(m, m) Euclidean distances between rows."""
    return _norms(points[:, None, :] - points[None, :, :])


def _group_sums(points: np.ndarray, labels: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    inside = labels >= 0
    sums = np.zeros((groups, points.shape[1]), dtype=np.float64)
    np.add.at(sums, labels[inside], points[inside])  # in agent order: reproducible sums
    counts = np.bincount(labels[inside], minlength=groups).astype(np.int64)
    return sums, counts


def _caps(caps: np.ndarray | None, m: int) -> np.ndarray:
    if caps is None:
        return np.full(m, np.inf)
    caps = np.asarray(caps, dtype=np.float64)
    if caps.shape != (m,):
        raise ValueError(f"aucccr: caps must have one entry per agent ({m}), got shape {caps.shape}")
    return caps


def member_utilities(points: np.ndarray, labels: np.ndarray, utility: UtilityFn,
                     caps: np.ndarray | None = None) -> np.ndarray:
    """(m,) each agent's utility in its group as it stands (1 when alone)."""
    caps = _caps(caps, len(points))
    groups = int(labels.max()) + 1 if labels.size else 0
    sums, counts = _group_sums(points, labels, groups)
    out = np.ones(len(points), dtype=np.float64)
    inside = labels >= 0
    if inside.any():
        own = labels[inside]
        bary = sums[own] / counts[own][:, None]
        out[inside] = utility(_norms(points[inside] - bary), counts[own].astype(np.float64),
                              caps[inside])
    return out


def move_utilities(points: np.ndarray, labels: np.ndarray, utility: UtilityFn,
                   caps: np.ndarray | None = None) -> np.ndarray:
    """(m, 1 + G): column 0 is alone (1); column 1 + g the agent's utility in group g with the
    agent added to it (its current utility for its own group), all other agents staying put."""
    groups = int(labels.max()) + 1 if labels.size else 0
    sums, counts = _group_sums(points, labels, groups)
    return np.concatenate([np.ones((len(points), 1)),
                           _candidate_utilities(points, labels, sums, counts,
                                                counts.astype(np.float64), utility,
                                                _caps(caps, len(points)), atomic=False)],
                          axis=1)


def _candidate_utilities(points: np.ndarray, labels: np.ndarray, sums: np.ndarray,
                         counts: np.ndarray, sizes: np.ndarray, utility: UtilityFn,
                         caps: np.ndarray, *, atomic: bool) -> np.ndarray:
    """(m, k): agent a's utility for group i of (fixed) barycentre sums/counts and size sizes[i].

    Normal: the barycentre and size with the agent in the group; atomic: as they stand."""
    member = labels[:, None] == np.arange(len(counts))[None, :]
    if atomic:
        bary = sums / np.maximum(counts, 1)[:, None]
        dist = _norms(points[:, None, :] - bary[None, :, :])
        size = np.broadcast_to(sizes[None, :], dist.shape)
    else:
        outsider = (~member).astype(np.float64)
        joined = sums[None, :, :] + points[:, None, :] * outsider[:, :, None]
        bary = joined / (counts[None, :] + outsider)[:, :, None]
        dist = _norms(points[:, None, :] - bary)
        size = sizes[None, :] + outsider
    return np.asarray(utility(dist, size, caps[:, None]), dtype=np.float64)


def _kmeanspp_seeds(distances: np.ndarray, k: int, rng: np.random.Generator) -> list[int]:
    """k-means++ seeding: the first uniformly, the next with probability ~ squared distance."""
    m = len(distances)
    seeds = [int(rng.integers(m))]
    dmin2 = distances[seeds[0]] ** 2
    for _ in range(1, k):
        total = float(dmin2.sum())
        if total <= 0.0:
            break  # every agent sits on a seed: no further distinct seed exists
        seeds.append(int(rng.choice(m, p=dmin2 / total)))
        dmin2 = np.minimum(dmin2, distances[seeds[-1]] ** 2)
    return seeds


def canonical_labels(labels: np.ndarray) -> np.ndarray:
    """Groups of one become -1 (alone); groups are renumbered 0.. by their first agent."""
    labels = labels.copy()
    values, counts = np.unique(labels[labels >= 0], return_counts=True)
    for value, count in zip(values, counts, strict=True):
        if count < 2:
            labels[labels == value] = -1
    out = np.full_like(labels, -1)
    next_label = 0
    for a in range(len(labels)):
        if labels[a] >= 0 and out[a] < 0:
            out[labels == labels[a]] = next_label
            next_label += 1
    return out


def cluster_conv(points: np.ndarray, k: int, rng: np.random.Generator, utility: UtilityFn,
                 *, caps: np.ndarray | None = None, atomic: bool = False,
                 distances: np.ndarray | None = None) -> np.ndarray:
    """Algorithm 8 for `k` seeds: canonical labels (-1 alone). Always terminates: the inner
    loop stops once the count of agents in groups stops shrinking, the outer loop once the
    global utility stops growing (the assignment before that last step is returned)."""
    m = len(points)
    caps = _caps(caps, m)
    if distances is None:
        distances = pairwise_distances(points)
    seeds = _kmeanspp_seeds(distances, k, rng)
    labels = np.full(m, -1, dtype=np.int64)
    for g, seed in enumerate(seeds):
        labels[seed] = g
    new_labels, new_value = labels, float(m)  # k singletons: everyone's utility is 1
    for _ in range(_MAX_OUTER):
        labels, value = new_labels, new_value
        groups = int(labels.max()) + 1
        sums, counts = _group_sums(points, labels, groups)
        size = np.full(groups, float(m))
        for _ in range(_MAX_INNER):
            scores = _candidate_utilities(points, labels, sums, counts, size, utility, caps,
                                          atomic=atomic)
            # column 0 is alone (utility 1); argmax keeps the first maximum: ties stay alone
            choice = np.argmax(np.concatenate([np.ones((m, 1)), scores], axis=1), axis=1) - 1
            new_size = np.bincount(choice[choice >= 0], minlength=groups).astype(np.float64)
            if new_size.sum() >= size.sum():
                break
            size = new_size
        else:
            logger.warning("aucccr: inner loop hit its cap of %d turns", _MAX_INNER)
        new_labels = _compact(choice)
        new_value = float(member_utilities(points, new_labels, utility, caps).sum())
        if not new_value > value:
            return canonical_labels(labels)
    logger.warning("aucccr: outer loop hit its cap of %d turns", _MAX_OUTER)
    return canonical_labels(new_labels)


def _compact(choice: np.ndarray) -> np.ndarray:
    """Renumber the chosen groups 0.. dropping empty ones (-1 stays alone)."""
    out = np.full_like(choice, -1)
    used = np.unique(choice[choice >= 0])
    for new, old in enumerate(used):
        out[choice == old] = new
    return out


@dataclass(frozen=True)
class AucccrResult:
    """The driver's best assignment, its global utility, the k that found it (0: everyone
    alone was never beaten) and how many runs of :func:`cluster_conv` it made."""

    labels: np.ndarray
    value: float
    k: int
    runs: int


def aucccr(points: np.ndarray, utility: UtilityFn, rng: np.random.Generator, *,
           caps: np.ndarray | None = None, tries: int = 20, momentum: int = 5,
           atomic: bool = False, max_k: int | None = None) -> AucccrResult:
    """Algorithm 6: try k = 1, 2, ... (`tries` runs of :func:`cluster_conv` each) until
    `momentum` successive k fail to beat the previous k's best; return the best seen.

    Unlike the thesis' pseudo-code, the result is the best over all k (the pseudo-code
    can return a later, worse k after a dip). Everyone alone (value m) is the floor."""
    if tries < 1 or momentum < 1:
        raise ValueError(f"aucccr: tries and momentum must be >= 1, got {tries} and {momentum}")
    m = len(points)
    caps = _caps(caps, m)
    max_k = m if max_k is None else min(max_k, m)
    distances = pairwise_distances(points)
    best = np.full(m, -1, dtype=np.int64)
    best_value, best_k = float(m), 0
    previous = float(m)
    patience, k, runs = momentum, 1, 0
    while patience > 0 and k <= max_k:
        k_best = -np.inf
        for _ in range(tries):
            labels = cluster_conv(points, k, rng, utility, caps=caps, atomic=atomic,
                                  distances=distances)
            runs += 1
            value = float(member_utilities(points, labels, utility, caps).sum())
            k_best = max(k_best, value)
            if value > best_value:
                best, best_value, best_k = labels, value, k
        patience = momentum if k_best > previous else patience - 1
        previous = k_best
        k += 1
    return AucccrResult(best, best_value, best_k, runs)
