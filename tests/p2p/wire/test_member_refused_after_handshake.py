"""A member refused a session slot after its handshake completed is told why.

By then the handshake proved membership (with a swarm key) and the initiator
already seals, so the node can say, sealed, that it is busy: the member's
operator reads "node busy: no free session slot" instead of a bare
"connection closed by peer". The refusing node logs it as being busy (INFO,
rate-limited), not as the peer's offence (p2p/wire/transport.py).
"""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

import p2p.wire.transport as transport_module
from p2p.simulation import SimNetwork
from p2p.testing import MemoryNetwork, wait_until
from p2p.wire.admission import AdmissionLimits
from p2p.wire.codec import Message
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.messages import Ping, Pong
from p2p.wire.transport import PeerUnreachable, Transport

SWARM = b"s" * 32
BUSY = "session refused: node busy: no free session slot"


async def _pong(peer: PeerInfo, msg: Message) -> Message | None:
    return Pong(msg.nonce) if isinstance(msg, Ping) else None


async def _second_member_refused(node: Transport, first: Transport, second: Transport,
                                 address: str | None = None) -> PeerUnreachable:
    """``first`` takes the node's one session slot; what ``second`` is told."""
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(node.serve, _pong)
        target = address or bound
        assert await first.request(target, Ping(1)) == Pong(1)  # holds the one slot
        with pytest.raises(PeerUnreachable) as info:
            await second.request(target, Ping(2))
        # the member still gets a slot once one is free
        await first.aclose()
        await wait_until(lambda: node.admission.sessions == 0)
        assert await second.request(target, Ping(3)) == Pong(3)
        nursery.cancel_scope.cancel()
    assert node.admission.refused.get("max_sessions") == 1, node.admission.refused
    return info.value


@pytest.mark.parametrize("swarm_key", [SWARM, None], ids=["keyed", "open"])
async def test_a_member_refused_a_session_slot_is_told_the_node_is_busy(
        autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture,
        swarm_key: bytes | None) -> None:
    caplog.set_level(logging.INFO, logger="p2p.wire.transport")
    net = MemoryNetwork()
    node = net.transport(Identity.generate(), "node:1", swarm_key=swarm_key,
                         admission=AdmissionLimits(max_sessions=1))
    first, second = (net.transport(Identity.generate(), f"{x}:1", swarm_key=swarm_key)
                     for x in "ab")
    refused = await _second_member_refused(node, first, second, "node:1")
    assert refused.reason.startswith(BUSY), refused.reason
    assert "all 1 session slots are taken" in refused.reason
    assert not refused.maybe_delivered  # the request was never handed to the handler
    # not "handshake ...": the collaboration status must not blame a swarm key
    assert not refused.reason.startswith("handshake")
    # the refusing node: one INFO line saying it is busy, no warning about the peer
    lines = [(r.levelno, r.getMessage()) for r in caplog.records
             if r.name == "p2p.wire.transport"]
    assert [m for level, m in lines if level == logging.INFO and "node busy" in m], lines
    assert not [m for level, m in lines if level >= logging.WARNING], lines


async def test_a_member_is_told_over_tcp_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # the member's first request follows its handshake at once; a starved machine
    # must not turn that into a wait past the refusal's first-request window
    monkeypatch.setattr(transport_module, "REFUSAL_FIRST_WAIT", 60.0)
    node = Transport(Identity.generate(), "127.0.0.1", 0, swarm_key=SWARM,
                     admission=AdmissionLimits(max_sessions=1), connect_timeout=30.0,
                     read_timeout=30.0)
    first, second = (Transport(Identity.generate(), "127.0.0.1", 0, swarm_key=SWARM,
                               connect_timeout=30.0, read_timeout=30.0) for _ in "ab")
    refused = await _second_member_refused(node, first, second)
    assert refused.reason.startswith(BUSY), refused.reason


async def test_a_simulation_counts_the_busy_refusal_and_logs_nothing(
        autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="p2p.wire.transport")
    net = SimNetwork(trusted_handshakes=True)
    node = net.transport(Identity.generate(), "10.0.0.1:1", swarm_key=SWARM,
                         admission=AdmissionLimits(max_sessions=1))
    first, second = (net.transport(Identity.generate(), f"10.0.0.{x}:1", swarm_key=SWARM)
                     for x in (2, 3))
    refused = await _second_member_refused(node, first, second, "10.0.0.1:1")
    assert refused.reason.startswith(BUSY), refused.reason
    assert node.refusals_not_logged == 1
    assert not [r for r in caplog.records if r.levelno >= logging.INFO
                and "session slot" in r.getMessage()]


async def test_refusals_beyond_the_waiting_cap_are_sent_at_once(
        autojump_clock: trio.testing.MockClock) -> None:
    # Refusals wait for the member's first request while holding no admission
    # slot, so only max_handshakes of them wait at once; the rest reply at once.
    net = MemoryNetwork()
    node = net.transport(Identity.generate(), "node:1", swarm_key=SWARM,
                         admission=AdmissionLimits(max_sessions=1))
    node.responder.refusals_waiting = node.admission.limits.max_handshakes
    first, second = (net.transport(Identity.generate(), f"{x}:1", swarm_key=SWARM)
                     for x in "ab")
    refused = await _second_member_refused(node, first, second, "node:1")
    assert refused.reason.startswith(BUSY), refused.reason
    assert node.responder.refusals_waiting == node.admission.limits.max_handshakes  # given back
