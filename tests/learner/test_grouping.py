"""Automatic groups (learner.grouping): calibration from the data, the public API, the metrics."""

from __future__ import annotations

import inspect
import subprocess
import sys

import numpy as np
import pytest

from learner.grouping import Grouping, GroupingError, GroupingParams, find_groups, join_group
from learner.grouping.calibration import calibrate
from learner.grouping.metrics import (
    differentiation_rate,
    global_utility,
    identification_rate,
    losing_share,
)


def ids(n: int) -> list[bytes]:
    return [bytes([65 + i]) for i in range(n)]


def clustered(sizes: list[int], *, spread: float = 0.05, separation: float = 3.0,
              dim: int = 12, seed: int = 0) -> tuple[dict[bytes, np.ndarray], list[list[bytes]]]:
    """Projections around centres `separation` apart, one centre per entry of `sizes`,
    with the node ids of each true group."""
    rng = np.random.default_rng(seed)
    names = ids(sum(sizes))
    centres = np.eye(len(sizes), dim) * separation / np.sqrt(2)
    projections: dict[bytes, np.ndarray] = {}
    truth: list[list[bytes]] = []
    start = 0
    for c, size in enumerate(sizes):
        group = names[start:start + size]
        start += size
        truth.append(group)
        for node in group:
            projections[node] = centres[c] + rng.normal(scale=spread, size=dim)
    return projections, truth


def as_sets(groups: object) -> set[frozenset[bytes]]:
    return {frozenset(g) for g in groups}  # type: ignore[attr-defined]


@pytest.mark.parametrize("sizes", [[2] * 6, [4, 4, 2, 1, 1], [6, 3, 3]])
def test_groups_of_any_sizes_are_found_exactly_with_one_rule(sizes: list[int]) -> None:
    # the same calibration, never told the sizes, finds pairs, 4-4-2-1-1 and 6-3-3 alike
    projections, truth = clustered(sizes, seed=len(sizes))
    grouping = find_groups(projections, seed=3)
    assert as_sets(grouping.groups) == as_sets(truth)
    assert grouping.params.size_cap == max(sizes)


def test_calibration_reads_only_the_projections() -> None:
    # nothing about the true groups can reach the calibration or the algorithm
    assert list(inspect.signature(calibrate).parameters) == ["points"]
    assert [p for p in inspect.signature(find_groups).parameters] == ["projections", "seed", "atomic"]
    # and the same points give the same parameters whichever truth they were drawn from
    projections, _ = clustered([4, 4, 2, 1, 1])
    points = np.stack([projections[k] for k in sorted(projections)])
    assert calibrate(points).params == calibrate(points.copy()).params


def test_no_structure_means_everyone_alone() -> None:
    rng = np.random.default_rng(4)
    projections = {node: rng.normal(size=30) for node in ids(12)}  # one task, noisy nodes
    grouping = find_groups(projections, seed=0)
    assert all(len(g) == 1 for g in grouping.groups)
    assert grouping.params.size_cap == 1
    assert all(grouping.gain(node, projections) == 0.0 for node in projections)


def test_grouping_is_canonical_and_deterministic() -> None:
    projections, _ = clustered([3, 3, 2, 1, 1, 2], spread=0.3, separation=2.0, seed=9)
    first = find_groups(projections, seed=11)
    again = find_groups(dict(reversed(list(projections.items()))), seed=11)
    assert first == again
    assert first.fingerprint() == again.fingerprint()
    assert first.fingerprint() != find_groups(projections, seed=12).fingerprint()  # seed is in it
    members = [node for group in first.groups for node in group]
    assert sorted(members) == sorted(projections)  # every node exactly once
    assert all(list(g) == sorted(g) for g in first.groups)
    assert [g[0] for g in first.groups] == sorted(g[0] for g in first.groups)


def test_gain_and_distance_by_hand() -> None:
    a, b, c = ids(3)
    projections = {a: np.array([0.0, 0.0]), b: np.array([2.0, 0.0]), c: np.array([9.0, 9.0])}
    grouping = Grouping(((a, b), (c,)), GroupingParams(scale=2.0, size_cap=2), seed=0)
    assert grouping.distance_to_barycentre(a, projections) == pytest.approx(1.0)
    assert grouping.gain(a, projections) == pytest.approx(np.sqrt(2) / 1.5 - 1)
    assert grouping.gain(c, projections) == 0.0
    assert grouping.barycentres(projections)[(a, b)] == pytest.approx([1.0, 0.0])
    assert grouping.group_of(c) == (c,)
    with pytest.raises(GroupingError, match="in no group"):
        grouping.group_of(b"zz")


@pytest.mark.parametrize(("projections", "message"), [
    ({b"a": np.zeros(3)}, "at least 2"),
    ({b"a": np.zeros(3), b"b": np.zeros(4)}, "differs"),
    ({b"a": np.zeros(3), b"b": np.array([0.0, np.nan, 1.0])}, "NaN"),
    ({b"": np.zeros(3), b"b": np.zeros(3)}, "non-empty bytes"),
    ({"a": np.zeros(3), b"b": np.zeros(3)}, "non-empty bytes"),
    ({b"a": np.zeros((2, 2)), b"b": np.zeros((2, 2))}, "1-d"),
])
def test_bad_projections_name_the_problem(projections: dict, message: str) -> None:
    with pytest.raises(GroupingError, match=message):
        find_groups(projections, seed=0)


def test_a_late_joiner_joins_the_group_it_resembles() -> None:
    projections, truth = clustered([4, 4, 2, 1, 1])
    grouping = find_groups(projections, seed=0)
    table = {g: (bary, len(g)) for g, bary in grouping.barycentres(projections).items()
             if len(g) > 1}
    near_first = projections[truth[0][0]] + 0.01
    assert join_group(near_first, table, grouping.params) == tuple(sorted(truth[0]))
    far_away = np.full_like(near_first, 50.0)
    assert join_group(far_away, table, grouping.params) is None
    with pytest.raises(GroupingError, match="shape"):
        join_group(near_first[:3], table, grouping.params)


def test_pair_rates_by_hand() -> None:
    truth = [["a", "b", "c"], ["d", "e"], ["f"]]
    found = [["a", "b"], ["c", "d", "e"], ["f"]]
    # same-task pairs ab ac bc de: ab, de together -> 2/4
    assert identification_rate(found, truth) == 0.5
    # different-task pairs: 3*2 + 3 + 2 = 11; together by mistake: cd, ce -> 9/11
    assert differentiation_rate(found, truth) == pytest.approx(9 / 11)
    assert identification_rate([["f"]], [["f"]]) == 1.0  # no same-task pair: nothing to miss
    with pytest.raises(GroupingError, match="two groups"):
        identification_rate([["a"], ["a"]], truth)


def test_losing_share_and_global_utility_by_hand() -> None:
    a, b, c = ids(3)
    projections = {a: np.array([0.0]), b: np.array([2.0]), c: np.array([2.2])}
    params = GroupingParams(scale=1.0, size_cap=3)
    # a and b together (each 1 from the barycentre): sqrt2 / 2 < 1, so both would rather be
    # alone; c, alone, would get sqrt3 / (1 + 1.47) < 1 by joining them: no loss
    grouping = Grouping(((a, b), (c,)), params, seed=0)
    pair = np.sqrt(2) / 2
    assert global_utility(grouping, projections) == pytest.approx(2 * pair + 1)
    joined = np.sqrt(3) / (1 + abs(2.2 - (0 + 2 + 2.2) / 3))
    assert joined < 1
    assert losing_share(grouping, projections) == pytest.approx(2 / 3)
    everyone_alone = Grouping(((a,), (b,), (c,)), params, seed=0)
    assert global_utility(everyone_alone, projections) == 3.0
    # b and c together gain; a alone would lose by joining them
    good = Grouping(((a,), (b, c)), params, seed=0)
    assert losing_share(good, projections) == 0.0


def test_the_grouping_modules_do_not_import_torch() -> None:
    code = ("import sys, learner, learner.grouping, learner.grouping.aucccr, learner.grouping.calibration, "
            "learner.grouping.metrics, learner.grouping.projection; "
            "sys.exit('torch' in sys.modules or 'sklearn' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_each_node_caps_the_size_it_values() -> None:
    # tasks about as far apart as same-task nodes are spread (as on real projections):
    # with one cap for all (4, seen in the data), the pair and the two lone nodes merge
    # into a group of 4 because the pair's members gain more size than they lose in
    # distance; with each node's own cap they stay apart
    from learner.grouping.aucccr import aucccr

    projections, truth = clustered([4, 4, 2, 1, 1], spread=0.06, separation=1.0, seed=0)
    assert as_sets(find_groups(projections, seed=0).groups) == as_sets(truth)
    points = np.stack([projections[k] for k in sorted(projections)])
    own = calibrate(points).params
    common = GroupingParams(own.scale, own.size_cap, own.size_exponent)  # near_distance inf
    labels = aucccr(points, common.utility, np.random.default_rng(0), tries=8).labels
    assert (labels[8:] == labels[8]).all() and labels[8] >= 0  # pair + lone nodes merged
