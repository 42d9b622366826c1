"""Known open (found by a review of 3823312): the random kicker of tests/test_attack_random_kicks.py,
spreading its requests over 16 made-up identities instead of one.

SenderShares counts per identity, partners or not, and the clip radius applies
to non-partners alike, so each identity stays under its share while the liar as
a whole sends every holder a request 0.9 radius away every round.  docs/design/trust.md
says the rule is not Sybil-proof ("not measured"); measured at the review, 12
holders, seeds 0-1, x ||mean||: one identity 0.17-0.21 at 120 rounds (276-297 of
1,320 kicks merged), 16 identities 8.9-9.2 (1,320 of 1,320 merged), as without
the rule.

Strict xfail: open (the bound is per identity, and off by default since this
review); docs/design/trust.md, "Random kicks inside the radius". Remove the marker the
day it passes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pytest
from lab.sim.pushsum import ModelSpec, Simulation, node_id

from gossip import Push, PushAck, PushSum, encode
from gossip.errors import RejectedPush
from gossip.merge_guard import GuardSettings


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="gossip.pushsum")


class _RotatingKicker:
    """From round ``start``, one request per holder per round, 0.9 radius away in a
    fresh random direction, under identity k mod ``identities``."""

    def __init__(self, identities: int, start: int = 10) -> None:
        self.identities, self.start = identities, start
        self.cores: dict[int, PushSum] = {}
        self.round = self.sent = 0

    def pushes(self, round: int, core: PushSum, peers: Sequence[int],
               rng: np.random.Generator) -> list[tuple[int, Push]]:
        self.round = round
        if round < self.start:
            return []
        for p in peers:
            target = self.cores.get(p)
            if target is None or target._guard is None:
                continue
            x = target.estimate
            tau = target._guard.clip.radius(float(np.linalg.norm(x)), b"liar")
            u = rng.standard_normal(x.size)
            q = x + 0.9 * tau * u / np.linalg.norm(u)
            self.sent += 1
            ident = b"kicker%010d" % (self.sent % self.identities)
            try:  # delivered straight away; the liar ignores the answer
                target.on_push(ident, Push(target.fingerprint, self.sent, encode(q, "f64"),
                                           0.5, want_reply=True), float(round))
            except RejectedPush:
                pass
        return []

    def answer(self, core: PushSum, sender: int, push: Push) -> PushAck | None:
        try:
            return core.on_push(node_id(sender), push, float(self.round))
        except RejectedPush:
            return None


@pytest.mark.xfail(strict=True, reason="open: made-up identities each stay under their "
                   "share (docs/design/trust.md)")
@pytest.mark.parametrize("seed", [0, 1])
def test_random_kicks_from_sixteen_identities_stay_bounded(seed: int) -> None:
    n = 12
    rng = np.random.default_rng(seed)
    initial = rng.normal(1.0, 1.0, size=(n + 1, 50))
    m = initial[:n].mean(axis=0)
    liar = _RotatingKicker(16)
    sim = Simulation([ModelSpec("G", tuple(range(n + 1)), initial)], seed=seed,
                     adversaries={n: liar}, guard=GuardSettings(sender_share=3.0))
    liar.cores = {i: sim.cores[(i, "G")] for i in range(n)}
    sim.run(120)
    xs = np.array([sim.cores[(i, "G")].estimate for i in range(n)])
    error = float(np.linalg.norm(xs - m, axis=1).max() / np.linalg.norm(m))
    # the bar tests/test_attack_random_kicks.py sets for one identity
    assert error < 1.0, f"honest error {error:.3g} x ||mean|| with 16 identities"
