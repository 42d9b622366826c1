"""The graph strategy on real nodes (memory network, virtual clock): wake-ups, weights at both
ends of an edge, mixing, noise accounting, and bad input that leaves the node running."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import trio
import trio.testing

from p2p.config import ConfigError, NodeConfig, StrategyConfig
from p2p.runtime.train_runner import InlineRunner
from p2p.strategies.graph.messages import GraphAck, GraphPull, GraphReply, GraphWeight
from p2p.strategies.graph.node import GraphStrategy, build
from p2p.testing import MemoryNetwork, fast_spec, memory_addresses, memory_node, running, wait_until
from p2p.wire.handshake import PeerInfo
from p2p.wire.messages import Error

LIMIT = 10_000.0  # virtual seconds: generous, free under the autojump clock
PUBLIC = 40


def test_the_config_refuses_partial_models_with_the_graph() -> None:
    from learner.spec import PartialModelSpec

    model = PartialModelSpec("global", (64, 48, 32, 10))
    with pytest.raises(ConfigError, match='"graph" mixes whole models') as err:
        NodeConfig(strategy=StrategyConfig(name="graph"), models=(model,))
    assert err.value.key == "strategy.name"


def test_build_reads_the_keys() -> None:
    strategy = build(NodeConfig(strategy=StrategyConfig(name="graph", graph_kappa=2,
                                                        graph_epsilon=0.5, graph_beta=0.02)))
    assert strategy.params.kappa == 2 and strategy.params.beta == 0.02
    assert strategy.ledger.epsilon == 0.5
    assert math.isinf(build(NodeConfig(strategy=StrategyConfig(name="graph"))).ledger.epsilon)


def _peer(n: int) -> PeerInfo:
    return PeerInfo(bytes([n]) * 32, f"mem:{n}", frozenset())


async def test_weights_come_only_from_known_peers_clamped_and_edges_stay_bounded() -> None:
    from p2p.strategies.graph.maths import GraphParams
    from p2p.strategies.graph.node import GraphSettings

    g = GraphStrategy(GraphSettings(GraphParams(max_neighbours=2, max_edges=3)))
    bound = g.params.max_edge_weight
    # a peer never sampled and holding no edge: refused, even in range
    answer = await g._serve_weight(_peer(1), GraphWeight(g._digest, 1.0))
    assert isinstance(answer, Error) and answer.code == "graph_unknown_peer"
    assert g.graph.weights == {} and g.rejected == 1
    # peers sampled in a recent wake-up may set their edge, clamped to the update's bound
    g._recent.append(frozenset(_peer(n).node_id for n in range(1, 11)))
    answer = await g._serve_weight(_peer(1), GraphWeight(g._digest, 10 * bound))
    assert answer == GraphAck(bound) and g.graph.weight(_peer(1).node_id) == bound
    for n in range(2, 11):
        await g._serve_weight(_peer(n), GraphWeight(g._digest, float(n)))
        assert len(g.graph.weights) <= 3
    assert set(g.graph.weights) == {_peer(n).node_id for n in (1, 9, 10)}
    # once the sampling is old, only peers holding an edge may still set it
    for _ in range(8):
        g._recent.append(frozenset())
    assert isinstance(await g._serve_weight(_peer(9), GraphWeight(g._digest, 0.5)), GraphAck)
    answer = await g._serve_weight(_peer(2), GraphWeight(g._digest, 0.5))
    assert isinstance(answer, Error) and answer.code == "graph_unknown_peer"


def test_the_config_checks_the_graph_keys_and_frame_size() -> None:
    from p2p.config import DataConfig, LimitsConfig, NetworkConfig, config_from_dict
    from p2p.config.schema import push_frame_bytes
    from p2p.runtime.node_transport import node_frame_limit

    with pytest.raises(ConfigError, match="graph_period"):
        config_from_dict({"strategy": {"name": "graph", "graph_period": 0.001}})
    with pytest.raises(ConfigError, match="public_size is 0") as err:
        NodeConfig(strategy=StrategyConfig(name="graph"), data=DataConfig(public_size=0))
    assert err.value.key == "data.public_size"
    with pytest.raises(ConfigError, match="fewer than strategy.graph_neighbours"):
        NodeConfig(strategy=StrategyConfig(name="graph", graph_neighbours=8, graph_max_edges=4))
    config = NodeConfig(strategy=StrategyConfig(name="graph"))
    parameters = config.layout().total_parameters
    with pytest.raises(ConfigError, match="graph.* reply of the whole network") as err:
        NodeConfig(strategy=StrategyConfig(name="graph"),
                   limits=LimitsConfig(max_frame_size=4 * parameters))
    assert err.value.key == "limits.max_frame_size"
    # the node's frame limit carries a reply of a whole network above 1 MiB of float32
    # (it declares no [[models]], which alone would leave the 1 MiB floor)
    big = NodeConfig(strategy=StrategyConfig(name="graph"),
                     network=NetworkConfig(layers=(64, 600, 400, 10)))
    parameters = big.layout().total_parameters
    assert 4 * parameters > 1024 * 1024
    assert node_frame_limit(big) >= push_frame_bytes(parameters)


async def test_nodes_learn_weights_mix_and_survive_bad_input(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    spec = fast_spec(nodes=3, rounds=12, steps_per_round=1, scheme="local", public_size=PUBLIC)
    net = MemoryNetwork()
    addresses = memory_addresses(3)
    strategy = StrategyConfig(name="graph", graph_kappa=2, graph_period=0.05,
                              graph_epsilon=2.0, graph_epsilon_budget=40.0)
    nodes = [memory_node(net, tmp_path / f"n{i}", spec, i, addresses[i],
                         bootstrap=addresses[:1] if i else (), strategy=strategy,
                         train_runner=InlineRunner())
             for i in range(3)]
    graphs = [n.strategy for n in nodes]
    assert all(isinstance(g, GraphStrategy) for g in graphs)
    # one common initialisation on every node
    first = nodes[0].learning.network.flat.detach().numpy().copy()
    for n in nodes[1:]:
        np.testing.assert_array_equal(n.learning.network.flat.detach().numpy(), first)
    async with running(nodes):
        with trio.fail_after(LIMIT):
            await wait_until(lambda: all(g.wakeups >= 5 for g in graphs),  # type: ignore[attr-defined]
                             timeout=LIMIT)
            g0 = graphs[0]
            assert isinstance(g0, GraphStrategy)
            bad_peer = PeerInfo(b"\x07" * 32, "mem:bad", frozenset())
            # a NaN weight and a pull for another network: clear errors, nothing taken
            answer = await g0._serve_weight(bad_peer, GraphWeight(g0._digest, float("nan")))
            assert isinstance(answer, Error) and "weight" in answer.reason
            assert g0.graph.weight(bad_peer.node_id) == 0.0
            # an in-range weight from a peer never sampled: refused, the heaviest edges
            # (those the mixing uses) unchanged
            heavy = g0.graph.neighbours(g0.params.max_neighbours)
            answer = await g0._serve_weight(bad_peer, GraphWeight(g0._digest, 5.0))
            assert isinstance(answer, Error) and answer.code == "graph_unknown_peer"
            assert bad_peer.node_id not in g0.graph.weights
            assert g0.graph.neighbours(g0.params.max_neighbours) == heavy
            answer = await g0._serve_pull(bad_peer, GraphPull(b"\x00" * 16))
            assert isinstance(answer, Error) and answer.code == "graph_mismatch"
            reply = await g0._serve_pull(bad_peer, GraphPull(g0._digest))
            assert isinstance(reply, GraphReply) and np.isfinite(reply.model).all()
            before = g0.wakeups
            await wait_until(lambda: g0.wakeups >= before + 3, timeout=LIMIT)  # still waking
            await wait_until(lambda: all(n.progress.finished for n in nodes), timeout=LIMIT)
            # every node spent its budget: no edge update is still on its way to a peer
            await wait_until(lambda: all(g.budget_reached for g in graphs),  # type: ignore[attr-defined]
                             timeout=LIMIT)
        statuses = [n.admin.status().strategy for n in nodes]
    ids = [n.identity.node_id for n in nodes]
    for i, (node, g, status) in enumerate(zip(nodes, graphs, statuses, strict=True)):
        assert isinstance(g, GraphStrategy) and status is not None
        assert node.cores == {}  # nothing push-summed
        assert g.graph.degree > 0 and ids[i] not in g.graph.weights
        # the graph is undirected: once no update is in flight, both ends of an edge hold
        # the same weight (the last update wins, sent as the float it was set to)
        for j, other in enumerate(graphs):
            if j != i:
                assert isinstance(other, GraphStrategy)
                assert g.graph.weight(ids[j]) == pytest.approx(other.graph.weight(ids[i]),
                                                               rel=1e-9)
        assert status["name"] == "graph" and status["wakeups"] == g.wakeups
        assert status["epsilon_spent"] == pytest.approx(2.0 * g.ledger.releases)
        assert g.ledger.spent <= 40.0 + 1e-9
        assert status["laplace_scale"] == pytest.approx(1.0 / (2.0 * node.learning.data.train_y.size))
        assert 0 < sum(status["top_weights"].values()) <= 1.0 + 1e-9  # type: ignore[attr-defined]
    # the models moved apart from the common start (training, mixing, noise)
    assert not np.array_equal(nodes[0].learning.network.flat.detach().numpy(), first)
