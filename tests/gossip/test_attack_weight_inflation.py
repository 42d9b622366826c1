"""A liar that makes an honest node heavy (gossip.merge_guard, weight rules).

One identity pushes the victim's own estimate one-way, with as much weight as
the net balance per peer lets through (it passes every check: no update, so no
clip).  Weight only leaves a node by its pushes, and a push's share was half
the node's weight: past about 6 its own guard held every push back (the share
alone beyond the balance cap), past 8 every guarded receiver refused it.  The
node never pushed again.  Shares are now capped (``GuardSettings.max_share``).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from guard_kit import FP, guarded

from gossip import GuardSettings, Push, RejectedPush, encode

N = 50


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="gossip.pushsum")


def test_a_node_made_heavy_by_a_liar_keeps_exchanging_and_sheds_the_weight() -> None:
    rng = np.random.default_rng(0)
    x0 = rng.normal(0.0, 0.1, N)
    victim = guarded(x0, 1)
    honest = [guarded(x0, 10 + i) for i in range(3)]
    t = 0.0
    for k in range(40):  # one identity, every 10 s
        own = Push(FP, 100 + k, encode(victim.estimate, "f64"), 2.9)
        try:
            victim.on_push(b"liar", own, t)
        except RejectedPush:
            pass  # the net balance: the liar waits for it to decay
        t += 10.0
    assert victim.weight > 9.0
    total = victim.weight + sum(h.weight for h in honest)
    merged = 0
    ids = [b"honest%d" % i for i in range(3)]
    for r in range(30):  # a round every 5 s, the holders offered as a driver does
        out = victim.make_pushes(ids[r % 3:] + ids[:r % 3], t)
        t += 5.0
        if not out:
            continue  # every balance with them at the cap for now (before: for good)
        [(peer, request)] = out
        assert request.weight <= GuardSettings().max_share
        victim.on_ack(peer, honest[ids.index(peer)].on_push(b"victim", request, t), t)
        merged += 1
    # it shed the excess towards the holders' mean (weight is conserved: the liar's
    # gift stays in the swarm), none of it lost
    assert merged >= 15 and victim.weight < 1.2 * total / 4
    assert victim.weight + sum(h.weight for h in honest) == pytest.approx(total, rel=1e-12)


def test_the_cap_leaves_honest_push_pull_shares_alone() -> None:
    # push-pull keeps honest weights within about 2: shares (half of it) stay under 2
    assert GuardSettings().max_share == 2.0
    b = guarded(np.zeros(N), 2)
    b.on_push(b"x", Push(FP, 1, encode(np.zeros(N), "f64"), 1.0), 0.0)  # b weighs 2
    [(_, request)] = b.make_pushes([b"a"], 1.0)
    assert request.weight == pytest.approx(1.0)
