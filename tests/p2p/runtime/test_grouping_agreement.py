"""The agreement on automatic groups (sans-IO core): completeness, repair, bad records, determinism."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pytest

from p2p.runtime.grouping.agreement import (
    RECORDS_PER_MESSAGE,
    GroupingAgreement,
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
from p2p.wire.identity import Identity

LENGTH = 4
EPOCH = 3


@dataclass(frozen=True)
class FakeGrouping:
    groups: tuple[tuple[bytes, ...], ...]
    params: object
    seed: int

    def fingerprint(self) -> str:
        h = hashlib.sha256(repr((self.groups, self.seed)).encode())
        return h.hexdigest()


def fake_find(projections: Mapping[bytes, np.ndarray], *, seed: int) -> FakeGrouping:
    """Nodes whose first value rounds the same are one group (deterministic)."""
    if len(projections) < 2:
        raise ValueError("fewer than 2 nodes")
    by_kind: dict[int, list[bytes]] = {}
    for node, p in projections.items():
        by_kind.setdefault(round(float(p[0])), []).append(node)
    groups = sorted(tuple(sorted(g)) for g in by_kind.values())
    return FakeGrouping(tuple(groups), "params", seed)


def fake_join(projection: np.ndarray, groups: Mapping[tuple[bytes, ...], tuple[np.ndarray, int]],
              params: object) -> tuple[bytes, ...] | None:
    best = min(groups, key=lambda g: abs(groups[g][0][0] - projection[0]))
    return best if abs(groups[best][0][0] - projection[0]) < 0.5 else None


def identity(i: int) -> Identity:
    return Identity.from_seed(bytes([i + 1]) * 32)


def record(ident: Identity, kind: float, epoch: int = EPOCH) -> ProjectionRecord:
    values = np.full(LENGTH, kind) + np.arange(LENGTH) * 0.01
    sig = ident.sign(record_payload(ident.node_id, epoch, values))
    return ProjectionRecord(ident.node_id, epoch, values, sig)


def agreement(ident: Identity, **kw: object) -> GroupingAgreement:
    options: dict[str, object] = {"quiet_period": 1.0, "find": fake_find, "join": fake_join,
                                  "seed": grouping_seed(b"g" * 32, EPOCH)}
    options.update(kw)
    return GroupingAgreement(ident.node_id, EPOCH, LENGTH, **options)  # type: ignore[arg-type]


class Swarm:
    """Agreements exchanging pulls in rounds over a random peer choice, in virtual time."""

    def __init__(self, kinds: Sequence[float], seed: int = 0, **kw: object) -> None:
        self.ids = [identity(i) for i in range(len(kinds))]
        self.nodes = [agreement(ident, **kw) for ident in self.ids]
        self.now = 0.0
        self.rng = random.Random(seed)
        for ident, node, kind in zip(self.ids, self.nodes, kinds, strict=True):
            node.set_own(record(ident, kind), self.now)
        self.applied: dict[int, object] = {}

    def exchange(self, i: int, j: int) -> None:
        a, b = self.nodes[i], self.nodes[j]
        reply = b.on_pull(a.own_id, a.make_pull(), self.now)
        a.on_reply(b.own_id, reply, self.now)

    def tick(self, dt: float = 0.25) -> None:
        self.now += dt
        for i, node in enumerate(self.nodes):
            j = self.rng.choice([k for k in range(len(self.nodes)) if k != i])
            peer = node.resync_peer
            if peer is not None:
                j = next(k for k, n in enumerate(self.nodes) if n.own_id == peer)
            self.exchange(i, j)
            decided = node.step(self.now)
            if decided is not None:
                assert i not in self.applied, "a node applied twice"
                self.applied[i] = decided

    def run(self, limit: float = 60.0) -> None:
        while len(self.applied) < len(self.nodes) and self.now < limit:
            self.tick()


def pulled_from(swarm: Swarm, peer: GroupingAgreement, ident: Identity, kind: float, *,
                tamper: Callable[[GroupsReply], GroupsReply] = lambda reply: reply,
                **kw: object) -> GroupingAgreement:
    """A node joining late (record of ``kind``) after three pulls from ``peer`` of
    ``swarm``, each reply passed through ``tamper`` (a lying peer) on the way;
    these pulls bring the records and the agreed groups."""
    late = agreement(ident, **kw)
    late.set_own(record(ident, kind), swarm.now)
    for _ in range(3):
        reply = peer.on_pull(late.own_id, late.make_pull(), swarm.now)
        late.on_reply(peer.own_id, tamper(reply), swarm.now)
    return late


def test_every_node_applies_the_same_grouping() -> None:
    kinds = [0, 0, 1, 1, 2, 2, 0, 1]
    swarm = Swarm(kinds, expected=len(kinds))
    swarm.run()
    assert len(swarm.applied) == len(kinds)
    fps = {node.fingerprint for node in swarm.nodes}
    assert len(fps) == 1 and "" not in fps
    # the same as the central algorithm on the whole table
    central = fake_find({n.own_id: r.projection for n, r in
                         ((node, node.own_record) for node in swarm.nodes) if r is not None},
                        seed=grouping_seed(b"g" * 32, EPOCH))
    assert fps == {central.fingerprint()}
    for i, node in enumerate(swarm.nodes):
        applied = node.applied
        assert applied is not None and not applied.joined
        group = tuple(sorted(swarm.ids[k].node_id for k, kind in enumerate(kinds)
                             if kind == kinds[i]))
        assert applied.group == group
        assert applied.model == model_name(EPOCH, group)
        assert node.counters.dropped == 0


def test_the_table_is_not_complete_before_the_expected_count_and_the_quiet_period() -> None:
    ids = [identity(i) for i in range(3)]
    a = agreement(ids[0], expected=3, quiet_period=2.0)
    a.set_own(record(ids[0], 0), 0.0)
    b = agreement(ids[1])
    b.set_own(record(ids[1], 0), 0.0)
    a.on_reply(b.own_id, b.on_pull(a.own_id, a.make_pull(), 0.0), 0.0)
    assert len(a.records) == 2
    assert not a.complete(100.0)  # 2 of 3 expected
    assert a.step(100.0) is None and a.fingerprint == ""
    c = agreement(ids[2])
    c.set_own(record(ids[2], 1), 0.0)
    a.on_reply(c.own_id, c.on_pull(a.own_id, a.make_pull(), 100.0), 100.0)
    assert not a.complete(101.0)  # quiet for 1 s of 2
    assert a.complete(102.0)
    # complete, but no peer has confirmed the candidate yet: not applied
    assert a.step(102.0) is None and a.fingerprint != "" and a.phase == "collecting"


def test_a_disagreement_is_counted_and_repaired_by_a_resync() -> None:
    ids = [identity(i) for i in range(4)]
    nodes = [agreement(ident) for ident in ids]
    for ident, node, kind in zip(ids, nodes, [0, 0, 1, 1], strict=True):
        node.set_own(record(ident, kind), 0.0)
    a, b, c, d = nodes
    # a knows b only, c knows every record: both complete after the quiet period
    a.on_reply(b.own_id, b.on_pull(a.own_id, a.make_pull(), 0.0), 0.0)
    for other in (a, b, d):
        c.on_reply(other.own_id, other.on_pull(c.own_id, c.make_pull(), 0.0), 0.0)
    assert a.step(5.0) is None and c.step(5.0) is None
    assert a.fingerprint and c.fingerprint and a.fingerprint != c.fingerprint
    # c pulls from a: a sees c's fingerprint differ, counts it and resyncs with c
    a_reply = a.on_pull(c.own_id, c.make_pull(), 5.0)
    c.on_reply(a.own_id, a_reply, 5.0)
    assert a.counters.disagreements == 1 and c.counters.disagreements == 1
    assert a.resync_peer == c.own_id
    a.on_reply(c.own_id, c.on_pull(a.own_id, a.make_pull(), 5.0), 5.0)
    assert len(a.records) == 4 and a.resync_peer is None
    assert a.step(5.5) is None  # the union restarted the quiet period (1 s)
    # recomputed on the union: c's announced fingerprint confirms it
    assert a.step(10.0) is not None
    assert a.fingerprint == c.fingerprint


def test_forged_misshapen_non_finite_and_other_epoch_records_are_dropped_and_counted() -> None:
    ids = [identity(i) for i in range(6)]
    a = agreement(ids[0])
    good = record(ids[1], 0)
    forged = replace(record(ids[2], 0), projection=np.full(LENGTH, 7.0))  # signature no longer fits
    other_signer = replace(record(ids[3], 0), node_id=ids[4].node_id)
    short = record(ids[4], 0)
    short = ProjectionRecord(short.node_id, EPOCH, np.zeros(LENGTH - 1), ids[4].sign(
        record_payload(short.node_id, EPOCH, np.zeros(LENGTH - 1))))
    nan_values = np.full(LENGTH, np.nan)
    nan = ProjectionRecord(ids[5].node_id, EPOCH, nan_values,
                           ids[5].sign(record_payload(ids[5].node_id, EPOCH, nan_values)))
    old = record(ids[5], 0, epoch=EPOCH - 1)
    msg = GroupsPull(EPOCH, (), (good, forged, other_signer, short, nan, old), "", 6)
    a.on_pull(ids[1].node_id, msg, 0.0)
    assert set(a.records) == {ids[1].node_id}
    c = a.counters
    assert (c.bad_signature, c.bad_shape, c.not_finite, c.other_epoch) == (2, 1, 1, 1)
    assert c.dropped == 5
    # a whole message of another epoch is dropped too
    a.on_pull(ids[1].node_id, replace(msg, epoch=EPOCH + 1, records=(record(ids[2], 0),)), 0.0)
    assert c.other_epoch == 2 and len(a.records) == 1


def test_records_and_messages_are_capped() -> None:
    ids = [identity(i) for i in range(RECORDS_PER_MESSAGE + 6)]
    a = agreement(ids[0], max_records=5)
    many = tuple(record(ident, 0) for ident in ids[1:])
    a.on_pull(ids[1].node_id, GroupsPull(EPOCH, (), many, "", 3), 0.0)
    assert len(a.records) == 5
    assert a.counters.over_capacity == len(many) - 5
    reply = a.on_pull(ids[1].node_id, GroupsPull(EPOCH, (), (), "", 0), 0.0)
    assert len(reply.records) <= RECORDS_PER_MESSAGE


def test_a_late_joiner_verifies_the_agreed_groups_and_joins_the_nearest() -> None:
    kinds = [0, 0, 1, 1]
    swarm = Swarm(kinds, expected=4)
    swarm.run()
    assert len(swarm.applied) == 4
    late = pulled_from(swarm, swarm.nodes[0], identity(10), 1.1, expected=4)
    decided = late.step(swarm.now)
    assert decided is not None and decided.joined
    group = tuple(sorted(swarm.ids[k].node_id for k in (2, 3)))
    assert decided.group == group and decided.model == model_name(EPOCH, group)
    assert late.fingerprint == swarm.nodes[0].fingerprint
    # one far from every group stays alone
    alone = pulled_from(swarm, swarm.nodes[1], identity(11), 5.0)
    decided = alone.step(swarm.now)
    assert decided is not None and decided.model is None and decided.group == (alone.own_id,)


def test_announced_groups_that_the_records_do_not_reproduce_are_rejected() -> None:
    kinds = [0, 0, 1, 1]
    swarm = Swarm(kinds, expected=4)
    swarm.run()
    liar = swarm.nodes[0]
    late = pulled_from(swarm, liar, identity(10), 0,
                       tamper=lambda reply: replace(reply, fingerprint="f" * 64))
    assert late.step(swarm.now) is None
    assert late.counters.rejected_groupings >= 1 and late.applied is None


def test_adopted_groups_are_the_recomputed_ones_not_the_announced_ones() -> None:
    kinds = [0, 0, 1, 1]
    swarm = Swarm(kinds, expected=4)
    swarm.run()
    liar = swarm.nodes[0]

    def everyone_alone(reply: GroupsReply) -> GroupsReply:
        return replace(reply, agreed=tuple((m,) for g in reply.agreed for m in g))
    late = pulled_from(swarm, liar, identity(10), 0, tamper=everyone_alone)
    decided = late.step(swarm.now)
    assert decided is not None
    assert decided.grouping.groups == liar.applied.grouping.groups  # type: ignore[union-attr]
    assert decided.model is not None  # joined the group of kind 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_agreement_is_deterministic_whatever_the_exchange_order(seed: int) -> None:
    kinds = [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]
    # no expected count: the quiet period (8 pull rounds) and the peers' table sizes decide
    swarm = Swarm(kinds, seed=seed, quiet_period=2.0)
    swarm.run()
    assert len(swarm.applied) == len(kinds)
    assert len({node.fingerprint for node in swarm.nodes}) == 1


def test_grouping_seed_and_model_names_are_stable() -> None:
    assert grouping_seed(b"a" * 32, 1) == grouping_seed(b"a" * 32, 1)
    assert grouping_seed(b"a" * 32, 1) != grouping_seed(b"a" * 32, 2)
    assert grouping_seed(b"a" * 32, 1) != grouping_seed(b"b" * 32, 1)
    assert 0 <= grouping_seed(b"a" * 32, 1) < 2**63
    name = model_name(2, (b"y", b"x"))
    assert name == model_name(2, (b"x", b"y")) and name.startswith("auto2-") and len(name) == 14


def test_records_and_messages_of_another_attempt_are_dropped_and_counted_apart() -> None:
    ids = [identity(i) for i in range(4)]
    second = attempt_epoch(EPOCH, 1)
    assert attempt_epoch(EPOCH, 0) == EPOCH and second != EPOCH
    a = agreement(ids[0], attempt=1, seed=grouping_seed(b"g" * 32, second))
    assert a.record_epoch == second and a.make_pull().epoch == second
    # this attempt's own record must be signed for the attempt's record epoch
    with pytest.raises(ValueError, match="own record"):
        a.set_own(record(ids[0], 0), 0.0)
    a.set_own(record(ids[0], 0, epoch=second), 0.0)
    first_attempt = record(ids[1], 0)  # attempt 0 of the same epoch
    msg = GroupsPull(second, (), (record(ids[2], 0, epoch=second), first_attempt,
                                  record(ids[3], 0, epoch=EPOCH + 1)), "", 3)
    a.on_pull(ids[1].node_id, msg, 0.0)
    assert set(a.records) == {ids[0].node_id, ids[2].node_id}
    c = a.counters
    # the refused own record above counts as one of another attempt too
    assert (c.other_attempt, c.other_epoch, c.dropped) == (2, 1, 3)
    # a whole message of the first attempt: dropped, counted as another attempt; the
    # reply does not answer its ids (they are of another table)
    reply = a.on_pull(ids[1].node_id, replace(msg, epoch=EPOCH, records=(first_attempt,),
                                              known=(ids[2].node_id,)), 0.0)
    assert c.other_attempt == 3 and len(a.records) == 2
    assert reply.epoch == second and {r.node_id for r in reply.records} == {
        ids[0].node_id, ids[2].node_id}
    # a record signed for attempt 0 and relabelled as attempt 1 fails its signature
    relabelled = replace(first_attempt, epoch=second)
    a.on_pull(ids[1].node_id, replace(msg, records=(relabelled,)), 0.0)
    assert c.bad_signature == 1 and ids[1].node_id not in a.records


def test_a_lagging_node_adopts_the_all_alone_grouping_of_a_finished_attempt() -> None:
    """Nodes that moved to the next attempt keep their finished agreement answering,
    so a node still on it adopts its grouping instead of waiting for confirmation."""
    swarm = Swarm([0.0, 1.0, 2.0, 3.0])  # fake_find: four kinds, every node alone
    swarm.run()
    assert len(swarm.applied) == 4
    # node 3 again, as if it had lagged: its record only, no peer announcing to it
    lagging = agreement(swarm.ids[3])
    lagging.set_own(swarm.nodes[3].own_record, 0.0)  # type: ignore[arg-type]
    assert lagging.step(100.0) is None  # alone it can never complete nor be confirmed
    for node in swarm.nodes[:3]:  # it only meets finished agreements
        lagging.on_reply(node.own_id, node.on_pull(lagging.own_id, lagging.make_pull(), 1.0), 1.0)
    decided = lagging.step(1.0)  # adopted at once: no quiet period, no confirmation
    assert decided is not None and not decided.joined and decided.model is None
    assert decided.group == (lagging.own_id,)
    assert decided.grouping.fingerprint() == swarm.nodes[0].fingerprint
