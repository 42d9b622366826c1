"""Wire messages of automatic grouping: signed projection records and their exchange.

A node pulls records from a sampled peer (:class:`GroupsPull` -> :class:`GroupsReply`,
anti-entropy): the request lists the node ids whose records the sender holds
and carries the sender's own record (or, while it repairs a disagreement,
every record it holds, capped); the reply carries the records the sender
lacks (capped). Both carry the grouping fingerprint the sender computed (""
before) and, once the sender applied a grouping, its groups, so that a peer
can verify it (by recomputing on the members' records) and late joiners can
join. Everything a peer sends is checked by
:class:`p2p.runtime.grouping.agreement.GroupingAgreement`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "GROUPING_MESSAGES",
    "RECORD_DOMAIN",
    "GroupsPull",
    "GroupsReply",
    "ProjectionRecord",
    "record_payload",
]

#: Domain separation of the signed bytes (a record signature is never valid as anything else).
RECORD_DOMAIN = b"p2p-gossip-learning/projection-record/v1\x00"


def record_payload(node_id: bytes, epoch: int, projection: np.ndarray) -> bytes:
    """The bytes a node signs for its record: domain, node id, epoch, float64 values."""
    values = np.ascontiguousarray(projection, dtype="<f8")
    return (RECORD_DOMAIN + struct.pack(">H", len(node_id)) + node_id
            + struct.pack(">qI", epoch, values.size) + values.tobytes())


@dataclass(frozen=True)
class ProjectionRecord:
    """One node's projection for a grouping epoch, signed by its Ed25519 identity
    (``node_id`` is the public key; ``signature`` covers :func:`record_payload`)."""

    node_id: bytes
    epoch: int
    projection: NDArray[np.float64]
    signature: bytes


@dataclass(frozen=True)
class GroupsPull:
    """A request for the records the sender lacks (``known``: ids it holds)."""

    epoch: int
    known: tuple[bytes, ...]
    records: tuple[ProjectionRecord, ...]
    fingerprint: str
    held: int
    agreed: tuple[tuple[bytes, ...], ...] = ()


@dataclass(frozen=True)
class GroupsReply:
    """The answer: records the requester lacks, and the responder's own news."""

    epoch: int
    records: tuple[ProjectionRecord, ...]
    fingerprint: str
    held: int
    agreed: tuple[tuple[bytes, ...], ...] = ()


#: The wire surface of automatic grouping, registered by :mod:`p2p.runtime.protocol`.
GROUPING_MESSAGES: tuple[tuple[type, str], ...] = (
    (GroupsPull, "groups_pull"),
    (GroupsReply, "groups_reply"),
)
