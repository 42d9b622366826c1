"""AUCCCR (learner.grouping.aucccr): the algorithm's properties on synthetic points."""

from __future__ import annotations

import numpy as np
import pytest

from learner.grouping import GroupingParams
from learner.grouping.aucccr import (
    aucccr,
    canonical_labels,
    cluster_conv,
    member_utilities,
    move_utilities,
    pairwise_distances,
)


def clusters(sizes: list[int], *, spread: float = 0.05, separation: float = 4.0,
             dim: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Points around centres `separation` apart (one per size), and each point's cluster."""
    rng = np.random.default_rng(seed)
    centres = np.eye(len(sizes), dim) * separation / np.sqrt(2)
    truth = np.repeat(np.arange(len(sizes)), sizes)
    points = centres[truth] + rng.normal(scale=spread, size=(truth.size, dim))
    return points, truth


def same_partition(labels: np.ndarray, truth: np.ndarray) -> bool:
    """Whether labels (-1 alone) split the points exactly as truth does (clusters of one alone)."""
    ours = canonical_labels(labels)
    theirs = canonical_labels(truth)
    return bool(np.array_equal(ours, theirs))


PARAMS = GroupingParams(scale=1.0, size_cap=4)


def test_well_separated_unequal_clusters_are_found_exactly() -> None:
    points, truth = clusters([4, 4, 2, 1, 1])
    result = aucccr(points, PARAMS.utility, np.random.default_rng(1), tries=8)
    assert same_partition(result.labels, truth)
    assert result.value > len(points)  # everyone gains over being alone


def test_the_atomic_variant_finds_them_too() -> None:
    points, truth = clusters([4, 4, 2, 1, 1], seed=3)
    result = aucccr(points, PARAMS.utility, np.random.default_rng(2), atomic=True, tries=8)
    assert same_partition(result.labels, truth)


def test_same_seed_same_result_and_every_agent_once() -> None:
    points, _ = clusters([3, 3, 3, 2, 1], spread=0.6, seed=5)  # overlapping: many choices
    first = aucccr(points, PARAMS.utility, np.random.default_rng(7), tries=8)
    second = aucccr(points, PARAMS.utility, np.random.default_rng(7), tries=8)
    assert np.array_equal(first.labels, second.labels)
    assert first.value == second.value
    assert first.labels.shape == (len(points),)  # one label per agent: in exactly one group
    for label in set(first.labels.tolist()) - {-1}:
        assert (first.labels == label).sum() >= 2  # groups of one are reported as alone


@pytest.mark.parametrize("seed", range(6))
def test_algorithm_8_terminates_on_random_points(seed: int) -> None:
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(15, 3))
    # a steep size term and a long scale: the regime where Algorithm 7 may cycle
    params = GroupingParams(scale=float(rng.uniform(0.2, 3.0)), size_cap=15, size_exponent=1.0)
    for k in range(1, 8):
        labels = cluster_conv(points, k, rng, params.utility)
        assert labels.shape == (15,)
        assert labels.min() >= -1


def test_everyone_alone_when_no_group_pays() -> None:
    points, _ = clusters([3, 3], separation=4.0, spread=1.0)
    tiny = GroupingParams(scale=1e-3, size_cap=6)
    result = aucccr(points, tiny.utility, np.random.default_rng(0))
    assert (result.labels == -1).all()
    assert result.value == len(points)


def test_utilities_by_hand() -> None:
    # two agents 2 apart: each is 1 from the barycentre; n = 1/(1+1/2), v(2) = sqrt 2
    points = np.array([[0.0, 0.0], [2.0, 0.0], [10.0, 0.0]])
    params = GroupingParams(scale=2.0, size_cap=4)
    labels = np.array([0, 0, -1])
    pair = np.sqrt(2) / 1.5
    assert member_utilities(points, labels, params.utility) == pytest.approx([pair, pair, 1.0])
    moves = move_utilities(points, labels, params.utility)
    # agent 2 joining the pair: barycentre (4, 0), 6 away; v(3) = sqrt 3
    assert moves[2] == pytest.approx([1.0, np.sqrt(3) / (1 + 6 / 2)])
    assert moves[0] == pytest.approx([1.0, pair])
    assert pairwise_distances(points)[0, 2] == 10.0
