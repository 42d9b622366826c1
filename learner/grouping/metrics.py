"""How good a grouping is: the thesis' metrics (chapter 4, IV.1, and chapter 5, III.2).

- identification rate: of the pairs of nodes that truly share a task, the share
  put in the same group;
- differentiation rate: of the pairs that truly differ, the share put in
  different groups;
- losing share: the share of nodes with a loss, a loss being what a node would
  gain by moving on its own (leaving its group and staying alone, or joining
  another group as it stands);
- global utility: the sum of every node's utility in its group.

A rate over no pair at all (identification when every true group is a single
node, differentiation when every node shares one task) is 1.0: there was
nothing to get wrong.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

import numpy as np

from learner.grouping import Grouping, GroupingError, NodeId, check_projections
from learner.grouping.aucccr import member_utilities, move_utilities

__all__ = [
    "differentiation_rate",
    "global_utility",
    "identification_rate",
    "losing_share",
    "losses",
    "pair_rates",
]

H = TypeVar("H", bound=Hashable)

# a loss smaller than this is rounding, not a reason to move
_LOSS_TOLERANCE = 1e-9


def _labels(groups: Sequence[Sequence[H]], what: str) -> dict[H, int]:
    label: dict[H, int] = {}
    for index, group in enumerate(groups):
        for node in group:
            if node in label:
                raise GroupingError(f"{what}: node {node!r} is in two groups")
            label[node] = index
    return label


def pair_rates(found: Sequence[Sequence[H]], truth: Sequence[Sequence[H]]) -> tuple[float, float]:
    """(identification rate, differentiation rate) of `found` against `truth`.

    Both are partitions of the same nodes (a node alone may be listed as a group
    of one or left out of `found`: a node missing from `found` is alone)."""
    true_label = _labels(truth, "truth")
    found_label = _labels(found, "found")
    unknown = set(found_label) - set(true_label)
    if unknown:
        raise GroupingError(f"found groups name {len(unknown)} node(s) absent from the truth, "
                            f"e.g. {next(iter(unknown))!r}")
    nodes = list(true_label)
    same_total = same_ok = diff_total = diff_ok = 0
    for a, b in itertools.combinations(nodes, 2):
        together = (a in found_label and b in found_label and found_label[a] == found_label[b])
        if true_label[a] == true_label[b]:
            same_total += 1
            same_ok += together
        else:
            diff_total += 1
            diff_ok += not together
    identification = same_ok / same_total if same_total else 1.0
    differentiation = diff_ok / diff_total if diff_total else 1.0
    return identification, differentiation


def identification_rate(found: Sequence[Sequence[H]], truth: Sequence[Sequence[H]]) -> float:
    """Share of the truly same-task pairs that `found` puts in one group (1.0 if none)."""
    return pair_rates(found, truth)[0]


def differentiation_rate(found: Sequence[Sequence[H]], truth: Sequence[Sequence[H]]) -> float:
    """Share of the truly different-task pairs that `found` keeps apart (1.0 if none)."""
    return pair_rates(found, truth)[1]


def _points(grouping: Grouping, projections: Mapping[NodeId, np.ndarray]
            ) -> tuple[np.ndarray, np.ndarray]:
    ids, points = check_projections(projections)
    index = {node: i for i, node in enumerate(ids)}
    labels = np.full(len(ids), -1, dtype=np.int64)
    for g, group in enumerate(grouping.groups):
        for node in group:
            if node not in index:
                raise GroupingError(f"grouping names node {node.hex()[:16]} that has no projection")
            labels[index[node]] = g
    if (labels < 0).any():
        missing = ids[int(np.argmax(labels < 0))]
        raise GroupingError(f"node {missing.hex()[:16]} has a projection but is in no group")
    return points, labels


def losses(grouping: Grouping, projections: Mapping[NodeId, np.ndarray]) -> np.ndarray:
    """Each node's loss (>= 0), in the order of the sorted node ids."""
    points, labels = _points(grouping, projections)
    utility = grouping.params.utility
    caps = grouping.params.agent_caps(points)
    current = member_utilities(points, labels, utility, caps)
    best = move_utilities(points, labels, utility, caps).max(axis=1)
    return np.maximum(best - current, 0.0)


def losing_share(grouping: Grouping, projections: Mapping[NodeId, np.ndarray]) -> float:
    """Share of nodes that would gain by moving on their own (the thesis' "share of agents
    having losses")."""
    return float(np.mean(losses(grouping, projections) > _LOSS_TOLERANCE))


def global_utility(grouping: Grouping, projections: Mapping[NodeId, np.ndarray]) -> float:
    """Sum over nodes of the utility of their group (everyone alone: the number of nodes)."""
    points, labels = _points(grouping, projections)
    caps = grouping.params.agent_caps(points)
    return float(member_utilities(points, labels, grouping.params.utility, caps).sum())
