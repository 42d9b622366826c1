"""A silent holder: it takes push-pull requests and never answers (or hangs).

Each push to it stays outstanding (it may have been merged) and blocks the
model's new pushes for ``max_attempts`` x ``push_timeout``; with no strike it was
picked again as soon as its push stopped blocking.  One such holder among three
cut a node's completed exchanges from 300 to 18 in 300 s (175 now).  The driver now
strikes a peer (as a sink: paused, doubling) at every ``max_attempts`` failures
in a row that may have been delivered.
"""

from __future__ import annotations

import logging
import random

import numpy as np
import pytest
import trio
import trio.testing
from lab.sim.pushsum import model_fingerprint, node_id

from gossip import GossipDriver, GuardSettings, Push, PushAck, PushSum, PushUndelivered
from gossip.partner_choice import PartnerChoice

FP = model_fingerprint("G")
TIMEOUT = 5.0  # the daemon's default push_timeout
ROUNDS = 300  # one-second training rounds


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="gossip")


def exchanges(silent_holder: bool) -> tuple[int, PartnerChoice]:
    """Exchanges node 0 completed in ROUNDS rounds, with two honest holders and,
    if asked, a third that never answers."""
    rng = np.random.default_rng(0)
    cores = [PushSum(FP, rng.normal(0.0, 1.0, 20), rng=rng, guard=GuardSettings())
             for _ in range(3)]
    ids = [node_id(i) for i in range(4)]
    silent = ids[3]
    holders = ids[1:] if silent_holder else ids[1:3]

    class Transport:
        async def push(self, peer: bytes, push: Push) -> PushAck:
            if peer == silent:
                await trio.sleep(TIMEOUT)  # the request went out; no answer came back
                raise PushUndelivered("timed out", maybe_delivered=True)
            await trio.sleep(0.01)
            return cores[ids.index(peer)].on_push(ids[0], push, trio.current_time())

    pick = random.Random(1)
    partners = PartnerChoice(random.Random(2))
    driver = GossipDriver({"G": cores[0]}, Transport(),
                          lambda fp, count: pick.sample(holders, min(count, len(holders))),
                          push_timeout=TIMEOUT, pushes_per_round=1, partners=partners)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(driver.run)
            for _ in range(ROUNDS):
                driver.signal_round()
                await trio.sleep(1.0)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return cores[0].counters.acks, partners


def test_a_silent_holder_is_paused_and_the_node_keeps_exchanging() -> None:
    baseline, _ = exchanges(silent_holder=False)
    assert baseline == ROUNDS
    done, partners = exchanges(silent_holder=True)
    assert partners.is_paused(node_id(3), ROUNDS)
    # 18 of 300 before; what is left is the rounds spent waiting on the struck push's
    # retransmissions (it may have been merged: retransmitted up to give_up_after)
    assert done > 0.5 * baseline
