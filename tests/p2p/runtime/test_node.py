"""The node runtime over an in-memory network: gossip, merges, admin, checkpoints."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
import pytest

from p2p.runtime.node import Node
from p2p.swarm import SwarmSpec
from p2p.testing import MemoryNetwork, memory_swarm, wait_until
from p2p.testing import running as run_nodes

ADDRESSES = ["127.0.0.1:7401", "127.0.0.1:7402", "127.0.0.1:7403"]


def make_nodes(tmp_path: Path, net: MemoryNetwork, spec: SwarmSpec) -> list[Node]:
    return memory_swarm(tmp_path, net, spec, addresses=ADDRESSES[:spec.nodes])


@asynccontextmanager
async def running(nodes: list[Node]) -> AsyncIterator[None]:
    """Run ``nodes`` until each finished its rounds; stop them all on exit."""
    async with run_nodes(nodes):
        await wait_until(lambda: all(n.progress.finished for n in nodes))
        yield


def spread(nodes: list[Node], model: str) -> float:
    """Largest distance of a node's vector from node 0's, relative to its norm."""
    vectors = [n.cores[model].values for n in nodes]
    return max(np.linalg.norm(v - vectors[0]) for v in vectors) / np.linalg.norm(vectors[0])


def total_weight(nodes: list[Node], model: str) -> float:
    return sum(n.cores[model].weight for n in nodes)


async def test_nodes_exchange_and_merge_pushes_over_memory_streams(tmp_path: Path) -> None:
    spec = SwarmSpec(nodes=3, rounds=15, scheme="full", round_interval=0.0,
                     shuffle_period=0.05, eval_every=5)
    net = MemoryNetwork()
    nodes = make_nodes(tmp_path, net, spec)
    async with running(nodes):
        at_finish = spread(nodes, "global")
        # After training stops the nodes keep averaging: the global model converges.
        await wait_until(lambda: spread(nodes, "global") < min(1e-3, at_finish / 10))
        await wait_until(lambda: all(n.cores["global"].outstanding == 0 for n in nodes))
        weight = total_weight(nodes, "global")
    for node in nodes:
        c = node.model_counters("global")
        assert c["pushes_sent"] > 0 and c["pushes_received"] > 0 and c["acks"] > 0
        assert c["rejected"] == 0
    # push-sum mass: exactly one unit of weight per holder when nothing is in flight
    assert weight == pytest.approx(3.0, rel=1e-9)


async def test_local_scheme_shares_nothing(tmp_path: Path) -> None:
    spec = SwarmSpec(nodes=2, rounds=3, scheme="local", round_interval=0.0, shuffle_period=0.05)
    nodes = make_nodes(tmp_path, MemoryNetwork(), spec)
    assert all(not n.cores for n in nodes)
    async with running(nodes):
        pass
    assert all(n.progress.accuracy is not None for n in nodes)


async def test_semi_local_model_is_averaged_only_among_its_group(tmp_path: Path) -> None:
    # nodes 0 and 2 share a permutation (group 0), node 1 is alone in group 1
    spec = SwarmSpec(nodes=3, rounds=10, scheme="partial", semi_local=True,
                     permutations=(None, "8:9", None), round_interval=0.0,
                     shuffle_period=0.05)
    nodes = make_nodes(tmp_path, MemoryNetwork(), spec)
    assert set(nodes[0].cores) == {"global", "semi0"}
    assert set(nodes[1].cores) == {"global", "semi1"}
    async with running(nodes):
        pass
    assert nodes[0].model_counters("semi0")["pushes_received"] > 0
    assert nodes[2].model_counters("semi0")["pushes_received"] > 0
    # alone in its group: nobody to push to, nobody pushing to it
    assert nodes[1].model_counters("semi1")["pushes_received"] == 0
    assert nodes[1].model_counters("semi1")["pushes_sent"] == 0


async def test_admin_reports_and_checkpoint_resume(tmp_path: Path) -> None:
    spec = SwarmSpec(nodes=2, rounds=4, scheme="partial", round_interval=0.0,
                     shuffle_period=0.05)
    net = MemoryNetwork()
    nodes = make_nodes(tmp_path, net, spec)
    async with running(nodes):
        admin = nodes[0].admin
        status = admin.status()
        assert status.round == 4 and status.steps == 4 * spec.steps_per_round
        assert status.accuracy is not None and not status.isolated
        assert status.addresses == [ADDRESSES[0]] and status.id == nodes[0].identity.node_id.hex()
        models = {m.name: m for m in admin.models().models}
        assert models["global"].kind == "global" and models["global"].size > 0
        assert models["local"].kind == "local"
        # (the peer leaves the view while a shuffle with it is in flight)
        await wait_until(lambda: [p.address for p in admin.peers().view] == [ADDRESSES[1]])
        metrics = admin.metrics()
        assert metrics.counters["round"] == 4
        report = await admin.checkpoint()
        assert report.bytes > 0 and Path(report.path).is_file()
        sent = nodes[0].model_counters("global")["pushes_sent"]
    # a node restarted on the same data directory resumes identity, round and counters
    again = make_nodes(tmp_path, MemoryNetwork(), spec)[0]
    assert again.identity.node_id == nodes[0].identity.node_id
    assert again.progress.round == 4
    assert again.model_counters("global")["pushes_sent"] >= sent
    assert np.allclose(again.cores["global"].values, nodes[0].cores["global"].values)


async def test_masked_epochs_agree_pairs_fold_and_rejoin_the_average(
        tmp_path: Path) -> None:
    spec = SwarmSpec(nodes=3, rounds=12, scheme="full", round_interval=0.0,
                     shuffle_period=0.05, privacy="masked")
    nodes = make_nodes(tmp_path, MemoryNetwork(), spec)
    async with running(nodes):
        # the held-apart noise is folded in once it has mixed away
        await wait_until(lambda: not any(n.cores["global"].noisy for n in nodes))
        await wait_until(lambda: spread(nodes, "global") < 1e-3)
        await wait_until(lambda: all(n.cores["global"].outstanding == 0 for n in nodes))
        weight = total_weight(nodes, "global")
        values = [n.cores["global"].values for n in nodes]
        status = [n.admin.status().masking for n in nodes]
    for node, masking in zip(nodes, status, strict=True):
        c = node.model_counters("global")
        # masking epochs: no mask on a push; pairs agreed, their noise folded in
        assert c["masked_sent"] == 0 and c["pushes_sent"] > 0
        # no push refused for its values (the bound from the mask scale); the merge
        # guard, on by default, may clip-refuse a clean push after a fold: its own count
        assert c["unmasks"] >= 1 and c["rejected"] == c["guard_refused"]
        assert node.masking is not None and node.masking.epochs("global").epoch >= 1
        assert masking is not None and masking["global"]["folds"] >= 1
        # three holders: a receiver that is one of the two partners of a sender
        # faces one unknown pair only
        assert "3 nodes" in masking["global"]["warning"]
    assert weight == pytest.approx(3.0, rel=1e-9)
    # no mask is left in the trained values: they stay at parameter scale
    assert max(float(np.abs(v).max()) for v in values) < 10.0
    assert all(n.progress.accuracy > 0.3 for n in nodes)
