"""The collaboration-graph maths (p2p/strategies/graph/maths.py): objective, step,
mixing, Laplace noise and its accounting."""

from __future__ import annotations

import math

import numpy as np
import pytest

from p2p.strategies.graph.maths import (
    CollabGraph,
    GraphError,
    GraphParams,
    PeerView,
    PrivacyLedger,
    block_objective,
    edge_gradient,
    graph_objective,
    laplace_scale,
    mix_models,
    output_distance,
    release_noise,
)

PARAMS = GraphParams(mu=1.0, beta=0.05, delta=0.1, kappa=3)


def _random_problem(seed: int, n: int = 6) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.0, 2.0, (n, n))
    w = np.triu(w, 1)
    w = w + w.T
    z = rng.uniform(0.0, 1.0, (n, n))
    z = np.triu(z, 1)
    z = z + z.T
    return w, z, rng.uniform(0.0, 2.0, n), rng.uniform(0.1, 1.0, n)


def _views(i: int, block: list[int], w: np.ndarray, z: np.ndarray, losses: np.ndarray,
           conf: np.ndarray) -> dict[int, PeerView]:
    return {j: PeerView(distance=float(z[i, j]), loss=float(losses[j]),
                        confidence=float(conf[j]), degree=float(w[j].sum()),
                        weight_back=float(w[j, i])) for j in block}


def test_edge_gradient_matches_finite_differences_of_the_whole_objective() -> None:
    w, z, losses, conf = _random_problem(1)
    i, block = 0, [2, 3, 5]
    views = list(_views(i, block, w, z, losses, conf).values())
    own = w[i, block].copy()
    other = w[i].sum() - own.sum()
    grad = edge_gradient(own, other, float(losses[i]), float(conf[i]), views, PARAMS)
    for k, j in enumerate(block):
        h = 1e-6
        plus, minus = w.copy(), w.copy()
        plus[i, j] = plus[j, i] = w[i, j] + h
        minus[i, j] = minus[j, i] = w[i, j] - h
        numeric = (graph_objective(plus, z, losses, conf, PARAMS)
                   - graph_objective(minus, z, losses, conf, PARAMS)) / (2 * h)
        assert grad[k] == pytest.approx(numeric, rel=1e-5, abs=1e-7)


def test_an_update_lowers_the_objective_by_the_block_objective_change() -> None:
    w, z, losses, conf = _random_problem(2)
    i, block = 1, [0, 4, 5]
    graph: CollabGraph[int] = CollabGraph(PARAMS, {j: float(w[i, j]) for j in range(6) if j != i})
    views = _views(i, block, w, z, losses, conf)
    before = graph_objective(w, z, losses, conf, PARAMS)
    old_block = w[i, block].copy()
    other = w[i].sum() - old_block.sum()
    new = graph.update(views, float(losses[i]), float(conf[i]))
    after_w = w.copy()
    for j, value in new.items():
        after_w[i, j] = after_w[j, i] = value
    after = graph_objective(after_w, z, losses, conf, PARAMS)
    assert after < before
    vs = list(views.values())
    block_change = (block_objective(np.array([new[j] for j in block]), other, float(losses[i]),
                                    float(conf[i]), vs, PARAMS)
                    - block_objective(old_block, other, float(losses[i]), float(conf[i]), vs,
                                      PARAMS))
    assert after - before == pytest.approx(block_change, rel=1e-9, abs=1e-12)
    assert graph.degree == pytest.approx(after_w[i].sum())


def test_repeated_updates_reach_the_blocks_minimum_and_favour_the_close_peer() -> None:
    # one node, three peers; each far peer already has a degree of 20 elsewhere (its own
    # partner), the near one none: the log barrier does not prop the far edges up
    distances = {"near": 0.02, "far1": 0.6, "far2": 0.7}
    elsewhere = {"near": 0.0, "far1": 20.0, "far2": 20.0}
    graph: CollabGraph[str] = CollabGraph(GraphParams(mu=1.0, beta=0.01, delta=0.1, kappa=3))
    for _ in range(300):
        views = {p: PeerView(distance=d, loss=0.1, confidence=0.1,
                             degree=elsewhere[p] + graph.weight(p),
                             weight_back=graph.weight(p)) for p, d in distances.items()}
        graph.update(views, 0.1, 0.1)
    assert graph.share("near") > 0.8
    assert graph.weight("near") > graph.weight("far1") >= graph.weight("far2")
    # KKT: zero gradient on positive weights, non-negative on zero ones
    views = [PeerView(distance=d, loss=0.1, confidence=0.1, degree=elsewhere[p] + graph.weight(p),
                      weight_back=graph.weight(p)) for p, d in distances.items()]
    block = np.array([graph.weight(p) for p in distances])
    grad = edge_gradient(block, 0.0, 0.1, 0.1, views, graph.params)
    for value, g in zip(block, grad, strict=True):
        if value > 0:
            assert abs(g) < 1e-4
        else:
            assert g >= -1e-9


def test_a_close_peer_gains_weight_from_a_single_step_more_than_a_far_one() -> None:
    graph: CollabGraph[str] = CollabGraph(PARAMS, {"a": 1.0, "b": 1.0})
    views = {p: PeerView(distance=d, loss=0.2, confidence=0.5, degree=2.0, weight_back=1.0)
             for p, d in (("a", 0.0), ("b", 2.0))}
    new = graph.update(views, 0.2, 0.5)
    assert new["a"] > 1.0 > new["b"]


def test_no_update_exceeds_the_weight_bound_and_claims_above_it_are_clamped() -> None:
    params = GraphParams(mu=1.0, beta=0.002, delta=0.1, kappa=3)
    bound = params.max_edge_weight
    w_star = bound - 1.0 / (2.0 * math.sqrt(0.002))
    assert 0.002 * w_star * (w_star + 0.1) == pytest.approx(1.0)
    rng = np.random.default_rng(3)
    graph: CollabGraph[int] = CollabGraph(params)
    top = 0.0
    for _ in range(300):  # identical, zero-loss peers: the barrier pulls weights up hardest
        peers = {int(j): PeerView(distance=0.0, loss=0.0, confidence=1.0,
                                  degree=float(rng.uniform(0.0, 1.0)), weight_back=0.0)
                 for j in rng.choice(10, 3, replace=False)}
        new = graph.update(peers, 0.0, 1.0)
        top = max(top, *new.values())
    assert bound / 4 < top <= bound  # a bound near what honest updates reach
    graph.set_weight(99, 1e6)
    assert graph.weight(99) == bound


def test_the_graph_keeps_at_most_max_edges_dropping_the_lightest() -> None:
    graph: CollabGraph[int] = CollabGraph(GraphParams(max_neighbours=2, max_edges=3))
    for peer, weight in enumerate((0.5, 2.0, 1.0, 3.0, 0.1)):
        graph.set_weight(peer, weight)
        assert len(graph.weights) <= 3
    assert graph.weights == {1: 2.0, 2: 1.0, 3: 3.0}
    with pytest.raises(GraphError, match="max_edges"):
        GraphParams(max_neighbours=4, max_edges=3)


def test_bad_inputs_are_named() -> None:
    with pytest.raises(GraphError, match="peer distance"):
        PeerView(distance=float("nan"), loss=0.0, confidence=1.0, degree=0.0)
    with pytest.raises(GraphError, match="peer confidence"):
        PeerView(distance=0.0, loss=0.0, confidence=0.0, degree=0.0)
    with pytest.raises(GraphError, match="graph beta"):
        GraphParams(beta=0.0)
    with pytest.raises(GraphError, match="output_distance"):
        output_distance(np.zeros((3, 2)), np.zeros((3, 3)))
    with pytest.raises(GraphError, match="NaN"):
        output_distance(np.full((3, 2), np.nan), np.zeros((3, 2)))


def test_mixing_is_the_convex_combination_of_the_model_step() -> None:
    params = GraphParams(mu=1.0, local_lipschitz=1.0)
    own = np.zeros(3, np.float32)
    models = {1: np.ones(3, np.float32), 2: np.full(3, 4.0, np.float32), 3: np.full(3, 9.0, np.float32)}
    weights = {1: 3.0, 2: 1.0}  # peer 3 has no weight: ignored
    mixed = mix_models(own, models, weights, 1.0, params)  # a = 1 / (1 + 1) = 0.5
    np.testing.assert_allclose(mixed, 0.5 * (3 * 1 + 1 * 4) / 4)
    assert mixed.dtype == np.float32
    np.testing.assert_array_equal(mix_models(own, {}, {}, 1.0, params), own)
    with pytest.raises(GraphError, match="shape"):
        mix_models(own, {1: np.ones(4)}, {1: 1.0}, 1.0, params)
    with pytest.raises(GraphError, match="NaN"):
        mix_models(own, {1: np.array([0.0, np.nan, 0.0])}, {1: 1.0}, 1.0, params)


def test_noise_scale_follows_epsilon_and_shard_size() -> None:
    assert laplace_scale(0.5, 2.0, 100) == pytest.approx(2.0 / (0.5 * 100))
    assert laplace_scale(1.0, 2.0, 100) == pytest.approx(laplace_scale(0.5, 2.0, 100) / 2)
    assert laplace_scale(math.inf, 2.0, 100) == 0.0
    with pytest.raises(GraphError, match="epsilon"):
        laplace_scale(0.0, 1.0, 10)
    params = GraphParams(mu=1.0, local_lipschitz=1.0)
    rng = np.random.default_rng(0)
    noise = release_noise(rng, 200_000, 0.5, 1.0, 10, 1.0, params)
    # Laplace(0, b): E|x| = b; the step c / (mu + c L) = 0.5 scales it
    expected = 0.5 * laplace_scale(0.5, 1.0, 10)
    assert float(np.mean(np.abs(noise))) == pytest.approx(expected, rel=0.02)
    assert not release_noise(rng, 10, math.inf, 1.0, 10, 1.0, params).any()


def test_the_ledger_counts_releases_and_keeps_the_budget() -> None:
    ledger = PrivacyLedger(0.25, budget=1.0)
    assert ledger.spent == 0.0
    for _ in range(4):
        assert ledger.allows()
        ledger.record()
    assert ledger.spent == pytest.approx(1.0)
    assert not ledger.allows()
    assert PrivacyLedger(math.inf).noisy is False
    with pytest.raises(GraphError, match="epsilon"):
        PrivacyLedger(-1.0)
