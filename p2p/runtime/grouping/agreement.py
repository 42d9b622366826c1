"""Agreeing on automatic semi-local groups without a server (sans-IO).

:class:`GroupingAgreement` holds one grouping epoch's table of signed
projection records and spreads it by anti-entropy pulls
(:meth:`~GroupingAgreement.make_pull`, :meth:`~GroupingAgreement.on_pull`,
:meth:`~GroupingAgreement.on_reply`). A complete table gives a candidate
grouping, seeded by :func:`grouping_seed`; it is applied once a peer announces
the same fingerprint, and a node that has not applied one adopts a peer's
applied grouping only if the members' records reproduce it (a late joiner
joins the best group for its projection). Retries carry their attempt in the
record epoch (:func:`attempt_epoch`). Peers may lie: bad records and unbacked
"I hold more" claims are dropped and counted, and everything is capped.

How it works: docs/design/partial-models.md ("Automatic groups", "At run time").
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from gossip.log_limit import LogLimiter
from p2p.runtime.grouping.messages import (
    GroupsPull,
    GroupsReply,
    ProjectionRecord,
    record_payload,
)
from p2p.wire.identity import verify_signature

__all__ = [
    "RECORDS_PER_MESSAGE",
    "AgreementCounters",
    "AppliedGroups",
    "GroupingAgreement",
    "GroupingLike",
    "attempt_epoch",
    "grouping_seed",
    "model_name",
]

logger = logging.getLogger(__name__)

#: Records one message carries at most (a pull while repairing, a reply).
RECORDS_PER_MESSAGE = 64
#: Longest projection accepted (values); a digits projection has 100.
MAX_PROJECTION_LENGTH = 1 << 16


class GroupingLike(Protocol):
    """What the agreement needs of :class:`learner.grouping.Grouping`."""

    @property
    def groups(self) -> tuple[tuple[bytes, ...], ...]: ...
    @property
    def params(self) -> object: ...
    def fingerprint(self) -> str: ...


#: ``find(projections, seed=...)``: :func:`learner.grouping.find_groups` or a test's stand-in.
FindGroups = Callable[..., GroupingLike]
#: ``join(projection, {group: (barycentre, size)}, params)``: :func:`learner.grouping.join_group`.
JoinGroup = Callable[..., tuple[bytes, ...] | None]


#: Attempts are bound into the high half of the 64-bit record epoch (epochs are < 2**31).
ATTEMPT_SHIFT = 32


def attempt_epoch(epoch: int, attempt: int) -> int:
    """The record epoch of grouping ``epoch``, attempt ``attempt``: what records sign and
    messages carry, so records of two attempts never mix (attempt 0: ``epoch`` itself)."""
    if not 0 <= epoch < 1 << 31 or not 0 <= attempt < 1 << 30:
        raise ValueError(f"attempt_epoch: epoch {epoch} or attempt {attempt} out of range")
    return (attempt << ATTEMPT_SHIFT) | epoch


def grouping_seed(swarm: bytes, epoch: int) -> int:
    """The grouping's seed: the same on every node holding the global model ``swarm``
    (its fingerprint) in grouping ``epoch``; a non-negative 63-bit integer."""
    digest = hashlib.sha256(b"p2p-groups/seed\x00" + swarm + struct.pack(">q", epoch)).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def model_name(epoch: int, members: tuple[bytes, ...]) -> str:
    """The semi-local model of a group: ``auto<epoch>-<8 hex digits of its members>``."""
    h = hashlib.sha256(b"p2p-groups/model\x00")
    for node in sorted(members):
        h.update(struct.pack(">H", len(node)) + node)
    return f"auto{epoch}-{h.hexdigest()[:8]}"


@dataclass
class AgreementCounters:
    """What the agreement dropped or saw go wrong (shown by the operator surface)."""

    bad_signature: int = 0
    bad_shape: int = 0
    not_finite: int = 0
    other_epoch: int = 0
    other_attempt: int = 0
    over_capacity: int = 0
    disagreements: int = 0
    rejected_groupings: int = 0
    grouping_errors: int = 0

    @property
    def dropped(self) -> int:
        """Records dropped for any reason."""
        return (self.bad_signature + self.bad_shape + self.not_finite + self.other_epoch
                + self.other_attempt + self.over_capacity)


@dataclass(frozen=True)
class AppliedGroups:
    """The grouping a node applies: the agreed grouping, this node's group in it
    (for a late joiner, the group it joined, itself not counted) and the
    semi-local model's name (None when the node stays alone)."""

    grouping: GroupingLike
    group: tuple[bytes, ...]
    joined: bool = False
    model: str | None = field(default=None)


class GroupingAgreement:
    """One node's side of the agreement on one grouping epoch and attempt (no clock,
    no sockets).

    ``own_id``: this node's id; ``attempt``: the attempt (0 first; records and
    messages carry :func:`attempt_epoch`, model names the plain ``epoch``); ``length``: how many values every projection
    has (this node's own); ``seed``: :func:`grouping_seed`; ``find`` and
    ``join``: the deterministic grouping and the late joiner's rule;
    ``verify``: the signature check (Ed25519 by default).
    """

    def __init__(self, own_id: bytes, epoch: int, length: int, *, seed: int,
                 find: FindGroups, join: JoinGroup, expected: int = 0,
                 quiet_period: float = 5.0, max_records: int = 1024, attempt: int = 0,
                 verify: Callable[[bytes, bytes, bytes], bool] = verify_signature) -> None:
        if not 0 < length <= MAX_PROJECTION_LENGTH:
            raise ValueError(f"length: expected 1..{MAX_PROJECTION_LENGTH}, got {length}")
        if max_records < 2:
            raise ValueError(f"max_records: expected >= 2, got {max_records}")
        self.own_id = bytes(own_id)
        self.epoch = int(epoch)
        self.attempt = int(attempt)
        #: the epoch field of this attempt's records and messages
        self.record_epoch = attempt_epoch(self.epoch, self.attempt)
        self.length = int(length)
        self.seed = int(seed)
        self.expected = int(expected)
        self.quiet_period = float(quiet_period)
        self.max_records = int(max_records)
        self._find = find
        self._join = join
        self._verify = verify
        self.counters = AgreementCounters()
        self.records: dict[bytes, ProjectionRecord] = {}
        self._projections: dict[bytes, np.ndarray] = {}
        self._changed_at: float | None = None  # when the last new record arrived
        self._peer_fingerprints: dict[bytes, str] = {}
        self._claims: dict[bytes, int] = {}  # peer -> records it said it holds, above ours
        self._candidate: GroupingLike | None = None
        self._candidate_key: frozenset[bytes] | None = None
        self._confirmed = False  # a peer announced the candidate's fingerprint
        self.applied: AppliedGroups | None = None
        self._resync: bytes | None = None  # the peer to pull from next (disagreement)
        self._pending: tuple[tuple[bytes, ...], ...] | None = None  # a peer's applied groups
        self._pending_fp = ""
        self._pending_from = b""  # the peer that announced them
        # Lines a peer's announcements cause: at most two per peer and interval.
        self._peer_lines = LogLimiter(logger)
        self._rejected: set[tuple[str, frozenset[bytes]]] = set()  # announced, not reproduced

    # ------------------------------------------------------------------ state

    @property
    def own_record(self) -> ProjectionRecord | None:
        """This node's record, once it has one."""
        return self.records.get(self.own_id)

    @property
    def projections(self) -> Mapping[bytes, np.ndarray]:
        """Node id -> projection, every valid record held."""
        return self._projections

    @property
    def fingerprint(self) -> str:
        """The applied grouping's fingerprint, else the candidate's, else ""."""
        if self.applied is not None:
            return self.applied.grouping.fingerprint()
        return "" if self._candidate is None else self._candidate.fingerprint()

    @property
    def phase(self) -> str:
        """"collecting" until a grouping is applied, then "agreed"."""
        return "agreed" if self.applied is not None else "collecting"

    @property
    def peers_agreeing(self) -> int:
        """Peers whose last announced fingerprint equals this node's."""
        fp = self.fingerprint
        return sum(1 for f in self._peer_fingerprints.values() if fp and f == fp)

    @property
    def resync_peer(self) -> bytes | None:
        """The peer whose table this node should pull (and send its own) next, if any."""
        return self._resync

    def set_own(self, record: ProjectionRecord, now: float) -> None:
        """This node's own record (signed by the caller); checked like any other."""
        if record.node_id != self.own_id:
            raise ValueError("own record: node id is not this node's")
        if not self._accept(record, now):
            raise ValueError("own record: rejected (wrong epoch, length, signature or "
                             "non-finite values)")

    def restore(self, records: list[ProjectionRecord], applied: AppliedGroups | None,
                now: float) -> None:
        """Resume from a checkpoint: the records held and the grouping applied."""
        for record in records:
            self._accept(record, now)
        self.applied = applied

    # ------------------------------------------------------------------ messages

    def make_pull(self) -> GroupsPull:
        """The next request: ids held, own record (all records while repairing)."""
        if self._resync is not None:
            sent = self._sample_records(exclude=frozenset())
        else:
            own = self.own_record
            sent = () if own is None else (own,)
        return GroupsPull(self.record_epoch, tuple(self.records), sent, self.fingerprint,
                          len(self.records), self._agreed_groups())

    def on_pull(self, peer: bytes, msg: GroupsPull, now: float) -> GroupsReply:
        """Answer a peer's pull: take its records and news, send what it lacks."""
        self._take(peer, msg.epoch, msg.records, msg.fingerprint, msg.held, msg.agreed, now)
        known = (frozenset(msg.known[:self.max_records]) if msg.epoch == self.record_epoch
                 else frozenset())
        return GroupsReply(self.record_epoch, self._sample_records(exclude=known), self.fingerprint,
                           len(self.records), self._agreed_groups())

    def on_reply(self, peer: bytes, msg: GroupsReply, now: float) -> None:
        """Take a pulled peer's records and news."""
        if self._resync == peer:
            self._resync = None
        self._claims.pop(peer, None)
        self._take(peer, msg.epoch, msg.records, msg.fingerprint, msg.held, msg.agreed, now)
        if len(msg.records) < RECORDS_PER_MESSAGE:
            # it sent every record this node lacked: a larger claim is not backed
            self._claims.pop(peer, None)

    def on_unreachable(self, peer: bytes) -> None:
        """A pull to ``peer`` failed: stop pulling from it first and drop its claim.

        A re-sync peer is pulled before any sampled one; one that cannot be
        reached (gone, or pulled this node before this node ever sampled
        where it listens) would otherwise take every pull and, with its claim
        standing, keep the table from completing. The next pulls go to sampled
        peers; the peer is pulled first again if it shows up again.
        """
        if self._resync == peer:
            self._resync = None
        self._claims.pop(peer, None)

    # ------------------------------------------------------------------ deciding

    def complete(self, now: float) -> bool:
        """Whether the table is complete (see the module docstring)."""
        n = len(self.records)
        return (self.own_id in self.records and n >= 2
                and (not self.expected or n >= self.expected)
                and all(held <= n for held in self._claims.values())
                and self._changed_at is not None
                and now - self._changed_at >= self.quiet_period)

    def step(self, now: float) -> AppliedGroups | None:
        """Advance: adopt a verified peer grouping, or compute and apply a confirmed
        candidate. Returns the grouping to apply, once (None otherwise)."""
        if self.applied is not None or self.own_record is None:
            return None
        if self._pending is not None:
            adopted = self._adopt(self._pending, self._pending_fp, now)
            if adopted is not None:
                return adopted
        if not self.complete(now):
            return None
        key = frozenset(self.records)
        if key != self._candidate_key:
            self._candidate_key = key
            self._confirmed = False
            try:
                self._candidate = self._find(dict(self._projections), seed=self.seed)
            except Exception as exc:  # a bug in the algorithm must not stop the node
                self.counters.grouping_errors += 1
                self._candidate = None
                # once per table: the same table gives the same error
                logger.error("grouping epoch %d: cannot group %d records: %s: %s",
                             self.epoch, len(key), type(exc).__name__, exc)
                return None
            fp = self.fingerprint
            self._confirmed = any(f == fp for f in self._peer_fingerprints.values())
        if self._candidate is None or not self._confirmed:
            return None
        self.applied = self._applied(self._candidate, self._candidate.groups)
        return self.applied

    def _applied(self, grouping: GroupingLike, groups: tuple[tuple[bytes, ...], ...]
                 ) -> AppliedGroups:
        for group in groups:
            if self.own_id in group:
                name = model_name(self.epoch, group) if len(group) >= 2 else None
                return AppliedGroups(grouping, tuple(group), False, name)
        raise ValueError("internal error: this node is in no group")  # pragma: no cover

    def _adopt(self, groups: tuple[tuple[bytes, ...], ...], fp: str,
               now: float) -> AppliedGroups | None:
        """A peer's applied grouping, if the records held reproduce its fingerprint."""
        members = [m for g in groups for m in g]
        missing = [m for m in members if m not in self._projections]
        if missing:
            return None  # pulled from that peer next (see _take)
        self._pending = None
        key = (fp, frozenset(members))
        if key in self._rejected:
            return None  # verified once already: recomputing would give the same answer
        try:
            grouping: GroupingLike | None = self._find(
                {m: self._projections[m] for m in members}, seed=self.seed)
        except Exception as exc:  # a bug in the algorithm must not stop the node
            grouping = None
            logger.error("grouping epoch %d: a peer's groups cannot be recomputed: %s: %s",
                         self.epoch, type(exc).__name__, exc)
        if grouping is None or grouping.fingerprint() != fp:
            self.counters.rejected_groupings += 1
            self._rejected.add(key)
            if len(self._rejected) > self.max_records:
                self._rejected.pop()
            self._peer_lines.log(now, self._pending_from.hex(), logging.WARNING,
                                 "grouping epoch %d: peer %s announced groups %s that its "
                                 "members' records do not reproduce; ignored", self.epoch,
                                 self._pending_from[:4].hex(), fp[:12])
            return None
        if self.own_id in members:
            self.applied = self._applied(grouping, grouping.groups)
            return self.applied
        choices = {tuple(g): (np.mean([self._projections[m] for m in g], axis=0), len(g))
                   for g in grouping.groups if len(g) >= 2}
        chosen = self._join(self._projections[self.own_id], choices, grouping.params) \
            if choices else None
        if chosen is None:
            self.applied = AppliedGroups(grouping, (self.own_id,), True, None)
        else:
            self.applied = AppliedGroups(grouping, tuple(chosen), True,
                                         model_name(self.epoch, tuple(chosen)))
        return self.applied

    # ------------------------------------------------------------------ intake

    def _take(self, peer: bytes, epoch: int, records: tuple[ProjectionRecord, ...],
              fingerprint: str, held: int, agreed: tuple[tuple[bytes, ...], ...],
              now: float) -> None:
        if epoch != self.record_epoch:
            self._count_other(epoch, len(records))
            return
        for record in records[:RECORDS_PER_MESSAGE]:
            self._accept(record, now)
        if len(records) > RECORDS_PER_MESSAGE:
            self.counters.over_capacity += len(records) - RECORDS_PER_MESSAGE
        if len(self.records) < held <= self.max_records:
            self._resync = peer  # it holds records this node lacks: pull from it next
            self._claims[peer] = held
            while len(self._claims) > self.max_records:
                self._claims.pop(next(iter(self._claims)))
        self._note_fingerprint(peer, fingerprint[:64], now)
        if agreed and self.applied is None and fingerprint:
            members = sum(len(g) for g in agreed)
            if members <= self.max_records:
                self._pending, self._pending_fp, self._pending_from = agreed, fingerprint, peer
                if any(m not in self._projections for g in agreed for m in g):
                    self._resync = peer

    def _note_fingerprint(self, peer: bytes, fingerprint: str, now: float) -> None:
        if not fingerprint:
            return
        before = self._peer_fingerprints.pop(peer, None)
        self._peer_fingerprints[peer] = fingerprint
        while len(self._peer_fingerprints) > self.max_records:
            self._peer_fingerprints.pop(next(iter(self._peer_fingerprints)))
        own = self.fingerprint
        if own and fingerprint == own:
            self._confirmed = True
        elif own and fingerprint != before:
            self.counters.disagreements += 1
            self._resync = peer
            # rate-limited per peer: one alternating its fingerprint would get a line a pull
            self._peer_lines.log(now, peer.hex(), logging.INFO,
                                 "grouping epoch %d: peer %s announces %s, this node %s; "
                                 "re-syncing tables", self.epoch, peer[:4].hex(),
                                 fingerprint[:12], own[:12])

    def _accept(self, record: object, now: float) -> bool:
        """Check and keep one record; False (and counted) when dropped."""
        if not isinstance(record, ProjectionRecord):
            self.counters.bad_shape += 1
            return False
        if record.epoch != self.record_epoch:
            self._count_other(record.epoch, 1)
            return False
        if record.node_id in self.records:
            return True
        values = np.asarray(record.projection)
        if values.ndim != 1 or values.size != self.length:
            self.counters.bad_shape += 1
            return False
        values = values.astype(np.float64)
        if not np.all(np.isfinite(values)):
            self.counters.not_finite += 1
            return False
        if len(self.records) >= self.max_records:
            self.counters.over_capacity += 1
            return False
        if not self._verify(record.node_id, record.signature,
                            record_payload(record.node_id, record.epoch, values)):
            self.counters.bad_signature += 1
            return False
        values.flags.writeable = False
        self.records[record.node_id] = record
        self._projections[record.node_id] = values
        self._changed_at = now
        if self.applied is None:  # the table changed: the candidate is stale
            self._candidate, self._candidate_key, self._confirmed = None, None, False
        return True

    def _count_other(self, epoch: object, n: int) -> None:
        """Count ``n`` records dropped for another epoch or another attempt of this one."""
        low = (1 << ATTEMPT_SHIFT) - 1
        if isinstance(epoch, int) and epoch >= 0 and epoch & low == self.epoch:
            self.counters.other_attempt += n
        else:
            self.counters.other_epoch += n

    def _sample_records(self, exclude: frozenset[bytes]) -> tuple[ProjectionRecord, ...]:
        out = [r for node, r in self.records.items() if node not in exclude]
        return tuple(out[:RECORDS_PER_MESSAGE])

    def _agreed_groups(self) -> tuple[tuple[bytes, ...], ...]:
        return () if self.applied is None else tuple(self.applied.grouping.groups)
