"""The creep budget's sums (gossip.drift_budget): exact or sketched, decaying, keyed."""

from __future__ import annotations

import numpy as np
import pytest

from gossip.drift_budget import SKETCH_WIDTH, STRANGERS, DriftBudget
from gossip.errors import InvalidValues
from gossip.merge_guard import GuardSettings, MergeGuard, RefusedByGuard


def test_small_models_are_summed_exactly_and_the_sum_decays() -> None:
    budget = DriftBudget(10, cap=4.0, halflife=10.0)
    u = np.zeros(10)
    u[3] = 1.0
    budget.add(b"a", budget.sketch(u), 0.0)
    budget.add(b"a", budget.sketch(u), 0.0)
    assert budget.used(b"a", 0.0) == pytest.approx(2.0)
    assert budget.used(b"a", 10.0) == pytest.approx(1.0)
    assert budget.after(b"a", budget.sketch(-u), 10.0) == pytest.approx(0.0)
    assert budget.used(b"b", 0.0) == 0.0


def test_the_sketch_keeps_norms_of_large_updates() -> None:
    rng = np.random.default_rng(0)
    budget = DriftBudget(50_000, cap=4.0, halflife=10.0, rng=rng)
    ratios = []
    for _ in range(20):
        v = rng.standard_normal(50_000)
        ratios.append(float(np.linalg.norm(budget.sketch(v)) / np.linalg.norm(v)))
    assert budget.sketch(v).shape == (SKETCH_WIDTH,)
    assert 0.9 < float(np.mean(ratios)) < 1.1 and min(ratios) > 0.7


def test_a_sketch_is_drawn_per_core() -> None:
    # a sender that knew the buckets could creep along a direction they cancel out
    a = DriftBudget(1000, 4.0, 10.0, np.random.default_rng(1))
    b = DriftBudget(1000, 4.0, 10.0, np.random.default_rng(2))
    blind = np.zeros(1000)
    bucket, sign = a._bucket, a._sign
    assert bucket is not None and sign is not None
    i, j = [int(k) for k in np.flatnonzero(bucket == bucket[0])[:2]]
    blind[i], blind[j] = sign[i], -sign[j]
    assert np.linalg.norm(a.sketch(blind)) == 0.0
    assert np.linalg.norm(b.sketch(blind)) > 0.0  # another core sees it


def test_non_partners_share_one_budget_partners_have_their_own() -> None:
    guard = MergeGuard(GuardSettings(drift_cap=2.0), length=4)
    assert guard.drift is not None
    step = guard.drift.sketch(np.array([0.9, 0.0, 0.0, 0.0]))
    guard.merged(b"x", 0.0, False, 0.0, sketched=step)
    guard.merged(b"y", 0.0, False, 0.0, sketched=step)
    assert guard.drift.used(STRANGERS, 0.0) == pytest.approx(1.8)
    with pytest.raises(RefusedByGuard) as refused:
        guard.check_drift(b"z", step, 0.0)  # a third identity: same budget
    assert refused.value.rule == "drift"
    guard.check_drift(b"z", -step, 0.0)  # an update back is always let through
    guard.clip.note_partner(b"p")
    guard.check_drift(b"p", step, 0.0)


def test_settings_are_checked() -> None:
    with pytest.raises(InvalidValues, match="drift_cap"):
        GuardSettings(drift_cap=-1.0)
    with pytest.raises(InvalidValues, match="weight_ceiling"):
        GuardSettings(weight_ceiling=0.0)
    assert MergeGuard(GuardSettings(drift_cap=0.0), length=4).drift is None




def _noisy(rng: np.random.Generator, n: int, mean: np.ndarray) -> np.ndarray:
    """An honest update in radii: ``mean`` plus a random part of norm 0.25."""
    noise = rng.standard_normal(n)
    return mean + 0.25 * noise / np.linalg.norm(noise)


def _warm_guard(n: int, rng: np.random.Generator) -> MergeGuard:
    """A guard with the creep budget on whose radius is partners': 4 x 1.0."""
    guard = MergeGuard(GuardSettings(drift_cap=4.0), length=n, rng=rng)
    for partner in (b"p", b"q"):
        guard.clip.note_partner(partner)
        guard.clip.record(partner, 1.0)
    assert guard.clip.radius(1.0) == pytest.approx(4.0)
    return guard


def _offer(guard: MergeGuard, sender: bytes, update: np.ndarray, push: int) -> bool:
    """Whether the creep budget let ``update`` (in radii) through (then merged)."""
    assert guard.drift is not None
    step = guard.drift.sketch(update)
    try:
        guard.check_drift(sender, step, float(push))
    except RefusedByGuard as exc:
        assert exc.rule == "drift"
        return False
    guard.merged(sender, 0.0, False, 0.0, sketched=step, own_pushes=float(push))
    return True


def _unit(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal(n)
    out: np.ndarray = v / np.linalg.norm(v)
    return out


@pytest.mark.parametrize("n", [64, 2000])  # summed exactly; a count sketch
def test_merges_taking_back_own_training_are_not_refused(n: int) -> None:
    # nodes training on different data: each push this node trains 0.2 radii along
    # e, and two stranger requests pull it back (0.1 each, plus noise of 0.25).
    # Their shared sum grows 0.2 a push: 0.2 x 29 = 5.8 radii in a half-life's
    # decay, over the cap, though the node stays where it was.
    rng = np.random.default_rng(3)
    guard = _warm_guard(n, rng)
    e = _unit(rng, n)
    values = np.ones(n)
    refused = 0
    for push in range(300):
        guard.note_training(4.0 * 0.2 * e, values, float(push))  # radius 4: 0.2 radii
        for k in range(2):
            refused += not _offer(guard, b"s%d" % k, _noisy(rng, n, -0.1 * e), push)
    assert refused == 0


def test_a_creep_across_own_training_is_still_refused() -> None:
    rng = np.random.default_rng(4)
    n = 64
    guard = _warm_guard(n, rng)
    e, u = np.zeros(n), np.zeros(n)
    e[0], u[1] = 1.0, 1.0
    merged = 0
    for push in range(40):
        guard.note_training(4.0 * 0.2 * e, np.ones(n), float(push))
        merged += _offer(guard, b"liar", 0.9 * u, push)
    # 4 at once, then 0.9 a merge decaying by 3.4 % a push (~5 + 5): as without training
    assert merged <= 10


def test_a_creep_against_own_training_takes_back_at_most_that_training() -> None:
    # the cost of the credit: along -e a creeper may also undo what the node trained
    # (0.2 radii a push here), no more
    rng = np.random.default_rng(5)
    n = 64
    guard = _warm_guard(n, rng)
    e = np.zeros(n)
    e[0] = 1.0
    merged = 0
    for push in range(100):
        guard.note_training(4.0 * 0.2 * e, np.ones(n), float(push))
        for _ in range(5):
            merged += _offer(guard, b"liar", -0.9 * e, push)
    leak = 4.0 * np.log(2.0) / 20.0  # the cap's decay, radii a push
    assert 0.9 * merged <= 4.0 + 100 * (0.2 + leak) + 0.9
