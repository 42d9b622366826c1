"""Hole punching over loopback sockets: a relayed session moves to a direct connection
(both sides dial at the sync), or to one the peer dials back (connection reversal);
an attempt that cannot connect leaves the session relayed and backs off. And the rules
(sans-IO): when to try again, which offers to answer, which addresses to dial."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
import trio
from relay_kit import Echo

from p2p.runtime.connectivity import puncher
from p2p.runtime.connectivity.punch import PunchPolicy, usable_candidates
from p2p.runtime.connectivity.puncher import NodePunch
from p2p.runtime.protocol import register_node_messages
from p2p.runtime.relay.client import RelayReservations
from p2p.runtime.relay.service import RelayService
from p2p.testing import wait_until
from p2p.wire.circuit import RelayLimits
from p2p.wire.codec import Message
from p2p.wire.dispatch import RequestDispatcher
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.transport import Transport

P, Q = b"p" * 32, b"q" * 32


def test_after_a_failure_a_peer_waits_longer_each_time() -> None:
    policy = PunchPolicy(concurrent=1, backoff=60.0, max_backoff=200.0)
    assert policy.should_try(P, 0.0)
    policy.started(P)
    assert not policy.should_try(P, 0.0) and not policy.should_try(Q, 0.0)  # one at a time
    policy.finished(P, None, 0.0)
    assert not policy.should_try(P, 59.0) and policy.should_try(P, 60.0)
    policy.started(P)
    policy.finished(P, None, 60.0)
    assert not policy.should_try(P, 179.0) and policy.should_try(P, 180.0)  # 120 s
    policy.started(P)
    policy.finished(P, None, 180.0)
    assert policy.should_try(P, 380.0) and not policy.should_try(P, 379.0)  # capped at 200
    policy.started(P)
    policy.finished(P, "punched", 400.0)
    assert policy.should_try(P, 400.0) and policy.status()["punched"] == 1


def test_offers_are_answered_once_per_peer_interval_and_within_a_rate() -> None:
    policy = PunchPolicy(offer_interval=10.0, offers_per_minute=2)
    assert policy.admit_offer(P, 0.0) == ""
    assert "one offer per 10 s" in policy.admit_offer(P, 5.0)
    assert policy.admit_offer(Q, 5.0) == ""
    assert "busy" in policy.admit_offer(b"r" * 32, 6.0)
    assert policy.admit_offer(b"r" * 32, 61.0) == ""


def test_only_addresses_worth_dialling_are_dialled() -> None:
    offered = ("0.0.0.0:7661", "[fe80::1]:7661", "127.0.0.1:7661", "junk", "203.0.113.7:7661",
               "10.0.0.5:7661", "203.0.113.7:7661")
    assert [str(a) for a in usable_candidates(offered, local_swarm=False)] == [
        "203.0.113.7:7661", "10.0.0.5:7661"]
    assert "127.0.0.1:7661" in [str(a) for a in usable_candidates(offered, local_swarm=True)]


@dataclass
class Pair:
    relay: Transport
    behind: Transport
    peer: Transport
    behind_punch: NodePunch
    peer_punch: NodePunch
    circuit: str
    remotes: list[str]  # how the node behind saw each request's connection


@asynccontextmanager
async def punch_pair(*, peer_reachable: bool = False,
                     behind_offers: list[str] | None = None) -> AsyncIterator[Pair]:
    """A relay, a node reachable only through it (it reserved) and a peer, on loopback."""
    register_node_messages()
    relay, behind, peer = (Transport(Identity.generate(), "127.0.0.1", 0, connect_timeout=5.0)
                           for _ in range(3))
    service = RelayService(RelayLimits(), serving=lambda: True)
    relay_requests = RequestDispatcher()
    service.register(relay_requests)
    remotes: list[str] = []

    async def echo(info: PeerInfo, msg: Echo) -> Message:
        remotes.append(info.remote)
        return Echo(msg.data)

    def punch(t: Transport, reachable: bool, offers: list[str] | None) -> NodePunch:
        return NodePunch(t, candidates=lambda: offers if offers is not None else [
            str(t.bound_address)], reachable=lambda: reachable, local_swarm=lambda: True)

    behind_punch = punch(behind, False, behind_offers)
    peer_punch = punch(peer, peer_reachable, None)
    behind_requests, peer_requests = RequestDispatcher(), RequestDispatcher()
    behind_requests.add(Echo, echo)
    behind_punch.register(behind_requests)
    peer_punch.register(peer_requests)
    async with trio.open_nursery() as nursery:
        relay_address = await nursery.start(relay.serve, relay_requests)
        await nursery.start(behind.serve, behind_requests)
        await nursery.start(peer.serve, peer_requests)
        reservations = RelayReservations(behind, behind.identity.node_id,
                                         candidates=lambda: [(relay_address, None)],
                                         on_change=lambda: None, wanted=1)
        reservations.needed = True
        nursery.start_soon(reservations.run)
        nursery.start_soon(behind_punch.run)
        nursery.start_soon(peer_punch.run)
        await wait_until(lambda: reservations.relayed_addresses(trio.current_time()))
        circuit = reservations.relayed_addresses(trio.current_time())[0]
        yield Pair(relay, behind, peer, behind_punch, peer_punch, circuit, remotes)
        nursery.cancel_scope.cancel()
    for t in (relay, behind, peer):
        await t.aclose()


async def test_a_relayed_session_moves_to_a_punched_connection() -> None:
    async with punch_pair() as pair:
        await pair.peer.request(pair.circuit, Echo(b"first"))
        assert pair.remotes[0].endswith(f"/circuit/{pair.peer.identity.node_id.hex()}")
        await wait_until(lambda: pair.peer.path_to(pair.circuit) == "punched",
                         what="the relayed connection was replaced")
        assert await pair.peer.request(pair.circuit, Echo(b"direct")) == Echo(b"direct")
        assert pair.remotes[-1].startswith("127.0.0.1:")  # no longer through the relay
        assert pair.peer_punch.status()["punched"] == 1


async def test_a_reachable_peer_is_dialled_back_and_turns_the_connection_round() -> None:
    async with punch_pair(peer_reachable=True) as pair:
        await pair.peer.request(pair.circuit, Echo(b"first"))
        await wait_until(lambda: pair.peer.path_to(pair.circuit) == "reversed",
                         what="the peer dialled back")
        assert await pair.peer.request(pair.circuit, Echo(b"back")) == Echo(b"back")
        assert pair.remotes[-1].startswith("127.0.0.1:")
        assert pair.peer_punch.status()["reversed"] == 1


async def test_a_punch_that_cannot_connect_leaves_the_session_relayed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(puncher, "PUNCH_TIMEOUT", 1.0)
    with trio.socket.socket() as s:  # a port nobody listens on: as a symmetric NAT's guess
        await s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    async with punch_pair(behind_offers=[dead]) as pair:
        await pair.peer.request(pair.circuit, Echo(b"first"))
        await wait_until(lambda: pair.peer_punch.status()["failed"] == 1)
        assert pair.peer.path_to(pair.circuit) == "relayed"
        assert await pair.peer.request(pair.circuit, Echo(b"still")) == Echo(b"still")
        assert pair.remotes[-1].endswith(f"/circuit/{pair.peer.identity.node_id.hex()}")
        assert not pair.peer_punch.policy.should_try(pair.behind.identity.node_id,
                                                     trio.current_time())  # backing off
