"""Honest runs under the merge defences: exact conservation, and how rarely a bound trips.

The defences are on by default (``gossip.merge_guard``).  A refusal changes
nothing, so what must hold in every honest run is conservation; the refusal
rate is pinned over a fixed grid (deterministic: a search for rare refusing
runs would fail at random).  The net balance per peer decays (docs/design/trust.md,
"Merge defences"): honest flows circulating between three or more nodes must
not accumulate into refusals, which the longer runs below check.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from lab.sim.pushsum import Faults, Simulation, random_models

from gossip import GuardSettings

GRID = [(seed, n, spread, delay) for seed in range(4) for n in (3, 4, 8)
        for spread in (0.0, 0.01, 0.1) for delay in (0.0, 0.8)]


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="gossip.pushsum")


def _run(seed: int, n: int, spread: float, delay: float, loss: float = 0.0,
         crash: bool = False) -> tuple[Simulation, float, np.ndarray]:
    rng = np.random.default_rng(seed)
    models = random_models(n, 20, rng)
    # The holders of a partial model start from one seeded initialisation (the
    # daemon derives it from the fingerprint); spread: how far apart they start.
    common = rng.normal(1.0, 1.0, size=20)
    models[0].initial[:] = common + spread * (models[0].initial - 1.0)
    faults = Faults(loss=loss, max_delay=delay, crashes=((0, 15),) if crash else ())
    sim = Simulation(models, faults=faults, seed=seed, guard=GuardSettings())
    w0, m0 = sim.total_weight("G"), sim.total_mass("G")
    sim.run(40)
    sim.quiesce()
    return sim, w0, m0


def test_honest_runs_conserve_weight_and_mass_and_rarely_refuse() -> None:
    refused = merged = 0
    for seed, n, spread, delay in GRID:
        sim, w0, m0 = _run(seed, n, spread, delay)
        counters = [sim.cores[(i, "G")].counters for i in range(n)]
        refused += sum(c.guard_refused for c in counters)
        merged += sum(c.pushes_received for c in counters)
        # an honest responder always replies to a request: the sink rule never fires
        assert sum(c.unreciprocated for c in counters) == 0, (seed, n, spread, delay)
        # refusals and clipped requests never change the weight or the mass
        assert sim.total_weight("G") == pytest.approx(w0, rel=1e-12), (seed, n, spread, delay)
        if sum(c.clipped_replies for c in counters) == 0:
            np.testing.assert_allclose(sim.total_mass("G"), m0, rtol=1e-9,
                                       atol=1e-9 * float(np.abs(m0).max()))
    assert merged > 3_000
    # measured: 0 of 12,318 merges on this grid; a few refusals are the
    # known small-swarm case, more would mean the bounds bite honest nodes
    assert refused <= 0.002 * merged


@pytest.mark.parametrize("loss,crash", [(0.1, False), (0.0, True), (0.1, True)])
def test_honest_runs_with_faults_keep_their_weight_bounded(loss: float, crash: bool) -> None:
    for seed in range(3):
        sim, w0, _ = _run(seed, 8, 0.01, 0.8, loss=loss, crash=crash)
        survivors = 7 if crash else 8
        assert 0.5 * survivors <= sim.total_weight("G") <= 2 * 8
        assert sum(sim.cores[(i, "G")].counters.unreciprocated for i in range(8)) == 0


def test_long_honest_runs_do_not_walk_into_the_balance_cap() -> None:
    # 4 holders pushing in the same round: each reply is cut from weight not
    # promised to the responder's own push, so flows circulate around cycles;
    # without the balance's decay 400 of 2,400 candidate pushes were held back
    # (measured), with it 74 and no merge refused
    refused = held = merged = 0
    for seed in range(2):
        rng = np.random.default_rng(seed)
        models = random_models(4, 20, rng)
        models[0].initial[:] = rng.normal(1.0, 1.0, size=20)
        sim = Simulation(models, seed=seed, guard=GuardSettings())
        sim.run(300)
        counters = [sim.cores[(i, "G")].counters for i in range(4)]
        refused += sum(c.guard_refused for c in counters)
        held += sum(c.guard_held for c in counters)
        merged += sum(c.pushes_received for c in counters)
    assert merged > 2_000
    assert refused == 0
    assert held <= 0.05 * merged
