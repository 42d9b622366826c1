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
