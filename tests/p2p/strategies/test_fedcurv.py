"""FedCurv: the maths (Fisher, penalty, gradient), the gossiped sums, and a node running it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch
import trio
import trio.testing
from lab.sim.pushsum import ModelSpec, Simulation

from gossip import Push
from p2p.config import NodeConfig, StrategyConfig
from p2p.runtime.assembly import build_learning
from p2p.runtime.train_runner import InlineRunner
from p2p.strategies.fedcurv.maths import (
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
from p2p.strategies.fedcurv.node import (
    GENERATION_MODULUS,
    FedCurvStrategy,
    check_pushed,
    start_generation,
    vector_of,
)
from p2p.testing import MemoryNetwork, fast_spec, memory_addresses, memory_node, running, wait_until

if TYPE_CHECKING:
    from gossip import PushSum

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
    from p2p.strategies import OutOfStep

    n = 3
    fp = b"f" * 32
    core = CheckedPushSum(fp, np.zeros(2 * n + 2), check=lambda v: check_pushed(v, 0),
                          exchange="push", encoding="f64", delta_encoding="f64")

    def push(values: list[float], push_id: int) -> Push:
        return Push(fp, push_id, encode(np.array(values), "f64"), 0.5)

    honest = [1.0, 0.5, 0.0, 0.3, -0.2, 0.0, 0.25, 0.0]
    negative = [1.0, -0.5, 0.0, 0.3, -0.2, 0.0, 0.25, 0.0]
    counted_five = [1.0, 0.5, 0.0, 0.3, -0.2, 0.0, 5.0, 0.0]
    next_generation = [1.0, 0.5, 0.0, 0.3, -0.2, 0.0, 0.25, 1.0]
    for i, bad in enumerate((negative, counted_five, next_generation), start=1):
        with pytest.raises(RejectedPush):
            core.on_push(b"p" * 32, push(bad, i), 0.0)
    assert core.values.tolist() == [0.0] * (2 * n + 2)  # nothing merged
    assert core.counters.rejected == 3
    core.on_push(b"p" * 32, push(honest, 4), 0.0)
    assert core.values[-2] > 0  # an honest push merges
    # another generation is an honest node out of step, not an offence
    assert isinstance(check_pushed(np.array(next_generation), 0), OutOfStep)
    assert not isinstance(check_pushed(np.array(negative), 0), OutOfStep)
    # rounding of non-negative mixes is no negative Fisher entry
    assert check_pushed(np.array([1.0, -1e-12, 0.0, 0.3, 0.0, 0.0, 0.25, 0.0]), 0) is None


async def test_fedcurv_without_a_shared_model_estimates_nothing() -> None:
    from types import SimpleNamespace

    s = FedCurvStrategy(1.0, 1, 8, counter=True, seed=0, lr=0.1, max_nodes=8.0)
    s.install(SimpleNamespace(cores={}, learning=SimpleNamespace(network=None),
                              rounds_done=lambda: 0))
    s.after_round()
    with trio.fail_after(1):
        await s.run()  # returns at once: no model, no Fisher estimate
    assert s.estimates == 0 and s.loss_term() is None


def test_fedcurv_warns_once_when_no_node_count_arrives(caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    """The counter (node 0) does not hold the model: the count slot stays 0."""
    import torch as _torch

    from gossip import PushSum
    from p2p.strategies.fedcurv import node as runtime

    n = 4
    s = FedCurvStrategy(1.0, 5, 8, counter=False, seed=0, lr=0.1, max_nodes=8.0)
    s._host = SimpleHost()  # type: ignore[assignment]
    s._models["m"] = runtime._ModelSums(
        _torch.arange(n), PushSum(b"c" * 32, np.zeros(2 * n + 2)), np.zeros(n), np.zeros(n),
        np.zeros(n), _torch.zeros(n), _torch.zeros(n))
    with caplog.at_level("WARNING", logger="p2p.strategies.fedcurv.node"):
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


def _responder_scenario(make: Callable[[np.ndarray], PushSum]
                        ) -> tuple[np.ndarray, np.ndarray, float]:
    """Node x pushes to y; before y's ack comes back, three push-pull requests reach x
    (values 0 where x has 1): x's values, and the holders' total mass and weight."""
    x, y = make(np.array([1.0, 0.0])), make(np.array([0.0, 1.0]))
    others = [make(np.array([0.0, 1.0])) for _ in range(3)]
    ((_, out),) = x.make_pushes([b"y" * 32], 0.0)
    for k, other in enumerate(others):
        ((_, request),) = other.make_pushes([b"x" * 32], 0.0)
        other.on_ack(b"x" * 32, x.on_push(bytes([k]) * 32, request, 0.0), 0.0)
    x.on_ack(b"y" * 32, y.on_push(b"x" * 32, out, 0.0), 0.0)
    cores = [x, y, *others]
    return (x.values, sum((c.weight * c.values for c in cores), np.zeros(2)),
            sum(c.weight for c in cores))


def test_a_checked_core_replies_from_its_free_mass_so_its_values_stay_non_negative() -> None:
    """The plain reply rule gives away shares of the whole estimate while the node's own
    push is in flight; that push's ack then takes out more of a coordinate than is left
    (honest FedCurv Fisher entries went negative so, and their pushes were refused)."""
    from gossip import PushSum
    from p2p.runtime.strategy_host import CheckedPushSum

    rng = np.random.default_rng(0)
    plain, _, _ = _responder_scenario(
        lambda v: PushSum(b"f" * 32, v, encoding="f64", delta_encoding="f64", rng=rng))
    assert plain[0] < -0.05  # the failure the checked core must not have
    values, mass, weight = _responder_scenario(
        lambda v: CheckedPushSum(b"f" * 32, v, check=lambda _: None, encoding="f64",
                                 delta_encoding="f64", rng=rng))
    assert values.min() >= 0.0
    np.testing.assert_allclose(mass, [1.0, 4.0], rtol=1e-12)  # mass stays exact
    assert weight == pytest.approx(5.0, rel=1e-12)


def test_renewed_generations_keep_every_target_a_convex_mean_where_edited_sums_did_not(
) -> None:
    """The cause of FedCurv's divergence at lambda >= 1: a new Fisher estimate moved the
    node's contribution by (new - old) while the old one had mostly left it, so its
    est(F w) / est(F) extrapolated far beyond every anchor. Renewed generations (a
    fresh push-sum of fixed non-negative contributions) keep it a convex mean at every
    node after every exchange."""
    from p2p.runtime.strategy_host import CheckedPushSum

    rng = np.random.default_rng(11)
    nodes, n, estimates = 8, 16, 4
    fishers = [[rng.gamma(0.5, 1.0, n) * (0.05 if (k + i) % 2 else 1.0) for i in range(nodes)]
               for k in range(estimates)]
    anchors = [[rng.normal(0.0, 1.0, n) for _ in range(nodes)] for _ in range(estimates)]

    def swarm(generation: list[int]) -> Simulation:
        sim = Simulation([ModelSpec("fc", tuple(range(nodes)), np.zeros((nodes, 2 * n + 2)))],
                         seed=3)
        for (node, name), core in list(sim.cores.items()):
            sim.cores[(node, name)] = CheckedPushSum(
                core.fingerprint, np.zeros(2 * n + 2), encoding="f64", delta_encoding="f64",
                check=lambda v: check_pushed(v, generation[0]), rng=np.random.default_rng(node))
        return sim

    def outside(sim: Simulation, lo: np.ndarray, hi: np.ndarray) -> float:
        """How far the farthest target of any node lies outside [lo, hi]."""
        worst = 0.0
        for i in range(nodes):
            v = sim.cores[(i, "fc")].values
            f, fw = v[:n], v[n:2 * n]
            on = f > 1e-12 * max(float(f.max()), 1e-300)
            t = fw[on] / f[on]
            worst = max(worst, float(np.max(lo[on] - t, initial=0.0)),
                        float(np.max(t - hi[on], initial=0.0)))
        return worst

    everything_lo = np.min([a for k in anchors for a in k], axis=0)
    everything_hi = np.max([a for k in anchors for a in k], axis=0)
    # renewed: each estimate starts a generation (no push in flight, as the node waits)
    generation = [0]
    sim = swarm(generation)
    for k in range(estimates):
        sim.quiesce()
        generation[0] = k
        for i in range(nodes):
            start_generation(sim.cores[(i, "fc")], vector_of(
                fishers[k][i], anchors[k][i], count=float(i == 0), generation=k))
        lo, hi = np.min(anchors[k], axis=0), np.max(anchors[k], axis=0)
        for _ in range(6):
            sim.run(1)
            assert outside(sim, lo - 1e-9, hi + 1e-9) == 0.0
    # edited in place (the former scheme): contributions moved by new - old
    generation[0] = 0
    sim, worst = swarm(generation), 0.0
    for k in range(estimates):
        for i in range(nodes):
            old = (vector_of(fishers[k - 1][i], anchors[k - 1][i], count=0.0, generation=0)
                   if k else np.zeros(2 * n + 2))
            contribute(sim.cores[(i, "fc")], vector_of(
                fishers[k][i], anchors[k][i], count=float(i == 0 and k == 0), generation=0)
                - old)
        for _ in range(6):
            sim.run(1)
            worst = max(worst, outside(sim, everything_lo, everything_hi))
    assert worst > 1.0  # targets beyond every anchor any node ever had


class FakeHost:
    """What FedCurvStrategy uses of a node, with one shared model of ``n`` values."""

    def __init__(self, n: int, rounds: int = 0) -> None:
        from types import SimpleNamespace

        from gossip import PushSum

        self.rounds = rounds
        self.cores = {"m": PushSum(b"m" * 32, np.zeros(n))}
        self.gossiped: dict[str, PushSum] = {}
        self.learning = SimpleNamespace(network=SimpleNamespace(
            owned_index_tensor=lambda name: torch.arange(n),
            extract=lambda name: np.full(n, 0.5)))

    def rounds_done(self) -> int:
        return self.rounds

    def add_gossiped(self, name: str, fingerprint: bytes, values: np.ndarray,
                     check: Callable[[np.ndarray], str | None] | None = None) -> PushSum:
        from p2p.runtime.strategy_host import CheckedPushSum

        assert check is not None
        core = CheckedPushSum(fingerprint, values, check=check, encoding="f64",
                              delta_encoding="f64", rng=np.random.default_rng(1))
        self.gossiped[name] = core
        return core


def _push_of(values: np.ndarray, fingerprint: bytes, push_id: int) -> Push:
    from gossip.compression import encode

    return Push(fingerprint, push_id, encode(values, "f64"), 0.5)


def test_a_node_enters_a_newer_generation_it_hears_of_and_refuses_older_ones(
        caplog: pytest.LogCaptureFixture) -> None:
    from gossip import RejectedPush

    n = 3
    s = FedCurvStrategy(1.0, 5, 8, counter=False, seed=0, lr=0.1, max_nodes=8.0)
    host = FakeHost(n)
    s.install(host)  # type: ignore[arg-type]
    core = host.gossiped["fedcurv.m"]
    f = np.array([1.0, 2.0, 0.0])
    s._models["m"].pending = (f, np.full(n, 0.5))  # the first estimate: added to gen 0
    s.apply_pending()
    assert s.generation("m") == 0 and np.array_equal(s.own_sums("m")[0], f)
    newer = vector_of(np.array([3.0, 3.0, 3.0]), np.full(n, -1.0), count=1.0, generation=2)
    core.on_push(b"p" * 32, _push_of(newer, core.fingerprint, 1), 0.0)
    # entered generation 2 with its latest estimate, then merged the push
    assert s.generation("m") == 2 and np.array_equal(s.own_sums("m")[0], f)
    assert core.weight == pytest.approx(1.5)
    np.testing.assert_allclose(core.values, (vector_of(f, np.full(n, 0.5), count=0.0,
                                                       generation=2) + 0.5 * newer) / 1.5)
    older = vector_of(np.ones(n), np.zeros(n), count=0.0, generation=1)
    with caplog.at_level("WARNING"), pytest.raises(RejectedPush):
        core.on_push(b"q" * 32, _push_of(older, core.fingerprint, 1), 0.0)
    assert not caplog.records  # out of step, no offence


def test_a_restarted_node_contributes_and_counts_nothing_in_the_first_generation_it_enters(
) -> None:
    n = 3
    s = FedCurvStrategy(1.0, 5, 8, counter=True, seed=0, lr=0.1, max_nodes=8.0)
    host = FakeHost(n, rounds=12)  # resumed from a checkpoint at round 12
    s.install(host)  # type: ignore[arg-type]
    core = host.gossiped["fedcurv.m"]
    assert core.values[-2] == 0.0  # the counter's 1 of the current generation is out there
    s._models["m"].pending = (np.ones(n), np.full(n, 0.5))
    s.apply_pending()
    assert not core.values[:n].any()  # its contribution may be out there too
    current = vector_of(np.full(n, 2.0), np.zeros(n), count=0.5, generation=3)
    core.on_push(b"p" * 32, _push_of(current, core.fingerprint, 1), 0.0)
    assert s.generation("m") == 3 and not s.own_sums("m")[0].any()
    assert core.values[-2] == pytest.approx(0.5 * 0.5 / 1.5)  # no second count
    # the next generation, entered at its own boundary, has its contribution and count
    host.rounds = 17
    s.after_round()
    s._models["m"].pending = (np.ones(n), np.full(n, 0.5))
    s.apply_pending()
    assert s.generation("m") == 4 and core.values[-2] == 1.0
    assert np.array_equal(s.own_sums("m")[0], np.ones(n))


def test_a_peer_announcing_ever_newer_generations_restarts_the_sums_at_most_once_per_gap(
        caplog: pytest.LogCaptureFixture) -> None:
    """A liar pushing generation g + 1, g + 2, ... (or the largest slot) would reset every honest
    node's sums at each push, so they would never mix: a peer's generation is entered at
    most once per ``jump_gap`` rounds (the node's own boundaries apart)."""
    from gossip import RejectedPush

    n = 3
    s = FedCurvStrategy(1.0, 6, 8, counter=False, seed=0, lr=0.1, max_nodes=8.0)
    host = FakeHost(n)
    s.install(host)  # type: ignore[arg-type]
    core = host.gossiped["fedcurv.m"]
    assert s.jump_gap == 3

    def announce(generation: int, push_id: int) -> None:
        values = vector_of(np.ones(n), np.zeros(n), count=0.0, generation=generation)
        core.on_push(b"p" * 32, _push_of(values, core.fingerprint, push_id), 0.0)

    s._models["m"].pending = (np.ones(n), np.full(n, 0.5))  # a first estimate
    s.apply_pending()
    big = GENERATION_MODULUS // 2 - 1  # the farthest ahead a slot may be
    announce(big, 1)  # the first jump is at once (a joiner catching up)
    assert s.generation("m") == big and s.generations == 1
    with caplog.at_level("WARNING"):
        for k in range(2, 6):
            with pytest.raises(RejectedPush):
                announce((big) + k, k)
    assert s.generation("m") == big and s.generations == 1  # no reset meanwhile
    assert not caplog.records  # refused quietly: an honest peer may be ahead
    m = s._models["m"]
    host.rounds = 2
    s.after_round()
    assert not m.awaiting  # no estimate asked for a generation it may not enter yet
    m.pending = (np.ones(n), np.full(n, 0.5))
    assert s.apply_pending()  # (nothing left to poll for: after_round tries again)
    assert s.generation("m") == big
    host.rounds = 3
    s.after_round()  # the gap has passed: an estimate is asked for, then it enters
    assert m.awaiting
    m.pending = (np.full(n, 2.0), np.full(n, 0.5))
    s.apply_pending()
    assert s.generation("m") == (big) + 5 and s.generations == 2
    assert np.array_equal(s.own_sums("m")[0], np.full(n, 2.0))
    # slots count modulo GENERATION_MODULUS (the values' magnitude bound would refuse a
    # larger one, leaving no next generation); half the circle away is older
    assert core.values[-1] == float(big + 5)
    assert vector_of(np.ones(n), np.zeros(n), count=0.0,
                     generation=GENERATION_MODULUS + 3)[-1] == 3.0
    host.rounds = 9
    s.after_round()  # its own boundary: no gap applies
    m.pending = (np.full(n, 2.0), np.full(n, 0.5))
    s.apply_pending()
    assert s.generation("m") == big + 6
    with pytest.raises(RejectedPush):  # half the circle away: older, refused
        announce(big + 6 + GENERATION_MODULUS // 2, 9)
    assert s.generation("m") == big + 6
    assert check_pushed(np.append(np.zeros(2 * n), [0.0, float(GENERATION_MODULUS)])) \
        == f"fedcurv: generation slot {GENERATION_MODULUS} is no generation"
