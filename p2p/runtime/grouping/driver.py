"""Automatic semi-local groups inside a running node: the trio side of the agreement.

:class:`NodeGrouping` holds one node's :class:`~p2p.runtime.grouping.agreement.GroupingAgreement`
and what surrounds it: the projection after pre-training (on the task's public
split), signing the node's record, periodic pulls from sampled peers, the
operator status and what a checkpoint keeps. Phases: ``pretraining``,
``collecting``, ``agreed``; pulls are served in every phase. When an attempt
agrees on every node alone and ``clustering.retries`` allows, attempt ``k + 1``
starts after another ``pretrain_rounds`` rounds; finished attempts keep
answering pulls so stragglers adopt their grouping. Changing the layout is the
node's job (:meth:`GroupingHost.add_semi_local`): this module says what to add.

How it works: docs/design/partial-models.md ("At run time").
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import trio

from learner.spec import PartialModelSpec
from p2p.config import ClusteringConfig
from p2p.runtime.checkpoint import GroupsRecord
from p2p.runtime.grouping.agreement import (
    AppliedGroups,
    FindGroups,
    GroupingAgreement,
    GroupingLike,
    JoinGroup,
    attempt_epoch,
    grouping_seed,
    model_name,
)
from p2p.runtime.grouping.messages import (
    GroupsPull,
    GroupsReply,
    ProjectionRecord,
    record_payload,
)
from p2p.runtime.grouping.status import GroupsStatus, GroupView

if TYPE_CHECKING:
    from p2p.wire.identity import Identity

__all__ = ["GroupingHost", "NodeGrouping", "RecordedGrouping"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecordedGrouping:
    """A grouping known only by its groups and fingerprint (a checkpoint whose
    records no longer reproduce it); it has no parameters to compute gains with."""

    groups: tuple[tuple[bytes, ...], ...]
    recorded_fingerprint: str
    params: object = None

    def fingerprint(self) -> str:
        """The fingerprint the checkpoint recorded."""
        return self.recorded_fingerprint


class GroupingHost(Protocol):
    """What :class:`NodeGrouping` needs of the node."""

    async def pull_groups(self, peer: bytes, msg: GroupsPull) -> GroupsReply | None: ...
    def grouping_peer(self) -> bytes | None: ...
    async def project(self) -> np.ndarray: ...
    async def add_semi_local(self, spec: PartialModelSpec, start: str) -> None: ...
    def rounds_done(self) -> int: ...


def _real_find() -> tuple[FindGroups, JoinGroup]:
    from learner.grouping import find_groups, join_group
    return find_groups, join_group


class NodeGrouping:
    """One node's automatic grouping (``clustering.mode = "auto"``).

    ``global_model``/``global_fingerprint``: the model the semi-local models
    depend on (its fingerprint seeds the grouping); ``counts``: the neurons of
    a semi-local model (:meth:`ClusteringConfig.semi_local_counts`);
    ``length``: values per projection; ``find``/``join``: the grouping and the
    late joiner's rule (:mod:`learner.grouping` by default; tests inject small ones);
    ``training_rounds``: the node's ``training.rounds`` (0: no end), so that it does
    not look again when no round would be left to train the groups found.
    """

    def __init__(self, config: ClusteringConfig, identity: Identity, *, global_model: str,
                 global_fingerprint: bytes, counts: tuple[int, ...], length: int,
                 find: FindGroups | None = None, join: JoinGroup | None = None,
                 training_rounds: int = 0) -> None:
        if find is None or join is None:
            real_find, real_join = _real_find()
            find, join = find or real_find, join or real_join
        self.config = config
        self.identity = identity
        self.global_model = global_model
        self.counts = counts
        self._global_fingerprint = global_fingerprint
        self._length = length
        self._training_rounds = training_rounds
        self._find = find
        self._join = join
        self.agreement = self._agreement(0)
        #: finished attempts' agreements by record epoch: they answer lagging peers
        self._past: dict[int, GroupingAgreement] = {}
        self._projecting = False
        self._installed = False  # the applied grouping's model is in the layout (phase "agreed")
        self._settled = trio.Event()  # this attempt applied or moved on (ends a hold)

    def _agreement(self, attempt: int) -> GroupingAgreement:
        config = self.config
        return GroupingAgreement(
            self.identity.node_id, config.epoch, self._length,
            seed=grouping_seed(self._global_fingerprint, attempt_epoch(config.epoch, attempt)),
            find=self._find, join=self._join, expected=config.expected_nodes,
            quiet_period=config.quiet_period, max_records=config.max_records, attempt=attempt)

    @property
    def attempt(self) -> int:
        """The grouping attempt under way (0 first; see ``clustering.retries``)."""
        return self.agreement.attempt

    def projection_round(self) -> int:
        """Rounds done when this attempt's projection is made (and training holds)."""
        return self.config.pretrain_rounds * (self.attempt + 1)

    def may_retry(self) -> bool:
        """Whether an all-alone answer of this attempt leads to another: retries left
        (``clustering.retries``) and rounds left to train after the next projection."""
        if self.attempt >= self.config.retries:
            return False
        next_projection = self.config.pretrain_rounds * (self.attempt + 2)
        return not self._training_rounds or next_projection < self._training_rounds

    def _next_attempt(self) -> None:
        """Keep the finished attempt to answer lagging peers; start the next one."""
        done = self.agreement
        self._past[done.record_epoch] = done
        self.agreement = self._agreement(done.attempt + 1)
        settled, self._settled = self._settled, trio.Event()
        settled.set()

    # ------------------------------------------------------------------ declarations

    def model_spec(self, name: str) -> PartialModelSpec:
        """The declaration of the semi-local model ``name`` (depends on the global model)."""
        return PartialModelSpec(name, self.counts, (self.global_model,), kind="semi-local")

    @property
    def applied(self) -> AppliedGroups | None:
        """The grouping applied (or resumed), if any."""
        return self.agreement.applied

    # ------------------------------------------------------------------ serving

    def on_pull(self, peer: bytes, msg: GroupsPull) -> GroupsReply:
        """Answer a peer's pull (any phase; a finished attempt's pull from its agreement)."""
        past = self._past.get(msg.epoch) if isinstance(msg.epoch, int) else None
        return (past or self.agreement).on_pull(peer, msg, trio.current_time())

    # ------------------------------------------------------------------ running

    async def run(self, host: GroupingHost) -> None:
        """Pre-train, project, exchange records and apply the groups; then keep
        answering (the node serves pulls) and pulling, so late joiners find the groups."""
        period = self.config.pull_period
        failed_at = -1  # the round a projection failed at: retried after the next round
        while True:
            rounds = host.rounds_done()
            if (self.agreement.own_record is None and not self._projecting
                    and rounds >= self.projection_round() and rounds > failed_at):
                try:
                    await self._make_record(host)
                except Exception:  # a bug in the projection must not stop the node
                    logger.exception("grouping epoch %d attempt %d: the projection failed; "
                                     "retrying after the next round", self.config.epoch,
                                     self.attempt)
                if self.agreement.own_record is None:
                    failed_at = rounds
            pinned = self.agreement.resync_peer
            peer = pinned or host.grouping_peer()
            if peer is not None:
                reply = await host.pull_groups(peer, self.agreement.make_pull())
                if reply is not None:
                    self.agreement.on_reply(peer, reply, trio.current_time())
                elif peer == pinned:
                    # unreachable (e.g. it pulled this node, which never sampled its
                    # address): pull sampled peers next rather than it forever
                    self.agreement.on_unreachable(peer)
            decided = self.agreement.step(trio.current_time())
            if decided is not None:
                try:
                    await self._apply(host, decided)
                except Exception:  # keep serving peers; the layout stays as it was
                    logger.exception("grouping epoch %d: applying the groups failed; this "
                                     "node keeps its layout", self.config.epoch)
            await trio.sleep(period)

    async def _make_record(self, host: GroupingHost) -> None:
        self._projecting = True
        try:
            projection = np.asarray(await host.project(), dtype=np.float64)
        finally:
            self._projecting = False
        epoch = self.agreement.record_epoch
        node_id = self.identity.node_id
        signature = self.identity.sign(record_payload(node_id, epoch, projection))
        record = ProjectionRecord(node_id, epoch, projection, signature)
        try:
            self.agreement.set_own(record, trio.current_time())
        except ValueError as exc:
            # a non-finite projection (a diverged network): retried after the next round
            logger.error("grouping epoch %d: this node's projection is unusable (%s); "
                         "retrying after the next round", epoch, exc)
            return
        logger.info("grouping epoch %d attempt %d: projection made after %d rounds; "
                    "exchanging records", self.config.epoch, self.attempt, host.rounds_done(),
                    extra={"grouping_epoch": self.config.epoch, "attempt": self.attempt})

    async def _apply(self, host: GroupingHost, applied: AppliedGroups) -> None:
        fp = applied.grouping.fingerprint()
        sizes = sorted((len(g) for g in applied.grouping.groups), reverse=True)
        if sizes[0] < 2 and self.may_retry():
            logger.info("grouping epoch %d attempt %d agreed (%s): every node alone; looking "
                        "again after %d more rounds (attempt %d of %d more)", self.config.epoch,
                        self.attempt, fp[:12], self.config.pretrain_rounds, self.attempt + 1,
                        self.config.retries, extra={"grouping": fp, "attempt": self.attempt})
            self._next_attempt()
            return
        if applied.model is None:
            logger.info("grouping epoch %d agreed (%s, groups of %s): this node stays alone; "
                        "its local neurons stay local", self.config.epoch, fp[:12], sizes,
                        extra={"grouping": fp})
            self._mark_installed()
            return
        how = "joins" if applied.joined else "shares"
        logger.info("grouping epoch %d agreed (%s, groups of %s): this node %s semi-local "
                    "model %s with %d other node(s)", self.config.epoch, fp[:12], sizes, how,
                    applied.model, len(applied.group) - (0 if applied.joined else 1),
                    extra={"grouping": fp, "model": applied.model})
        await host.add_semi_local(self.model_spec(applied.model), self.config.start)
        self._mark_installed()

    def _mark_installed(self) -> None:
        self._installed = True
        self._settled.set()

    def holds_training(self, rounds_done: int) -> bool:
        """Whether training should wait for the groups: this attempt's pre-training is
        over and its grouping is not settled yet (the rounds after it should train it)."""
        return rounds_done >= self.projection_round() and not self._installed

    async def wait_applied(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for this attempt to settle: its groups applied
        (True), or every node alone and the next attempt started (True); False on timeout."""
        settled = self._settled
        with trio.move_on_after(timeout):
            await settled.wait()
        return settled.is_set()

    # ------------------------------------------------------------------ status

    def status(self, rounds_done: int) -> GroupsStatus:
        """Where grouping stands (for ``p2p groups`` and ``p2p status``)."""
        a = self.agreement
        phase = "agreed" if self._installed else "collecting"
        if phase == "collecting" and a.own_record is None:
            phase = "pretraining"
        expected = self.config.expected_nodes or None
        applied = a.applied
        views: list[GroupView] = []
        own: GroupView | None = None
        if applied is not None:
            for group in applied.grouping.groups:
                mine = tuple(group) == tuple(applied.group) or (
                    not applied.joined and self.identity.node_id in group)
                if applied.joined and mine:
                    members = tuple(sorted((*group, self.identity.node_id)))
                else:
                    members = tuple(group)
                view = GroupView(
                    model_name(self.config.epoch, tuple(group)) if len(group) >= 2 else None,
                    members, *(self._own_figures(applied) if mine else (math.nan, math.nan)))
                views.append(view)
                if mine:
                    own = view
            if own is None:  # a late joiner staying alone
                own = GroupView(None, (self.identity.node_id,), math.nan, math.nan)
                views.append(own)
        return GroupsStatus(phase, self.config.epoch, len(a.records), expected,
                            a.fingerprint or None, tuple(views), own, a.peers_agreeing,
                            a.counters.disagreements, attempt=self.attempt)

    def _own_figures(self, applied: AppliedGroups) -> tuple[float, float]:
        """This node's distance to its group's barycentre and its gain (NaN when unknown)."""
        grouping = applied.grouping
        me = self.identity.node_id
        if applied.joined or isinstance(grouping, RecordedGrouping):
            return math.nan, math.nan
        try:
            distance = float(grouping.distance_to_barycentre(me, self.agreement.projections))  # type: ignore[attr-defined]
            gain = float(grouping.gain(me, self.agreement.projections))  # type: ignore[attr-defined]
        except (AttributeError, KeyError, ValueError, NotImplementedError):
            return math.nan, math.nan
        return distance, gain

    # ------------------------------------------------------------------ checkpoints

    def record(self) -> GroupsRecord | None:
        """What a checkpoint keeps: the attempt, the records held and the applied grouping
        (None before the node has its first own record). Before agreement the
        fingerprint is "": a restart then keeps the record its peers already hold
        rather than signing a second, different one. Between attempts (the next
        one's record not made yet) only the attempt is kept."""
        if self.agreement.own_record is None:
            if self.attempt == 0:
                return None
            return GroupsRecord(epoch=self.config.epoch, fingerprint="", groups=(), group=(),
                                joined=False, model=None, attempt=self.attempt)
        records = tuple(
            (r.node_id, r.epoch, np.asarray(r.projection, dtype="<f8").tobytes(), r.signature)
            for r in self.agreement.records.values())
        applied = self.agreement.applied
        if applied is None:
            return GroupsRecord(epoch=self.config.epoch, fingerprint="", groups=(), group=(),
                                joined=False, model=None, records=records,
                                attempt=self.attempt)
        return GroupsRecord(
            epoch=self.config.epoch, fingerprint=applied.grouping.fingerprint(),
            groups=tuple(tuple(g) for g in applied.grouping.groups), group=tuple(applied.group),
            joined=applied.joined, model=applied.model,
            counts=self.counts if applied.model is not None else (),
            depends_on=(self.global_model,) if applied.model is not None else (),
            records=records, attempt=self.attempt)

    def restore(self, saved: GroupsRecord) -> PartialModelSpec | None:
        """Resume the records and an applied grouping; the semi-local model to declare
        again (None: alone, or not agreed yet).

        The grouping is recomputed from the saved records when they reproduce
        its fingerprint (gains then show again); otherwise it is kept as recorded.
        """
        if saved.epoch != self.config.epoch:
            logger.warning("the checkpoint's groups are of epoch %d, clustering.epoch is %d: "
                           "the layout is resumed as it was; a new epoch needs --fresh",
                           saved.epoch, self.config.epoch)
        if saved.attempt != self.attempt:
            self.agreement = self._agreement(saved.attempt)
        records = [ProjectionRecord(node, epoch, np.frombuffer(values, dtype="<f8").copy(), sig)
                   for node, epoch, values, sig in saved.records]
        now = trio.current_time() if _in_trio() else 0.0
        self.agreement.restore(records, None, now)
        if not saved.fingerprint:  # saved while collecting: the records only
            return None
        grouping: GroupingLike = RecordedGrouping(saved.groups, saved.fingerprint)
        members = [m for g in saved.groups for m in g]
        projections: Mapping[bytes, np.ndarray] = self.agreement.projections
        if members and all(m in projections for m in members):
            try:
                found = self._find({m: projections[m] for m in members},
                                   seed=self.agreement.seed)
                if found.fingerprint() == saved.fingerprint:
                    grouping = found
            except (ValueError, NotImplementedError) as exc:
                logger.debug("saved grouping not recomputed: %s", exc)
        self.agreement.applied = AppliedGroups(grouping, saved.group, saved.joined, saved.model)
        self._mark_installed()
        if saved.model is None:
            return None
        return PartialModelSpec(saved.model, saved.counts, saved.depends_on, kind="semi-local")

    def describe(self) -> dict[str, Any]:
        """A short summary for logs."""
        a = self.agreement
        return {"phase": a.phase, "attempt": a.attempt, "records": len(a.records),
                "fingerprint": a.fingerprint}


def _in_trio() -> bool:
    try:
        trio.current_time()
    except RuntimeError:
        return False
    return True
