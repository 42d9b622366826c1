"""Weight injected through made-up identities (review 22).

The net balance bounds what one peer hands a node (``balance_cap``, 3), per
identity: 50 identities, each pushing the victim's own estimate one-way with a
share of 3 (no update, so nothing to clip), took it from weight 1 to 151 at
once.  Now no push that leaves weight here may take the node over
``GuardSettings.weight_ceiling`` (16; honest nodes stay under 6, see
docs/design/trust.md), whatever the number of identities.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from guard_kit import FP

from gossip import GuardSettings, Push, PushSum, RejectedPush, encode
from gossip.merge_guard import RefusedByGuard

N = 50


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="gossip.pushsum")


def test_made_up_identities_cannot_inject_weight_beyond_the_ceiling() -> None:
    rng = np.random.default_rng(0)
    victim = PushSum(FP, rng.normal(0.0, 0.1, N), rng=np.random.default_rng(1),
                     guard=GuardSettings())
    rules = set()
    for k in range(50):
        gift = Push(FP, 100 + k, encode(victim.estimate, "f64"), 3.0)
        try:
            victim.on_push(b"sybil%d" % k, gift, 1.0)
        except RefusedByGuard as exc:
            rules.add(exc.rule)
    assert victim.weight <= 16.0  # GuardSettings().weight_ceiling; before: 151
    assert rules == {"weight_ceiling"}
    # a push-pull request answered with a reply of its whole share leaves no weight
    # here: it still merges at the ceiling, the node keeps exchanging
    request = Push(FP, 999, encode(victim.estimate, "f64"), 0.5, want_reply=True)
    ack = victim.on_push(b"honest", request, 2.0)
    assert ack.reply_weight == pytest.approx(0.5)


def test_one_way_pushes_that_would_cross_the_ceiling_are_refused_whole() -> None:
    victim = PushSum(FP, np.ones(N), rng=np.random.default_rng(1),
                     guard=GuardSettings(weight_ceiling=2.0))
    with pytest.raises(RejectedPush):
        victim.on_push(b"a", Push(FP, 1, encode(np.ones(N), "f64"), 1.5), 1.0)
    assert victim.weight == 1.0  # refused exactly: the sender keeps its share
    victim.on_push(b"a", Push(FP, 2, encode(np.ones(N), "f64"), 1.0), 1.0)
    assert victim.weight == 2.0
