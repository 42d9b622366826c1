"""A member refused a session slot is told "node busy" even when its first
request is a push that takes seconds to arrive.

_refuse_session (p2p/wire/transport.py) reads the member's first request before
it sends the sealed refusal as its reply. A review found the whole exchange
under a one-second scope: a first request that took longer to arrive (a model
push over a link of a few Mbit/s, the typical gossip request) cancelled it
before the reply was sent, and the member saw the connection close in the
middle of its request (maybe_delivered=True) instead of "node busy". The
request must now start within REFUSAL_FIRST_WAIT and then arrives under the
frame rules of any request.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import trio
import trio.testing

from p2p.simulation import SimNetwork
from p2p.simulation.network import Distribution
from p2p.testing import wait_until
from p2p.wire import codec
from p2p.wire.admission import AdmissionLimits
from p2p.wire.codec import Message
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.messages import Ping, Pong
from p2p.wire.transport import PeerUnreachable

SWARM = b"s" * 32
BUSY = "session refused: node busy: no free session slot"
PUSH = 2_000_000  # bytes: 2 s at the link's 1 MB/s


@dataclass(frozen=True)
class Push:
    data: bytes


codec.register(Push, "member_refused_slow_request_push")


async def _pong(peer: PeerInfo, msg: Message) -> Message | None:
    return Pong(msg.nonce) if isinstance(msg, Ping) else Pong(0)


async def test_a_member_whose_first_request_is_a_large_push_is_told_the_node_is_busy(
        autojump_clock: trio.testing.MockClock) -> None:
    net = SimNetwork(trusted_handshakes=True, bandwidth=Distribution("fixed", 1_000_000))
    limit = 4 << 20
    node = net.transport(Identity.generate(), "10.0.0.1:1", swarm_key=SWARM,
                         admission=AdmissionLimits(max_sessions=1), max_frame_size=limit)
    first, second = (net.transport(Identity.generate(), f"10.0.0.{x}:1", swarm_key=SWARM,
                                   max_frame_size=limit) for x in (2, 3))
    async with trio.open_nursery() as nursery:
        await nursery.start(node.serve, _pong)
        assert await first.request("10.0.0.1:1", Ping(1)) == Pong(1)  # the one slot
        with pytest.raises(PeerUnreachable) as info:
            await second.request("10.0.0.1:1", Push(b"p" * PUSH), timeout=60)
        await wait_until(lambda: node.admission.refused.get("max_sessions", 0) >= 1)
        nursery.cancel_scope.cancel()
    assert info.value.reason.startswith(BUSY), info.value.reason
    assert not info.value.maybe_delivered  # it was never handed to the handler
