"""FedCurv: the maths (Fisher, penalty, gradient), the gossiped sums, and a node running it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import trio
import trio.testing

from gossip.simulator import ModelSpec, Simulation
from learner.strategies.fedcurv import (
    capped,
    contribute,
    estimated_pull,
    exact_penalty,
    fisher_diagonal,
    others,
    penalty,
    penalty_gradient,
    totals,
)
from p2p.config import NodeConfig, StrategyConfig
from p2p.runtime.assembly import build_learning
from p2p.runtime.train_runner import InlineRunner
from p2p.strategy.fedcurv import FedCurvStrategy, check_pushed
from p2p.testing import MemoryNetwork, fast_spec, memory_addresses, memory_node, running, wait_until

LIMIT = 300.0  # virtual seconds (the sums match within about 5)


def test_penalty_gradient_through_two_sums_matches_autograd_of_the_written_out_penalty(
) -> None:
    rng = np.random.default_rng(3)
    n, nodes, lam = 40, 5, 0.7
    fishers = [torch.from_numpy(rng.gamma(0.5, 1.0, n)) for _ in range(nodes)]
    anchors = [torch.from_numpy(rng.normal(0, 1, n)) for _ in range(nodes)]
    w = torch.from_numpy(rng.normal(0, 1, n)).requires_grad_(True)
    mine = 2  # node i: its own term is not in the penalty
    exact = exact_penalty(w, [f for j, f in enumerate(fishers) if j != mine],
                          [a for j, a in enumerate(anchors) if j != mine], lam)
    (expected,) = torch.autograd.grad(exact, w)
    total_f = sum(f.numpy() for f in fishers)
    total_fw = sum((f * a).numpy() for f, a in zip(fishers, anchors, strict=True))
    a, b = others(total_f, total_fw, fishers[mine].numpy(), (fishers[mine] * anchors[mine]).numpy())
    got = penalty_gradient(w.detach().numpy(), a, b, lam)
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-10, atol=1e-12)
    # the loss term the trainer adds has the same gradient (it differs by a constant)
    wt = w.detach().clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(penalty(wt, torch.from_numpy(a), torch.from_numpy(b), lam), wt)
    np.testing.assert_allclose(auto.numpy(), expected.numpy(), rtol=1e-10, atol=1e-12)
    constant = sum((f * x * x).sum() for j, (f, x) in enumerate(zip(fishers, anchors, strict=True))
                   if j != mine)
    assert float(penalty(w.detach(), torch.from_numpy(a), torch.from_numpy(b), lam) + lam * constant) \
        == pytest.approx(float(exact.detach()), rel=1e-10)


def test_fisher_diagonal_is_the_mean_squared_per_sample_gradient() -> None:
    learning = build_learning(NodeConfig())
    net, data = learning.network, learning.data
    fisher = fisher_diagonal(net, data.train_x, data.train_y, samples=20,
                             rng=np.random.default_rng(0))
    pick = np.random.default_rng(0).choice(len(data.train_y), size=20, replace=False)
    looped = torch.zeros_like(net.flat, dtype=torch.float64)
    for i in pick:
        net.zero_grad()
        loss = torch.nn.functional.cross_entropy(
            net(torch.from_numpy(data.train_x[i:i + 1]).float()),
            torch.from_numpy(data.train_y[i:i + 1]).long())
        loss.backward()
        assert net.flat.grad is not None
        looped += net.flat.grad.double() ** 2
    np.testing.assert_allclose(fisher, looped.numpy() / 20, rtol=1e-4, atol=1e-9)
    assert fisher.shape == net.flat.shape and (fisher >= 0).all() and fisher.max() > 0


def test_others_drops_coordinates_whose_sum_is_not_yet_positive() -> None:
    a, b = others(np.array([3.0, 1.0]), np.array([6.0, 5.0]), np.array([1.0, 1.5]),
                  np.array([2.0, 1.0]))
    assert a.tolist() == [2.0, 0.0] and b.tolist() == [4.0, 0.0]
    assert totals(np.array([2.0, 0.0]), np.array([1.0])) is None  # no count yet


def test_capped_keeps_the_target_drops_it_beyond_the_bound_and_limits_the_stiffness() -> None:
    a, b = capped(np.array([1e-9, 2.0, 0.1, 0.0]), np.array([1.0, 2.0, -0.2, 0.0]),
                  lam=10.0, lr=0.1, bound=3.0)
    # stiffness lam * a at most 1 / (4 lr) = 2.5: a <= 0.25; targets b / a kept (1, -2)
    # (the pull alone then moves an SGD step at most halfway to the target) ...
    np.testing.assert_allclose(a, [0.0, 0.25, 0.1, 0.0])
    np.testing.assert_allclose(b[1:], [0.25, -0.2, 0.0])
    w = 5.0  # one SGD step on the capped pull: 2 lam a (w - t), target t = 1
    step = w - 0.1 * penalty_gradient(np.array([w]), a[1:2], b[1:2], 10.0)[0]
    assert step == pytest.approx(3.0)  # halfway from 5 to 1
    # ... but a target far beyond the bound (1e9) gets no pull at all
    assert b[0] == 0.0


def test_push_summed_contributions_give_the_exact_sums_after_changes() -> None:
    """Contributions changed between exchanges (as Fisher estimates are) still sum exactly."""
    rng = np.random.default_rng(7)
    nodes, n = 8, 30
    own = [rng.gamma(0.5, 1.0, n) for _ in range(nodes)]
    start = np.zeros((nodes, n + 1))
    start[0, -1] = 1.0  # the counter
    sim = Simulation([ModelSpec("fisher", tuple(range(nodes)), start)], seed=1,
                     encoding="f64", delta_encoding="f64")
    contributed = np.zeros((nodes, n))
    for step in range(3):  # three estimates, mixing a few rounds between them
        for i in range(nodes):
            new = own[i] * (step + 1)
            contribute(sim.cores[(i, "fisher")], np.append(new - contributed[i], 0.0))
            contributed[i] = new
        sim.run(3)
    sim.run(200)
    sim.quiesce()
    exact = contributed.sum(axis=0)
    for i in range(nodes):
        found = totals(sim.cores[(i, "fisher")].values, np.zeros(n))
        assert found is not None
        total_f, _, count = found
        assert count == pytest.approx(nodes, rel=1e-6)
        np.testing.assert_allclose(total_f, exact, rtol=1e-6)


async def test_fedcurv_nodes_gossip_the_exact_sums_and_train_with_the_penalty(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    spec = fast_spec(nodes=3, rounds=4, steps_per_round=2, shuffle_period=0.5)
    net = MemoryNetwork()
    addresses = memory_addresses(3)
    strategy = StrategyConfig(name="fedcurv", fedcurv_lambda=10.0, fedcurv_every=2,
                              fedcurv_samples=32)
    nodes = [memory_node(net, tmp_path / f"n{i}", spec, i, addresses[i],
                         bootstrap=addresses[:1] if i else (), strategy=strategy,
                         train_runner=InlineRunner()) for i in range(3)]
    fedcurv = [n.strategy for n in nodes]
    assert all(isinstance(s, FedCurvStrategy) for s in fedcurv)
    model = "global"

    def exact() -> tuple[np.ndarray, np.ndarray]:
        sums = [s.own_sums(model) for s in fedcurv]  # type: ignore[attr-defined]
        return sum(f for f, _ in sums), sum(fw for _, fw in sums)

    def close(got: np.ndarray, want: np.ndarray) -> bool:
        """Within 1e-6 of the largest entry (many entries are exactly 0: pixels that are
        0 in every digit give no gradient)."""
        return bool(np.abs(got - want).max() <= 1e-6 * np.abs(want).max())

    def matched() -> bool:
        want_f, want_fw = exact()
        for s in fedcurv:
            got = s.gossiped_totals(model)  # type: ignore[attr-defined]
            if got is None or not close(got[0], want_f) or not close(got[1], want_fw) \
                    or abs(got[2] - 3) > 3e-6:
                return False
        return True

    async with running(nodes):
        with trio.fail_after(LIMIT):
            await wait_until(lambda: all(n.progress.finished for n in nodes), timeout=LIMIT)
            # training stopped: the contributions are fixed, gossip goes on
            await wait_until(matched, timeout=LIMIT)
        status = nodes[1].strategy_status()
    for node, s in zip(nodes, fedcurv, strict=True):
        assert isinstance(s, FedCurvStrategy)
        assert s.estimates >= 2  # rounds 1 (first) and 2, 4
        f, _ = s.own_sums(model)
        assert f.max() > 0
        assert node.learning.trainer.loss_term is not None
    assert status["name"] == "fedcurv" and status["fisher_estimates"] >= 2
    assert status["nodes_estimate"] == pytest.approx(3, rel=1e-3)


def test_label_skew_gives_disjoint_shards_with_few_classes_each() -> None:
    from learner.data import DataSpec, dirichlet_shards, load_node_data

    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), 50)
    pool = rng.permutation(labels.size)
    shards = dirichlet_shards(pool, labels[pool], 16, 0.3, np.random.default_rng(1))
    joined = np.concatenate(shards)
    assert sorted(joined.tolist()) == sorted(pool.tolist())  # disjoint, the whole pool
    # skewed: a node's most common class is far above the IID share of 10 %
    top = [np.bincount(labels[s], minlength=10).max() / s.size for s in shards]
    assert np.median(top) > 0.3
    a = load_node_data(DataSpec(num_nodes=16, node_index=3, label_skew=0.3))
    b = load_node_data(DataSpec(num_nodes=16, node_index=3, label_skew=0.3))
    assert np.array_equal(a.train_y, b.train_y)  # seeded: every node computes the same split


def test_estimated_pull_keeps_stiffness_non_negative_and_target_convex_after_a_change() -> None:
    """A contribution moves one node's estimate at once but not its count slot; the
    pull from ratios stays right where ``total - own`` went wrong."""
    rng = np.random.default_rng(5)
    nodes, n = 6, 20
    own = [rng.gamma(0.5, 1.0, n) for _ in range(nodes)]
    anchors = [rng.normal(0, 1, n) for _ in range(nodes)]
    start = np.zeros((nodes, 2 * n + 1))
    start[0, -1] = 1.0
    sim = Simulation([ModelSpec("fc", tuple(range(nodes)), start)], seed=2,
                     encoding="f64", delta_encoding="f64")
    for i in range(nodes):
        contribute(sim.cores[(i, "fc")], np.concatenate([own[i], own[i] * anchors[i], [0.0]]))
    sim.run(200)
    sim.quiesce()
    core = sim.cores[(3, "fc")]
    mixed = core.values.copy()
    lo = np.min(anchors, axis=0) - 1e-9
    hi = np.max(anchors, axis=0) + 1e-9

    def pulls(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        found = estimated_pull(np.append(v[:n], v[-1]), v[n:2 * n])
        assert found is not None and found[2] == pytest.approx(nodes, rel=1e-6)
        return found[0], found[1]

    # node 3's new estimate doubles its Fisher: its estimate jumps at once by F_3 /
    # weight, its count slot not at all; the target stays a convex mean of the anchors
    contribute(core, np.concatenate([own[3], own[3] * anchors[3], [0.0]]))
    a, b = pulls(core.values)
    assert (a > 0).all()
    assert ((b / a >= lo) & (b / a <= hi)).all()
    # node 3's new estimate is a tenth of its old one: A never goes negative (no
    # unbounded-below penalty), where total - own did on this very state
    core.set_values(mixed)
    contribute(core, np.concatenate([-0.9 * own[3], -0.9 * own[3] * anchors[3], [0.0]]))
    v = core.values
    a, _ = pulls(v)
    assert (a >= 0).all()
    total_f, _, _ = totals(np.append(v[:n], v[-1]), v[n:2 * n])  # type: ignore[misc]
    assert ((total_f - 0.1 * own[3]) < 0).any()


def test_pushed_values_an_honest_holder_cannot_have_are_refused() -> None:
    from gossip import Push, RejectedPush
    from gossip.compression import encode
    from p2p.runtime.strategy_host import CheckedPushSum

    n = 3
    fp = b"f" * 32
    core = CheckedPushSum(fp, np.zeros(2 * n + 1), check=check_pushed, exchange="push",
                          encoding="f64", delta_encoding="f64")

    def push(values: list[float], push_id: int) -> Push:
        return Push(fp, push_id, encode(np.array(values), "f64"), 0.5)

    honest = [1.0, 0.5, 0.0, 0.3, -0.2, 0.0, 0.25]
    negative = [1.0, -0.5, 0.0, 0.3, -0.2, 0.0, 0.25]
    counted_five = [1.0, 0.5, 0.0, 0.3, -0.2, 0.0, 5.0]
    for i, bad in enumerate((negative, counted_five), start=1):
        with pytest.raises(RejectedPush):
            core.on_push(b"p" * 32, push(bad, i), 0.0)
    assert core.values.tolist() == [0.0] * (2 * n + 1)  # nothing merged
    assert core.counters.rejected == 2
    core.on_push(b"p" * 32, push(honest, 3), 0.0)
    assert core.values[-1] > 0  # an honest push merges


async def test_fedcurv_without_a_shared_model_estimates_nothing() -> None:
    from types import SimpleNamespace

    s = FedCurvStrategy(1.0, 1, 8, counter=True, seed=0, lr=0.1, max_nodes=8.0)
    s.install(SimpleNamespace(cores={}, learning=SimpleNamespace(network=None)))
    s.after_round()
    with trio.fail_after(1):
        await s.run()  # returns at once: no model, no Fisher estimate
    assert s.estimates == 0 and s.loss_term() is None


def test_fedcurv_warns_once_when_no_node_count_arrives(caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    """The counter (node 0) does not hold the model: the count slot stays 0."""
    import torch as _torch

    from gossip import PushSum
    from p2p.strategy import fedcurv as runtime

    n = 4
    s = FedCurvStrategy(1.0, 5, 8, counter=False, seed=0, lr=0.1, max_nodes=8.0)
    s._host = SimpleHost()  # type: ignore[assignment]
    s._models["m"] = runtime._ModelSums(
        _torch.arange(n), PushSum(b"c" * 32, np.zeros(2 * n + 1)), np.zeros(n), np.zeros(n),
        np.zeros(n), _torch.zeros(n), _torch.zeros(n))
    with caplog.at_level("WARNING", logger="p2p.strategy.fedcurv"):
        for _ in range(runtime.COUNT_WAIT_ROUNDS - 1):
            s.after_round()
        assert not s.count_missing and not caplog.records
        for _ in range(5):
            s.after_round()
    assert s.count_missing and s.status()["count_missing"] is True
    assert len([r for r in caplog.records if "no node count" in r.getMessage()]) == 1


class SimpleHost:
    """What after_round uses of a host."""

    def rounds_done(self) -> int:
        return 0
