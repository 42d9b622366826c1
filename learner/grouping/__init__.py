"""Automatic semi-local groups (thesis chapters 4-5): projections, AUCCCR, calibration, metrics.

:func:`find_groups` takes every node's projection (:mod:`.projection`) and
returns the partition AUCCCR (:mod:`.aucccr`) settles on, with its distance
scale and size term calibrated from the projections (:mod:`.calibration`);
:mod:`.metrics` scores a grouping against known groups. No torch here.
"""

from learner.grouping.groups import (
    Grouping,
    GroupingError,
    GroupingParams,
    NodeId,
    check_projections,
    find_groups,
    grouping_from_labels,
    join_group,
)

__all__ = [
    "Grouping",
    "GroupingError",
    "GroupingParams",
    "NodeId",
    "check_projections",
    "find_groups",
    "grouping_from_labels",
    "join_group",
]
