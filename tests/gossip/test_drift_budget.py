"""The creep budget (gossip.drift_budget): one decaying sum of every merge's movement,
bounded by this node's own training over the same horizon."""

from __future__ import annotations

import numpy as np
import pytest

from gossip.drift_budget import SKETCH_WIDTH, DriftBudget
from gossip.errors import InvalidValues
from gossip.merge_guard import GuardSettings, MergeGuard


def test_small_models_are_summed_exactly_and_the_sums_decay() -> None:
    budget = DriftBudget(10, cap=2.0, halflife=10.0)
    u = np.zeros(10)
    u[3] = 1.0
    budget.add(budget.sketch(u), 0.0)
    budget.add(budget.sketch(u), 0.0)
    assert budget.used(0.0) == pytest.approx(2.0)
    assert budget.used(10.0) == pytest.approx(1.0)
    budget.note_training(budget.sketch(3.0 * u), 0.0)
    assert budget.limit(1.0, 10.0) == pytest.approx(3.0)  # 2 x ||T||, T halved
    # training taken back is free: 2 u of merges against 3 u of own training count 0
    budget.add(budget.sketch(-4.0 * u), 0.0)
    assert budget.used(0.0) == pytest.approx(0.0)


def test_the_sketch_keeps_norms_of_large_updates() -> None:
    rng = np.random.default_rng(0)
    budget = DriftBudget(50_000, cap=2.0, halflife=10.0, rng=rng)
    ratios = []
    for _ in range(20):
        v = rng.standard_normal(50_000)
        ratios.append(float(np.linalg.norm(budget.sketch(v)) / np.linalg.norm(v)))
    assert budget.sketch(v).shape == (SKETCH_WIDTH,)
    assert 0.9 < float(np.mean(ratios)) < 1.1 and min(ratios) > 0.7


def test_a_sketch_is_drawn_per_core() -> None:
    # a sender that knew the buckets could creep along a direction they cancel out
    a = DriftBudget(1000, 2.0, 10.0, rng=np.random.default_rng(1))
    b = DriftBudget(1000, 2.0, 10.0, rng=np.random.default_rng(2))
    blind = np.zeros(1000)
    bucket, sign = a._bucket, a._sign
    assert bucket is not None and sign is not None
    i, j = [int(k) for k in np.flatnonzero(bucket == bucket[0])[:2]]
    blind[i], blind[j] = sign[i], -sign[j]
    assert np.linalg.norm(a.sketch(blind)) == 0.0
    assert np.linalg.norm(b.sketch(blind)) > 0.0  # another core sees it


def test_a_merge_is_scaled_to_what_is_left_and_one_back_always_fits() -> None:
    budget = DriftBudget(4, cap=2.0, halflife=20.0, floor=0.0)
    e, u = np.eye(4)[0], np.eye(4)[1]
    budget.note_training(budget.sketch(0.5 * e), 0.0)  # limit: 2 x 0.5 = 1
    assert budget.fit(budget.sketch(0.6 * u), 1.0, 0.0) == 1.0
    budget.add(budget.sketch(0.6 * u), 0.0)
    share = budget.fit(budget.sketch(0.8 * u), 1.0, 0.0)
    assert share == pytest.approx(0.5, abs=1e-6)  # 0.4 of 0.8 left
    budget.add(budget.sketch(0.4 * u), 0.0)
    assert budget.fit(budget.sketch(0.8 * u), 1.0, 0.0) < 0.01
    assert budget.fit(budget.sketch(-0.8 * u), 1.0, 0.0) == 1.0  # back: always
    # with no training the floor is the bound: a share of the model's own norm
    idle = DriftBudget(4, cap=2.0, halflife=20.0, floor=0.03)
    assert idle.limit(10.0, 0.0) == pytest.approx(0.3)


def test_identities_share_one_budget() -> None:
    # per identity a budget would multiply with identities: there is one for all
    guard = MergeGuard(GuardSettings(drift_warmup=0, drift_cap=2.0), length=4)
    assert guard.drift is not None
    guard.note_training(np.array([0.0, 0.0, 0.5, 0.0]), np.ones(4), 0.0)
    step = guard.drift_sketch(np.array([0.9, 0.0, 0.0, 0.0]))
    assert step is not None
    assert guard.fit_drift(step, 2.0, 0.0) == 1.0
    guard.add_drift(step, 0.0)  # identity x
    assert guard.fit_drift(step, 2.0, 0.0) < 0.2  # identity y: what x left
    assert guard.fit_drift(-step, 2.0, 0.0) == 1.0


def test_a_newcomer_catches_up_within_its_own_warm_up() -> None:
    # the budget applies from the first merge, at least drift_catchup x the norm of the
    # node's own model before any merge, until its own steps or pushes end the warm-up
    settings = GuardSettings(drift_warmup=3, drift_warmup_pushes=5, drift_catchup=1.0)
    guard = MergeGuard(settings, length=4)
    u = np.array([1.0, 0.0, 0.0, 0.0])
    half = guard.drift_sketch(0.8 * u)
    assert half is not None
    for _ in range(3):  # 2.4 of the first norm, 2.0: two merges fit, the third half
        share = guard.fit_drift(half, 2.0, 0.0)
        guard.add_drift(half * share, 0.0)
    assert share == pytest.approx(0.5, abs=1e-6)
    # a liar that grew the model does not grow the catch-up: its reference is fixed
    assert guard.fit_drift(half, 20.0, 0.0) < 0.01
    assert guard.fit_drift(-half, 2.0, 0.0) == 1.0  # the way back always fits
    for _ in range(3):  # the node's own training ends the warm-up ...
        guard.note_training(np.array([0.0, 0.01, 0.0, 0.0]), np.ones(4), 0.0)
    assert guard.fit_drift(-half, 2.0, 0.0) == 1.0
    assert guard.fit_drift(half, 2.0, 0.0) < 0.01  # ... the way on is bounded by it
    idle = MergeGuard(settings, length=4)  # ... or its own pushes, if it does not train
    assert idle.fit_drift(half, 2.0, 4.0) == 1.0
    assert idle.fit_drift(half, 2.0, 5.0) < 0.1


def test_settings_are_checked() -> None:
    with pytest.raises(InvalidValues, match="drift_cap"):
        GuardSettings(drift_cap=-1.0)
    with pytest.raises(InvalidValues, match="drift_warmup"):
        GuardSettings(drift_warmup=-1)
    with pytest.raises(InvalidValues, match="drift_catchup"):
        GuardSettings(drift_catchup=float("nan"))
    with pytest.raises(InvalidValues, match="clip_jitter"):
        GuardSettings(clip_jitter=1.0)
    with pytest.raises(InvalidValues, match="weight_ceiling"):
        GuardSettings(weight_ceiling=0.0)
    assert MergeGuard(GuardSettings(drift_cap=0.0), length=4).drift is None


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal(n)
    out: np.ndarray = v / np.linalg.norm(v)
    return out


@pytest.mark.parametrize("n", [64, 2000])  # summed exactly; a count sketch
def test_merges_taking_back_own_training_fit(n: int) -> None:
    # nodes training on different data: each push this node trains 0.2 along e,
    # and two merges pull it back (0.1 each, plus noise of 0.05 in norm): the sum of
    # the merges grows 0.2 a push, 5.8 in a half-life's decay, far over 2 ||T|| if
    # it all counted, though the node stays where it was
    rng = np.random.default_rng(3)
    budget = DriftBudget(n, cap=2.0, halflife=20.0, rng=rng)
    e = _unit(rng, n)
    shares = []
    for push in range(300):
        budget.note_training(budget.sketch(0.2 * e), float(push))
        for _ in range(2):
            move = budget.sketch(-0.1 * e + 0.05 * _unit(rng, n))
            shares.append(budget.fit(move, 1.0, float(push)))
            budget.add(move * shares[-1], float(push))
    assert min(shares) == 1.0


def test_a_creep_moves_a_node_at_most_cap_times_as_fast_as_it_trains() -> None:
    # the liar's merges go one way, u, across the node's own training e (0.2 a push):
    # they fill 2 ||T|| and then only what the sum's decay frees, 2 x 0.2 a push
    rng = np.random.default_rng(4)
    budget = DriftBudget(64, cap=2.0, halflife=20.0, rng=rng)
    e, u = np.eye(64)[0], np.eye(64)[1]
    moved = []
    for push in range(200):
        budget.note_training(budget.sketch(0.2 * e), float(push))
        total = 0.0
        for _ in range(5):
            share = budget.fit(budget.sketch(0.9 * u), 1.0, float(push))
            budget.add(budget.sketch(0.9 * share * u), float(push))
            total += 0.9 * share
        moved.append(total)
    assert sum(moved) < 0.2 * 5 * 200 * 0.9  # without the budget: 900
    assert np.mean(moved[100:]) == pytest.approx(2.0 * 0.2, rel=0.05)  # the steady rate
