"""What a node knows about its automatic semi-local groups (read by the operator surface).

Plain frozen dataclasses, no torch, no trio: the admin command ``groups``,
``p2p groups`` and ``p2p status`` render them; the node builds one with
:meth:`p2p.runtime.grouping.host.NodeGroupingHost.status`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GROUP_PHASES", "GroupView", "GroupsStatus"]

#: The phases of automatic grouping, in the order a node goes through them.
GROUP_PHASES = ("off", "pretraining", "collecting", "agreed")


@dataclass(frozen=True)
class GroupView:
    """One group of the agreed grouping, as this node sees it.

    ``model`` is the semi-local model's name (None for a singleton, whose
    neurons stay local); ``barycentre_distance`` and ``gain`` are this node's
    (its own group only, NaN for the others).
    """

    model: str | None
    members: tuple[bytes, ...]
    barycentre_distance: float
    gain: float


@dataclass(frozen=True)
class GroupsStatus:
    """Where automatic grouping stands on this node.

    ``phase``: one of :data:`GROUP_PHASES`; ``records``: projection records
    held; ``expected``: the node count the table is checked against (None
    when unknown); ``fingerprint``: of the agreed grouping (None before);
    ``peers_agreeing``: peers seen announcing the same fingerprint;
    ``disagreements``: differing fingerprints seen (each repaired by a
    re-sync of the table); ``attempt``: the grouping attempt (0 first, one more each
    time every node was found alone and ``clustering.retries`` allowed looking again).
    """

    phase: str
    epoch: int
    records: int
    expected: int | None
    fingerprint: str | None
    groups: tuple[GroupView, ...]
    own: GroupView | None
    peers_agreeing: int
    disagreements: int
    attempt: int = 0

    @classmethod
    def off(cls) -> GroupsStatus:
        """The status of a node whose ``clustering.mode`` is "off"."""
        return cls("off", 0, 0, None, None, (), None, 0, 0)
