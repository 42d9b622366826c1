"""Known open (found by a review of 231eb11 / 7e4e0b3): one-way holders (``exchange="push"``) with the
default merge guard and independent starts, in small groups.

The clip radius leaves the sender's own entry out, so a holder whose only partner
is the sender (two holders) never leaves the warm-up radius, 0.5 x ||own x||;
independent starts are about 1 x ||x|| apart, so every one-way push is refused
("clip") for good.  With three holders some seeds stall the same way.  A model
held by two to four nodes is a legitimate semi-local configuration.

Strict xfail: open, listed in RELIABILITY.md ("One-way groups ... from independent
starts"). Daemons start every holder of a shared model from one initialisation,
so they do not meet independent starts; the simulator's cores do. The day it is
fixed, this test passes and the strict xfail fails: remove the marker then.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from lab.sim.pushsum import ModelSpec, Simulation

from gossip.merge_guard import GuardSettings


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="gossip.pushsum")


@pytest.mark.xfail(strict=True, reason="open: a one-way holder whose only partner is the "
                   "sender never leaves the warm-up radius (RELIABILITY.md)")
@pytest.mark.parametrize(("n", "seed"), [(2, 0), (3, 6)])
def test_small_one_way_group_converges_with_the_default_guard(n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    sim = Simulation([ModelSpec("G", tuple(range(n)), rng.normal(1.0, 1.0, (n, 20)))],
                     seed=seed, guard=GuardSettings(), exchange="push")
    sim.run(300)
    xs = sim.values("G")
    spread = float(np.abs(xs - xs.mean(axis=0)).max())
    refused = sum(sim.cores[(i, "G")].counters.guard_refused for i in range(n))
    # without the guard these converge to ~1e-8 well within 300 rounds; at the
    # review: n=2 spread 1.08 with 600 of 600 pushes refused, n=3 seed 1 spread 0.13;
    # since the radius is drawn within 10 % (clip_jitter) other seeds stall: of seeds
    # 0-9, n=3: 2, 5, 6 (6: 0.82); n=4: 0, 3, 5, 7, 9
    assert spread < 1e-3, f"{n} one-way holders: spread {spread:.3g}, {refused} refused"
