"""A creep inside the radius (review 22): one liar walks a guarded model away by
repeated push-pull requests each just inside the clip radius.

Each request carried q = x + 0.9 tau u (x: the victim's estimate, which the liar
reads off the previous reply; u: a fixed direction).  Within the radius, so not
clipped and no clip debt; the responder replies r = s, so nothing enters the net
balance; nothing limited how often one sender's clear pushes were merged.  Each
merge moved x by ~0.45 tau along u: 400 requests (4 s at 100 per second) moved it
by ~180 radii.  Now the movement all merges made, every sender together, with
own training taken back, is bounded by this node's own training
(``GuardSettings.drift_cap``, :mod:`gossip.drift_budget`): a request over it is
clipped to what is left and the rest handed back, so made-up identities do not
multiply it.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from guard_kit import FP, guarded

from gossip import Push, PushSum, encode
from gossip.merge_guard import RefusedByGuard


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="gossip.pushsum")


def exchange(a: PushSum, a_id: bytes, b: PushSum, b_id: bytes, now: float) -> None:
    [(_, request)] = a.make_pushes([b_id], now)
    a.on_ack(b_id, b.on_push(a_id, request, now), now)


def radius(core: PushSum, sender: bytes) -> float:
    assert core._guard is not None
    return core._guard.clip.radius(float(np.linalg.norm(core.estimate)), sender)


def among_honest_partners(n: int) -> tuple[PushSum, list[PushSum], float,
                                            np.random.Generator]:
    rng = np.random.default_rng(0)
    x0 = rng.normal(0.0, 0.1, n)
    victim = guarded(x0, 1)
    honest = [guarded(x0, 10 + i) for i in range(6)]
    t = 0.0
    for _ in range(4):  # honest partners, training between exchanges (24 own training
        # steps: past the budget's warm-up, GuardSettings.drift_warmup)
        for i, h in enumerate(honest):
            for core in (victim, *honest):
                core.set_values(core.values + rng.normal(0.0, 1e-3, n))
            exchange(victim, b"victim", h, b"honest%d" % i, t)
            h.set_values(h.values + rng.normal(0.0, 1e-3, n))
            exchange(h, b"honest%d" % i, victim, b"victim", t + 0.5)
            t += 1.0
    return victim, honest, t, rng


@pytest.mark.parametrize("n", [100, 2000])  # summed exactly; a count sketch
@pytest.mark.parametrize("identities", [1, 400])
def test_one_liar_cannot_walk_a_model_away_inside_the_radius(n: int, identities: int) -> None:
    victim, _, t, rng = among_honest_partners(n)
    tau = radius(victim, b"liar")
    start = victim.estimate
    u = rng.standard_normal(n)
    u /= np.linalg.norm(u)
    clipped = victim.counters.clipped
    for k in range(400):  # 100 requests per second for 4 s
        sender = b"liar%d" % (k % identities)
        q = victim.estimate + 0.9 * radius(victim, sender) * u
        try:
            victim.on_push(sender, Push(FP, 1000 + k, encode(q, "f64"), 0.5, want_reply=True),
                           t + 0.01 * k)
        except RefusedByGuard as exc:
            assert exc.rule == "clip_debt"  # clipped to the radius too often
    moved = float(np.linalg.norm(victim.estimate - start))
    # within the bound: drift_cap x the node's own training (before: 180 radii);
    # made-up identities share one budget
    trained = float(np.linalg.norm(victim._guard.drift.training(0.0)))  # type: ignore[union-attr]
    cap = victim._guard.settings.drift_cap
    assert moved < cap * trained + 2 * tau, (
        f"moved {moved:.3g} = {moved / tau:.0f} radii (tau {tau:.3g}, own training "
        f"{trained:.3g})")
    assert victim.counters.clipped - clipped > 350  # each clipped to what is left


def test_honest_partners_keep_merging_while_a_creeper_is_clipped() -> None:
    victim, honest, t, rng = among_honest_partners(100)
    u = rng.standard_normal(100)
    u /= np.linalg.norm(u)
    for k in range(100):
        q = victim.estimate + 0.9 * radius(victim, b"liar") * u
        try:
            victim.on_push(b"liar", Push(FP, 1000 + k, encode(q, "f64"), 0.5, want_reply=True),
                           t + 0.01 * k)
        except RefusedByGuard:
            pass
    assert victim.counters.clipped > 80
    refused = victim.counters.guard_refused
    t += 1.0
    for i, h in enumerate(honest):  # never refused: the way back to them always fits
        h.set_values(h.values + rng.normal(0.0, 1e-3, 100))
        exchange(h, b"honest%d" % i, victim, b"victim", t + i)
    assert victim.counters.guard_refused == refused




def test_own_training_reaches_the_creep_budget() -> None:
    # merges may take back the node's own training (gossip.drift_budget): set_values
    # must feed it
    victim, _, _, _ = among_honest_partners(100)
    assert victim._guard is not None and victim._guard.drift is not None
    trained = victim._guard.drift.training(0.0)
    assert trained is not None and trained.shape == (100,)
    assert float(np.linalg.norm(trained)) > 0.0
