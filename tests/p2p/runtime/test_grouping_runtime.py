"""Automatic semi-local groups in running nodes (memory network, virtual time).

Nodes of two kinds of data (true labels, every label shifted by one) pre-train, project,
agree on one grouping and add the same semi-local model within each kind; the
global model's fingerprint never changes; a restart resumes the groups from the
checkpoint. A tiny stand-in for the grouping (two groups split at the median of a
feature the swap moves) keeps these tests independent of the real algorithm's speed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import numpy as np
import pytest
import torch
import trio
import trio.testing

from learner.layout import ModelLayout
from learner.spec import PartialModelSpec
from p2p.config import ClusteringConfig, ConfigError, NodeConfig
from p2p.runtime.checkpoint import CheckpointStore
from p2p.runtime.grouping.agreement import attempt_epoch, grouping_seed, model_name
from p2p.runtime.grouping.messages import GroupsPull, GroupsReply
from p2p.runtime.node import Node
from p2p.runtime.train_runner import InlineRunner
from p2p.swarm import node_config
from p2p.testing import MemoryNetwork, fast_spec, memory_addresses, running, wait_until
from p2p.wire.identity import Identity

NODES = 4
SHIFT = "0:1:2:3:4:5:6:7:8:9"  # every label moved to the next one
PERMUTATIONS = (None, SHIFT, None, SHIFT)
CLASSES = 10
LIMIT = 10_000.0  # virtual seconds: generous, costs nothing under the autojump clock


class SplitGrouping:
    """Two groups: the nodes above and below the median of ``swap_feature``."""

    def __init__(self, groups: tuple[tuple[bytes, ...], ...], seed: int) -> None:
        self.groups = groups
        self.params = None
        self.seed = seed

    def fingerprint(self) -> str:
        return hashlib.sha256(repr((self.groups, self.seed)).encode()).hexdigest()


def swap_feature(p: np.ndarray) -> float:
    """Mass put on the next label, minus the mass on the true label (over every class)."""
    m = np.asarray(p).reshape(CLASSES, CLASSES)
    return float(sum(m[c, (c + 1) % CLASSES] - m[c, c] for c in range(CLASSES)))


def split_find(projections: Mapping[bytes, np.ndarray], *, seed: int) -> SplitGrouping:
    ranked = sorted(projections, key=lambda n: (swap_feature(projections[n]), n))
    half = len(ranked) // 2
    groups = sorted(tuple(sorted(g)) for g in (ranked[:half], ranked[half:]) if g)
    return SplitGrouping(tuple(groups), seed)


def nearest_join(projection: np.ndarray, groups: Mapping[tuple[bytes, ...], tuple[np.ndarray, int]],
                 params: object) -> tuple[bytes, ...] | None:
    return min(groups, key=lambda g: abs(swap_feature(groups[g][0]) - swap_feature(projection)))


def grouping_config(index: int, data_dir: Path, *, rounds: int = 10,
                    start: str = "average", expected: int = NODES,
                    retries: int = 1) -> NodeConfig:
    spec = fast_spec(nodes=NODES, rounds=rounds, scheme="partial", permutations=PERMUTATIONS, lr=0.5,
                     steps_per_round=10, eval_every=10, round_interval=0.05,
                     shuffle_period=0.2, start_together=False)
    config = node_config(spec, index, data_dir, None)
    return dataclasses.replace(
        config,
        data=dataclasses.replace(config.data, public_size=200),
        clustering=ClusteringConfig(mode="auto", pretrain_rounds=6, expected_nodes=expected,
                                    quiet_period=1.0, pull_period=0.2, start=start,
                                    retries=retries),
        checkpoint=dataclasses.replace(config.checkpoint, interval=1e6))


def grouping_node(net: MemoryNetwork, root: Path, index: int, addresses: list[str],
                  find: Callable[..., object] = split_find, **options: object) -> Node:
    data_dir = root / f"node{index}"
    data_dir.mkdir(parents=True, exist_ok=True)
    config = grouping_config(index, data_dir, **options).with_overrides(  # type: ignore[arg-type]
        listen=addresses[index], bootstrap=addresses[:1] if index else [])
    transport = net.transport(Identity.load_or_create(data_dir), addresses[index])
    # inline work: a worker thread would let the autojump clock jump past
    # clustering.hold while a slow machine is still training
    node = Node(config, transport=transport, find_groups=find,  # type: ignore[arg-type]
                join_group=nearest_join, train_runner=InlineRunner())
    transport.tags = frozenset(node.by_fingerprint)
    return node


def agreed(nodes: list[Node]) -> bool:
    return all(n.groups_status().phase == "agreed" for n in nodes)


def groups_by_kind(nodes: list[Node]) -> list[tuple[bytes, ...]]:
    """The groups the nodes should find: one per feature permutation, ids sorted."""
    ids = [n.identity.node_id for n in nodes]
    return [tuple(sorted(ids[i] for i in range(NODES) if PERMUTATIONS[i] == p))
            for p in (None, SHIFT)]


def rounds_when_added(nodes: list[Node]) -> dict[int, int]:
    """Node index -> its rounds done when it added its semi-local model (filled as they do)."""
    applied_at: dict[int, int] = {}
    for i, n in enumerate(nodes):
        async def add(spec: PartialModelSpec, start: str, i: int = i, n: Node = n,
                      add: Callable[[PartialModelSpec, str], Awaitable[None]] = n.add_semi_local
                      ) -> None:
            applied_at[i] = n.progress.round
            await add(spec, start)
        n.add_semi_local = add  # type: ignore[method-assign]
    return applied_at


async def test_nodes_of_two_kinds_agree_add_the_same_semi_local_model_and_resume_it(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    net = MemoryNetwork()
    addresses = memory_addresses(NODES)
    nodes = [grouping_node(net, tmp_path, i, addresses) for i in range(NODES)]
    global_fp = nodes[0].learning.fingerprints["global"]
    applied_at = rounds_when_added(nodes)
    async with running(nodes):
        assert {n.groups_status().phase for n in nodes} <= {"pretraining", "collecting"}
        await wait_until(lambda: agreed(nodes), LIMIT, what="every node applied the groups")
        # training held at the end of pre-training (clustering.hold), so every
        # round after it trains the semi-local model
        assert applied_at == dict.fromkeys(range(NODES), 6)
        statuses = [n.groups_status() for n in nodes]
        # one fingerprint everywhere, every record held, every peer agreeing
        assert len({s.fingerprint for s in statuses}) == 1 and statuses[0].fingerprint
        assert all(s.records == NODES and s.expected == NODES for s in statuses)
        kinds = groups_by_kind(nodes)
        assert sorted(g.members for g in statuses[0].groups) == sorted(kinds)
        for n, s in zip(nodes, statuses, strict=True):
            group = next(k for k in kinds if n.identity.node_id in k)
            name = model_name(1, group)
            assert s.own is not None and s.own.members == group and s.own.model == name
            assert name in n.cores and name in n.learning.layout.shared_models
            assert n.learning.layout.model_kind(name) == "semi-local"
            # the global model is untouched: same fingerprint, same vector length
            assert n.learning.fingerprints["global"] == global_fp
            assert n.sampler.models == frozenset(n.by_fingerprint)
        # each semi-local model is shared within its group only, and its members converge
        names = {model_name(1, k) for k in kinds}
        for name in names:
            holders = [n for n in nodes if name in n.cores]
            assert len(holders) == 2
            await wait_until(lambda h=holders, m=name: np.allclose(  # type: ignore[misc]
                h[0].cores[m].values, h[1].cores[m].values, atol=1e-3), LIMIT,
                what=f"the members of {name} averaged it")
            assert sum(n.cores[name].counters.pushes_received for n in holders) > 0
    # a restart resumes the groups from the checkpoint, without a new agreement
    before = nodes[1].groups_status()
    layout_before = nodes[1].learning.layout
    saved = CheckpointStore(tmp_path / "node1").load()
    assert saved is not None and saved.groups is not None
    assert saved.groups.fingerprint == before.fingerprint
    # the same configuration resumes: not a configuration change
    restarted = grouping_node(net, tmp_path, 1, addresses)
    after = restarted.groups_status()
    assert after.phase == "agreed" and after.fingerprint == before.fingerprint
    assert after.own == before.own
    assert restarted.learning.layout.shared_models == layout_before.shared_models
    own = before.own
    assert own is not None and own.model is not None
    assert restarted.learning.fingerprints == {
        name: layout_before.fingerprint(name) for name in layout_before.shared_models}
    np.testing.assert_array_equal(restarted.cores[own.model].values,
                                  saved.pushsum[own.model].values)
    await restarted.transport.aclose()


async def test_a_late_joiner_takes_the_agreed_groups_and_joins_one(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    net = MemoryNetwork()
    addresses = memory_addresses(NODES)
    # three nodes complete the table; the fourth starts once they agreed
    nodes = [grouping_node(net, tmp_path, i, addresses, expected=3) for i in range(NODES)]
    first, late = nodes[:3], nodes[3]
    async with running(first):
        await wait_until(lambda: agreed(first), LIMIT, what="the first three applied the groups")
        async with trio.open_nursery() as nursery:
            await nursery.start(late.run)
            await wait_until(lambda: agreed([late]), LIMIT, what="the late node joined")
            status, other = late.groups_status(), first[0].groups_status()
            assert status.fingerprint == other.fingerprint  # the swarm's grouping, unchanged
            assert status.records == 4 and late.identity.node_id not in {
                m for g in other.groups for m in g.members}
            own = status.own
            assert own is not None and own.model is not None  # a shifted node joins the group holding the other
            assert late.identity.node_id in own.members
            holders = [n for n in first if own.model in n.cores]
            assert holders and all(n.learning.fingerprints[own.model]
                                   == late.learning.fingerprints[own.model] for n in holders)
            assert nodes[1] in holders  # the other node with shifted labels
            late.request_stop()


@pytest.mark.parametrize("start", ["average", "reinit"])
async def test_a_semi_local_model_added_while_running_starts_as_configured(
        tmp_path: Path, start: str) -> None:
    net = MemoryNetwork()
    node = grouping_node(net, tmp_path, 0, memory_addresses(1), start=start)
    layout = node.learning.layout
    flat_before = node.learning.network.flat.detach().clone()
    global_before = node.cores["global"].values.copy()
    spec = node.grouping.model_spec("auto1-0123abcd")  # type: ignore[union-attr]
    await node.add_semi_local(spec, start)
    network = node.learning.network
    assert node.learning.layout.fingerprint("global") == layout.fingerprint("global")
    np.testing.assert_array_equal(node.cores["global"].values, global_before)
    taken = node.learning.layout.owned_indices(spec.name)
    values = node.cores[spec.name].values
    if start == "average":  # this node's pre-trained values; push-sum averages them later
        np.testing.assert_array_equal(values, flat_before.numpy()[taken])
        assert torch.equal(network.flat.detach(), flat_before)
    else:  # the model's shared initialisation: the same on every member
        np.testing.assert_allclose(values, network.initial_values(spec.name), atol=1e-6)
        assert not np.allclose(values, flat_before.numpy()[taken])
    # the new model gossips and is checkpointed
    assert spec.name in node.gossip.plans
    assert node.sync.names == ("global", spec.name)
    saved = CheckpointStore(tmp_path / "node0").load()
    assert saved is not None and spec.name in saved.pushsum
    await node.transport.aclose()


def test_adding_a_semi_local_model_keeps_the_global_model_and_its_vector() -> None:
    config = grouping_config(0, Path("unused"))
    layout = config.layout()
    counts = config.clustering.semi_local_counts(layout)
    spec = PartialModelSpec("auto1-00000000", counts, ("global",), kind="semi-local")
    grown = ModelLayout(layout.network, [*(layout.spec(n) for n in layout.declared_models), spec])
    assert grown.fingerprint("global") == layout.fingerprint("global")
    np.testing.assert_array_equal(grown.owned_indices("global"), layout.owned_indices("global"))
    # the semi-local model takes exactly the local neurons' parameters it covers
    local_before = set(layout.owned_indices("local").tolist())
    assert set(grown.owned_indices(spec.name).tolist()) <= local_before
    assert grown.model_kind(spec.name) == "semi-local"


@pytest.mark.parametrize(("changes", "match"), [
    ({"models": ()}, "exactly one global model"),
    ({"clustering": ClusteringConfig(mode="auto", share=0.9)}, "clustering.share"),
    ({"training_rounds": 5}, "clustering.pretrain_rounds"),
])
def test_auto_grouping_refuses_configurations_that_cannot_work(
        changes: dict[str, object], match: str) -> None:
    config = grouping_config(0, Path("unused"))
    with pytest.raises(ConfigError, match=match):
        if "training_rounds" in changes:
            dataclasses.replace(config, training=dataclasses.replace(
                config.training, rounds=changes["training_rounds"]))
        else:
            dataclasses.replace(config, **changes)  # type: ignore[arg-type]


def test_auto_grouping_needs_a_public_split(tmp_path: Path) -> None:
    config = grouping_config(0, tmp_path)
    with pytest.raises(ConfigError, match="data.public_size"):
        dataclasses.replace(config, data=dataclasses.replace(config.data, public_size=0))
    net = MemoryNetwork()
    config = dataclasses.replace(config, data=dataclasses.replace(config.data, public_size=None))
    with pytest.raises(ConfigError, match="public split"):  # digits carves none by default
        Node(config, transport=net.transport(Identity.generate(), "10.0.0.1:7000"))


def test_the_checkpoint_keeps_the_groups_and_reads_older_versions_as_none(
        tmp_path: Path) -> None:
    import torch as _torch

    from p2p.runtime import checkpoint as ckpt

    ids = (b"a" * 32, b"b" * 32, b"c" * 32)
    groups = ckpt.GroupsRecord(
        epoch=2, fingerprint="f" * 64, groups=((ids[0], ids[1]), (ids[2],)),
        group=(ids[0], ids[1]), joined=False, model="auto2-0123abcd", counts=(0, 10, 6, 0),
        depends_on=("global",),
        records=tuple((i, 2, np.arange(4, dtype="<f8").tobytes(), b"s" * 64) for i in ids))
    state = ckpt.NodeState(model_state={"flat": _torch.zeros(3)}, groups=groups)
    store = ckpt.CheckpointStore(tmp_path)
    store.save(state)
    loaded = store.load()
    assert loaded is not None and loaded.groups == groups
    # a version 3 checkpoint's groups (before attempts) read as attempt 0; versions
    # before 5 are bare torch files (no digest envelope)
    payload, sealed = ckpt.unseal(store.path.read_bytes(), store.path)
    raw = _torch.load(io.BytesIO(payload), weights_only=True)
    assert sealed and raw["version"] == 5 and raw["groups"]["attempt"] == 0
    raw["version"] = 4
    raw["groups"]["attempt"] = 2
    _torch.save(raw, store.path)
    loaded = store.load()
    assert loaded is not None and loaded.groups == dataclasses.replace(groups, attempt=2)
    raw["version"] = 3
    del raw["groups"]["attempt"]
    _torch.save(raw, store.path)
    loaded = store.load()
    assert loaded is not None and loaded.groups == groups and loaded.groups.attempt == 0
    # a version 2 checkpoint has no groups: read as none (no migration needed)
    raw = _torch.load(store.path, weights_only=True)
    raw["version"] = 2
    del raw["groups"]
    _torch.save(raw, store.path)
    older = store.load()
    assert older is not None and older.groups is None
    # malformed groups are refused, naming them
    raw["version"] = 3
    raw["groups"] = {"epoch": "two"}
    _torch.save(raw, store.path)
    with pytest.raises(ckpt.CheckpointError, match="groups are malformed"):
        store.load()


async def test_a_restart_before_agreement_keeps_the_signed_record(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    net = MemoryNetwork()
    node = grouping_node(net, tmp_path, 0, memory_addresses(1))
    grouping = node.grouping
    assert grouping is not None and node.groups_record() is None  # nothing before the record
    node.progress.round = 6  # pre-training done
    await grouping._make_record(node.grouping_host)
    own = grouping.agreement.own_record
    assert own is not None and node.groups_status().phase == "collecting"
    await node.save_checkpoint()
    await node.transport.aclose()
    restarted = grouping_node(net, tmp_path, 0, memory_addresses(1))
    again = restarted.grouping.agreement.own_record  # type: ignore[union-attr]
    assert again is not None and again.signature == own.signature
    assert restarted.groups_status().phase == "collecting"
    assert restarted.learning.layout.shared_models == ("global",)
    await restarted.transport.aclose()


def alone_first(first_seed: int) -> Callable[..., SplitGrouping]:
    """A stand-in grouping that finds every node alone on the first attempt (its seed)
    and the two kinds on any later one, like a swarm not trained enough at first."""
    def find(projections: Mapping[bytes, np.ndarray], *, seed: int) -> SplitGrouping:
        if seed == first_seed:
            return SplitGrouping(tuple((n,) for n in sorted(projections)), seed)
        return split_find(projections, seed=seed)
    return find


def retry_nodes(net: MemoryNetwork, root: Path, **options: object) -> list[Node]:
    addresses = memory_addresses(NODES)
    global_fp = grouping_config(0, root).layout().fingerprint("global")
    first_seed = grouping_seed(global_fp, attempt_epoch(1, 0))
    return [grouping_node(net, root, i, addresses, find=alone_first(first_seed), **options)
            for i in range(NODES)]


async def test_every_node_alone_looks_again_after_more_rounds_and_the_next_attempt_stands(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    net = MemoryNetwork()
    nodes = retry_nodes(net, tmp_path, rounds=16)
    moved_at: dict[int, int] = {}  # node index -> rounds done when attempt 0 ended all alone
    applied_at = rounds_when_added(nodes)
    for i, n in enumerate(nodes):
        g = n.grouping
        assert g is not None

        def moved(i: int = i, n: Node = n, step: Callable[[], None] = g._next_attempt) -> None:
            moved_at[i] = n.progress.round
            step()
        g._next_attempt = moved  # type: ignore[method-assign]
    async with running(nodes):
        await wait_until(lambda: agreed(nodes) and all(
            n.groups_status().attempt == 1 for n in nodes), LIMIT,
            what="every node applied the second attempt's groups")
        # training held at the end of both attempts' pre-training
        assert moved_at == dict.fromkeys(range(NODES), 6)
        assert applied_at == dict.fromkeys(range(NODES), 12)
        statuses = [n.groups_status() for n in nodes]
        assert len({s.fingerprint for s in statuses}) == 1 and statuses[0].fingerprint
        assert all(s.records == NODES for s in statuses)
        kinds = groups_by_kind(nodes)
        assert sorted(g.members for g in statuses[0].groups) == sorted(kinds)
        for n, s in zip(nodes, statuses, strict=True):
            group = next(k for k in kinds if n.identity.node_id in k)
            assert s.own is not None and s.own.model == model_name(1, group)
            assert s.own.model in n.cores
            # the second attempt's records are signed for its record epoch
            record = n.grouping.agreement.own_record  # type: ignore[union-attr]
            assert record is not None and record.epoch == attempt_epoch(1, 1)
    # the checkpoint keeps the attempt; a restart resumes the second attempt's groups
    saved = CheckpointStore(tmp_path / "node1").load()
    assert saved is not None and saved.groups is not None and saved.groups.attempt == 1
    restarted = grouping_node(net, tmp_path, 1, memory_addresses(NODES),
                              find=nodes[1].grouping._find)  # type: ignore[union-attr]
    after = restarted.groups_status()
    assert (after.phase, after.attempt, after.fingerprint) == ("agreed", 1, statuses[1].fingerprint)
    assert after.own == statuses[1].own
    await restarted.transport.aclose()


async def test_with_no_retries_the_first_all_alone_answer_is_final(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    net = MemoryNetwork()
    nodes = retry_nodes(net, tmp_path, retries=0)
    async with running(nodes):
        await wait_until(lambda: agreed(nodes), LIMIT, what="every node applied the groups")
        statuses = [n.groups_status() for n in nodes]
        assert len({s.fingerprint for s in statuses}) == 1
        assert all(s.attempt == 0 and s.own is not None and s.own.model is None
                   and len(s.groups) == NODES for s in statuses)
        assert all(n.learning.layout.shared_models == ("global",) for n in nodes)


async def test_a_restart_between_attempts_resumes_the_next_attempt(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    net = MemoryNetwork()
    node = grouping_node(net, tmp_path, 0, memory_addresses(1))
    grouping = node.grouping
    assert grouping is not None
    node.progress.round = 6
    await grouping._make_record(node.grouping_host)
    grouping._next_attempt()  # attempt 0 found every node alone
    assert node.groups_status().phase == "pretraining" and grouping.attempt == 1
    assert not grouping.holds_training(6) and grouping.holds_training(12)
    # rounds=10: the first attempt may look again only if rounds remain after the
    # next projection (at 12 here: none), and with retries left
    assert not grouping.may_retry()
    await node.save_checkpoint()
    await node.transport.aclose()
    restarted = grouping_node(net, tmp_path, 0, memory_addresses(1))
    again = restarted.grouping
    assert again is not None and again.attempt == 1 and again.projection_round() == 12
    status = restarted.groups_status()
    assert (status.phase, status.attempt, status.records) == ("pretraining", 1, 0)
    # its record is made at the second attempt's end, for that attempt, and kept too
    restarted.progress.round = 12
    await again._make_record(restarted.grouping_host)
    own = again.agreement.own_record
    assert own is not None and own.epoch == attempt_epoch(1, 1)
    await restarted.save_checkpoint()
    await restarted.transport.aclose()
    third = grouping_node(net, tmp_path, 0, memory_addresses(1))
    kept = third.grouping.agreement.own_record  # type: ignore[union-attr]
    assert third.grouping.attempt == 1  # type: ignore[union-attr]
    assert kept is not None and kept.signature == own.signature
    await third.transport.aclose()


async def test_a_finished_attempt_still_answers_a_lagging_peer(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    net = MemoryNetwork()
    node = grouping_node(net, tmp_path, 0, memory_addresses(1))
    grouping = node.grouping
    assert grouping is not None
    first = grouping.agreement
    grouping._next_attempt()
    lagging = GroupsPull(attempt_epoch(1, 0), (), (), "", 0)
    assert grouping.on_pull(b"p" * 32, lagging).epoch == attempt_epoch(1, 0)
    assert first.counters.other_attempt == 0
    current = GroupsPull(attempt_epoch(1, 1), (), (), "", 0)
    assert grouping.on_pull(b"p" * 32, current).epoch == attempt_epoch(1, 1)
    await node.transport.aclose()


def test_a_retry_needs_retries_left_and_rounds_left_to_train() -> None:
    from p2p.runtime.grouping.driver import NodeGrouping

    def grouping(rounds: int, retries: int) -> NodeGrouping:
        config = grouping_config(0, Path("unused"), rounds=rounds, retries=retries)
        return NodeGrouping(config.clustering, Identity.generate(), global_model="global",
                            global_fingerprint=b"g" * 32, counts=(0, 1, 0), length=4,
                            find=split_find, join=nearest_join,  # type: ignore[arg-type]
                            training_rounds=rounds)

    assert grouping(16, 1).may_retry()  # attempt 1 projects at 12 < 16
    assert not grouping(12, 1).may_retry()  # nothing left to train after round 12
    assert not grouping(16, 0).may_retry()
    g = grouping(30, 2)
    assert g.may_retry()
    g._next_attempt()
    assert g.attempt == 1 and g.may_retry()  # attempt 2 projects at 18 < 30
    g._next_attempt()
    assert not g.may_retry()  # the last attempt's answer stands


async def test_a_peer_that_cannot_be_pulled_back_does_not_stall_the_agreement(
        autojump_clock: trio.testing.MockClock) -> None:
    """A peer pulled this node (holding more records) but this node cannot reach it
    (it never sampled its address): the node pulls sampled peers instead of only it."""
    from p2p.runtime.grouping.driver import NodeGrouping

    config = ClusteringConfig(mode="auto", pretrain_rounds=1, expected_nodes=3,
                              quiet_period=1.0, pull_period=0.2)
    identities = [Identity.generate() for _ in range(3)]
    shifted = np.eye(CLASSES)[[(c + 1) % CLASSES for c in range(CLASSES)]].ravel()
    values = [np.eye(CLASSES).ravel(), shifted, shifted]
    groupings = [NodeGrouping(config, ident, global_model="global", global_fingerprint=b"g" * 32,
                              counts=(0, 1, 0), length=CLASSES * CLASSES, find=split_find,
                              join=nearest_join)
                 for ident in identities]
    ids = [i.node_id for i in identities]

    class Host:
        def __init__(self, index: int) -> None:
            self.index = index
            self.pulled: list[int] = []

        async def pull_groups(self, peer: bytes, msg: GroupsPull) -> GroupsReply | None:
            self.pulled.append(ids.index(peer))
            if ids.index(peer) == 2:
                return None  # node 2's address is unknown here
            other = groupings[ids.index(peer)]
            other.agreement.step(trio.current_time())
            return other.on_pull(ids[self.index], msg)

        def grouping_peer(self) -> bytes:
            return ids[1]

        async def project(self) -> np.ndarray:
            return values[self.index]

        async def add_semi_local(self, spec: PartialModelSpec, start: str) -> None:
            pass

        def rounds_done(self) -> int:
            return 1

    hosts = [Host(i) for i in range(3)]
    for g, h in zip(groupings, hosts, strict=True):
        await g._make_record(h)
    own = [g.agreement.own_record for g in groupings]
    for g in groupings[1:]:  # nodes 1 and 2 hold every record already
        g.agreement.restore([r for r in own if r is not None], None, trio.current_time())
    # node 2 pulls node 0, saying it holds more: node 0 should pull it next...
    groupings[0].on_pull(ids[2], groupings[2].agreement.make_pull())
    assert groupings[0].agreement.resync_peer == ids[2]
    # ...but cannot reach it: it pulls its sampled peer and agrees all the same
    with trio.move_on_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(groupings[0].run, hosts[0])
            await wait_until(lambda: groupings[0].applied is not None, 20)
            nursery.cancel_scope.cancel()
    assert groupings[0].applied is not None
    assert groupings[0].applied.group == (ids[0],)  # alone: the identity labels
    assert hosts[0].pulled[0] == 2 and 1 in hosts[0].pulled
