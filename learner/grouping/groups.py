"""Automatic semi-local groups: the public API (issue 16).

:func:`find_groups` takes every node's projection (see :mod:`learner.grouping.projection`),
chooses the utility's distance scale and size term from the data
(:mod:`learner.grouping.calibration`) and runs AUCCCR's always-terminating
variant (:mod:`learner.grouping.aucccr`). The result is deterministic for the same
projections and seed, so every node that holds the same table computes the
same :class:`Grouping` and the same :meth:`Grouping.fingerprint`.

:func:`join_group` is a late joiner's rule: given the groups' barycentres and
sizes, the group it gains most by joining, or None.
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from learner.grouping.aucccr import aucccr
from learner.grouping.calibration import calibrate
from learner.grouping.params import GroupingError, GroupingParams

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

logger = logging.getLogger(__name__)

#: A node's identifier: its Ed25519 public key on daemons, any non-empty bytes in tests.
NodeId = bytes


@dataclass(frozen=True)
class Grouping:
    """A partition of the nodes, the parameters it was found with and the seed."""

    groups: tuple[tuple[NodeId, ...], ...]  # every node once; ids sorted in a group; groups by first id
    params: GroupingParams
    seed: int

    def fingerprint(self) -> str:
        """Hex sha256 of a canonical encoding of the groups, the parameters and the seed."""
        h = hashlib.sha256(b"aucccr-grouping/1")
        h.update(struct.pack(">q", self.seed))
        h.update(struct.pack(">dqdd", self.params.scale, self.params.size_cap,
                             self.params.size_exponent, self.params.near_distance))
        h.update(struct.pack(">I", len(self.groups)))
        for group in self.groups:
            h.update(struct.pack(">I", len(group)))
            for node in group:
                h.update(struct.pack(">I", len(node)))
                h.update(node)
        return h.hexdigest()

    def group_of(self, node: NodeId) -> tuple[NodeId, ...]:
        """The group holding `node` (a singleton is a group of one)."""
        for group in self.groups:
            if node in group:
                return group
        raise GroupingError(f"node {node.hex()[:16]} is in no group of this grouping")

    def barycentres(self, projections: Mapping[NodeId, np.ndarray]) -> dict[tuple[NodeId, ...], np.ndarray]:
        """Each group's mean projection (singletons included); GroupingError if a member's
        projection is missing or malformed."""
        return {group: _barycentre(group, projections) for group in self.groups}

    def gain(self, node: NodeId, projections: Mapping[NodeId, np.ndarray]) -> float:
        """The node's utility in its group minus its utility alone (1); 0 for a singleton."""
        group = self.group_of(node)
        if len(group) < 2:
            return 0.0
        distance = self.distance_to_barycentre(node, projections)
        return float(self.params.utility(distance, len(group), self._cap(node, projections))) - 1.0

    def _cap(self, node: NodeId, projections: Mapping[NodeId, np.ndarray]) -> float:
        ids, points = check_projections(projections)
        return float(self.params.agent_caps(points)[ids.index(node)])

    def distance_to_barycentre(self, node: NodeId, projections: Mapping[NodeId, np.ndarray]) -> float:
        """Euclidean distance from the node's projection to its group's barycentre."""
        group = self.group_of(node)
        own = _vector(node, projections)
        diff = own - _barycentre(group, projections)
        return float(np.sqrt(np.sum(diff * diff)))

    @property
    def multi_groups(self) -> tuple[tuple[NodeId, ...], ...]:
        """The groups of two or more nodes (each declares a semi-local model)."""
        return tuple(g for g in self.groups if len(g) > 1)


def _vector(node: NodeId, projections: Mapping[NodeId, np.ndarray]) -> np.ndarray:
    try:
        value = projections[node]
    except KeyError:
        raise GroupingError(f"node {node.hex()[:16]} has no projection") from None
    return np.asarray(value, dtype=np.float64)


def _barycentre(group: tuple[NodeId, ...], projections: Mapping[NodeId, np.ndarray]) -> np.ndarray:
    stacked = np.stack([_vector(node, projections) for node in group])
    return np.asarray(stacked.sum(axis=0) / len(group))


def check_projections(projections: Mapping[NodeId, np.ndarray]) -> tuple[list[NodeId], np.ndarray]:
    """The node ids sorted and their projections stacked as float64 rows, after checking them:
    GroupingError names the first problem (too few nodes, an id that is not non-empty bytes,
    a projection that is not a non-empty 1-d array, lengths that differ, NaN or infinity)."""
    if len(projections) < 2:
        raise GroupingError(f"grouping needs the projections of at least 2 nodes, got {len(projections)}")
    for node in projections:
        if not isinstance(node, bytes) or not node:
            raise GroupingError(f"node ids must be non-empty bytes, got {node!r}")
    ids = sorted(projections)
    rows: list[np.ndarray] = []
    for node in ids:
        row = np.asarray(projections[node])
        name = node.hex()[:16]
        if row.ndim != 1 or row.size == 0:
            raise GroupingError(f"node {name}: a projection must be a non-empty 1-d vector, "
                                f"got shape {row.shape}")
        if not (np.issubdtype(row.dtype, np.floating) or np.issubdtype(row.dtype, np.integer)):
            raise GroupingError(f"node {name}: a projection must hold numbers, got {row.dtype}")
        if rows and row.shape != rows[0].shape:
            raise GroupingError(f"node {name}: projection length {row.size} differs from node "
                                f"{ids[0].hex()[:16]}'s {rows[0].size}")
        row = row.astype(np.float64)
        if not np.isfinite(row).all():
            raise GroupingError(f"node {name}: projection holds NaN or infinite values")
        rows.append(row)
    return ids, np.stack(rows)


def _seed_generator(seed: int) -> np.random.Generator:
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise GroupingError(f"seed must be an int, got {seed!r}")
    # SeedSequence takes non-negative entropy; fold the sign in so any int is valid
    return np.random.default_rng(np.random.SeedSequence([abs(seed), int(seed < 0), 0xA0CC]))


def grouping_from_labels(ids: list[NodeId], labels: np.ndarray, params: GroupingParams,
                         seed: int) -> Grouping:
    """The canonical Grouping of `labels` over `ids` (-1 and groups of one: alone)."""
    members: dict[int, list[NodeId]] = {}
    groups: list[tuple[NodeId, ...]] = []
    for node, label in zip(ids, labels.tolist(), strict=True):
        if label < 0:
            groups.append((node,))
        else:
            members.setdefault(label, []).append(node)
    groups.extend(tuple(sorted(m)) for m in members.values())
    return Grouping(tuple(sorted(groups, key=lambda g: g[0])), params, seed)


def find_groups(projections: Mapping[NodeId, np.ndarray], *, seed: int,
                atomic: bool = False) -> Grouping:
    """Calibrate from the data, run AUCCCR (always-terminating variant); deterministic for
    (projections, seed). Raises GroupingError naming what is wrong: fewer than 2 nodes,
    shapes differ, NaN/inf, empty ids. `atomic`: the atomic variant of the algorithm."""
    ids, points = check_projections(projections)
    rng = _seed_generator(seed)
    calibration = calibrate(points)
    params = calibration.params
    if params.size_cap < 2:  # nothing to gain from any group: everyone alone
        labels = np.full(len(ids), -1, dtype=np.int64)
    else:
        labels = aucccr(points, params.utility, rng, caps=params.agent_caps(points),
                        atomic=atomic).labels
    grouping = grouping_from_labels(ids, labels, params, seed)
    logger.info("groups: %s; %s", [len(g) for g in grouping.groups if len(g) > 1] or "everyone alone",
                calibration.reason)
    return grouping


def join_group(projection: np.ndarray, groups: Mapping[tuple[NodeId, ...], tuple[np.ndarray, int]],
               params: GroupingParams) -> tuple[NodeId, ...] | None:
    """A late joiner's rule: the group (key) whose barycentre/size it gains most by joining,
    or None (stay alone).

    For each group (barycentre b, size s) the joiner's utility is computed as the
    algorithm does (its own weight moves the barycentre): n(d(p, (s b + p)/(s + 1))) *
    v(s + 1); it joins the best group if that beats 1 (alone). Ties go to the first key
    in sorted order, so every node computes the same answer."""
    point = np.asarray(projection, dtype=np.float64)
    if point.ndim != 1 or point.size == 0 or not np.isfinite(point).all():
        raise GroupingError(f"join_group: the projection must be a finite non-empty 1-d vector, "
                            f"got shape {point.shape}")
    best: tuple[NodeId, ...] | None = None
    best_utility = 1.0
    for key in sorted(groups):
        bary, size = groups[key]
        bary = np.asarray(bary, dtype=np.float64)
        if bary.shape != point.shape:
            raise GroupingError(f"join_group: group {[k.hex()[:8] for k in key]} has a barycentre "
                                f"of shape {bary.shape}, the projection {point.shape}")
        if not isinstance(size, (int, np.integer)) or size < 1:
            raise GroupingError(f"join_group: group {[k.hex()[:8] for k in key]} has size "
                                f"{size!r}; expected an integer >= 1")
        joined = (bary * size + point) / (size + 1)
        diff = point - joined
        utility = float(params.utility(np.sqrt(np.sum(diff * diff)), size + 1))
        if utility > best_utility:
            best, best_utility = key, utility
    return best
