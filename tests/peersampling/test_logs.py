"""Peer sampling's peer-caused log lines go through an injected rate limiter.

A member flooding a node with bad shuffles must cost a bounded number of
lines (issue 11, item 5): the daemon's sampler (``signed_sampler``) hands them
to :class:`gossip.log_limit.LogLimiter`, one line per offender and interval,
then one summary carrying the count.
"""

from __future__ import annotations

import logging
import random
from dataclasses import replace

import pytest

from gossip import LogLimiter
from p2p.runtime.signed_sampling import signed_sampler
from p2p.wire.identity import Identity
from peersampling import (
    Descriptor,
    EveryLine,
    OffenceLog,
    PeerSampler,
    ShuffleReply,
    ShuffleRequest,
    sign_descriptor,
)

_IDS = [Identity.from_seed(bytes([i]) * 32) for i in range(1, 8)]
VICTIM_ADDRESS = "127.0.0.1:7400"


def signed(i: int) -> Descriptor:
    who = _IDS[i]
    return sign_descriptor(Descriptor(who.node_id, f"10.0.0.{i}:7400", 0, frozenset(), 1),
                           who.sign)


def forged(i: int) -> Descriptor:
    """Node ``i``'s descriptor with an address it never signed."""
    return replace(signed(i), address=f"10.9.9.{i}:7400")


def sampling_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "peersampling.core" and r.levelno >= logging.WARNING]


def victim() -> PeerSampler:
    return signed_sampler(_IDS[0], VICTIM_ADDRESS, frozenset(), rng=random.Random(0))


def test_a_flood_of_bad_shuffles_costs_one_line_and_a_summary_per_sender(
        caplog: pytest.LogCaptureFixture) -> None:
    s = victim()
    attackers = (1, 2)
    with caplog.at_level(logging.WARNING):
        for k in range(300):
            for a in attackers:
                # forged entries (signature does not verify) and, every
                # third time, a malformed view field: both kinds are dropped
                view = b"short" if k % 3 == 0 else None
                s.on_request(ShuffleRequest(signed(a), (forged(3), forged(4)), view),
                             1.0 + k * 0.01)
        during = sampling_lines(caplog)
        # each sender's first offence is written in full, the rest are counted
        assert len(during) == len(attackers)
        assert all("from " + _IDS[a].node_id.hex() in line
                   for a, line in zip(attackers, during, strict=True))
        s.start_shuffles(70.0)  # a period after the interval: summaries flushed
    lines = sampling_lines(caplog)
    assert len(lines) == 2 * len(attackers)
    summaries = lines[len(attackers):]
    for a in attackers:
        mine = [line for line in summaries if line.startswith(_IDS[a].node_id.hex())]
        assert len(mine) == 1 and "299 more lines like this" in mine[0]
    assert s.stats.messages_rejected == 2 * 100
    assert s.stats.signatures_rejected == 2 * 200 * 2


def test_bad_replies_are_limited_per_address(caplog: pytest.LogCaptureFixture) -> None:
    s = victim()
    s.bootstrap(["10.0.0.5:7400"])
    with caplog.at_level(logging.WARNING):
        for k in range(50):
            (address, req), *_ = s.start_shuffles(1.0 + k * 0.1)
            s.on_reply(address, req, ShuffleReply((forged(3),), b"x" * 32), 1.0 + k * 0.1)
    lines = sampling_lines(caplog)
    assert len(lines) == 1 and "dropped shuffle reply from 10.0.0.5:7400" in lines[0]


def test_without_a_limiter_every_line_is_written(caplog: pytest.LogCaptureFixture) -> None:
    who = _IDS[0]
    s = PeerSampler(Descriptor(who.node_id, VICTIM_ADDRESS, 0, frozenset(), 1), c=6, l=3,
                    rng=random.Random(0))
    with caplog.at_level(logging.WARNING):
        for k in range(5):
            s.on_request(ShuffleRequest(signed(1), (), b"short"), float(k))
    assert len(sampling_lines(caplog)) == 5


def test_gossip_limiter_and_plain_writer_satisfy_the_protocol() -> None:
    limiter: OffenceLog = LogLimiter(logging.getLogger("peersampling.core"))
    plain: OffenceLog = EveryLine(logging.getLogger("peersampling.core"))
    assert limiter.flush(0.0) == plain.flush(0.0) == 0
