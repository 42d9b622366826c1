"""Hole punching over loopback sockets: a relayed session moves to a direct connection
(both sides dial at the sync), or to one the peer dials back (connection reversal);
an attempt that cannot connect leaves the session relayed and backs off. And the rules
(sans-IO): when to try again, which offers to answer, which addresses to dial."""

from __future__ import annotations

import pytest
import trio
from relay_kit import Echo, punch_pair

from common.address import HostPort
from p2p.runtime.connectivity import puncher
from p2p.runtime.connectivity.punch import PunchPolicy, usable_candidates
from p2p.testing import wait_until

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


async def test_a_relayed_session_moves_to_a_punched_connection() -> None:
    async with punch_pair() as pair:
        await pair.peer.request(pair.circuit, Echo(b"first"))
        assert pair.remotes[0].endswith(f"/circuit/{pair.peer.identity.node_id.hex()}")
        await wait_until(lambda: pair.peer_punch.status()["punched"] == 1,
                         what="the relayed connection was replaced")
        assert pair.peer.path_to(pair.circuit) == "punched"
        assert await pair.peer.request(pair.circuit, Echo(b"direct")) == Echo(b"direct")
        assert pair.remotes[-1].startswith("127.0.0.1:")  # no longer through the relay


async def test_a_reachable_peer_is_dialled_back_and_turns_the_connection_round() -> None:
    async with punch_pair(peer_reachable=True) as pair:
        await pair.peer.request(pair.circuit, Echo(b"first"))
        await wait_until(lambda: pair.peer_punch.status()["reversed"] == 1,
                         what="the peer dialled back")
        assert pair.peer.path_to(pair.circuit) == "reversed"
        assert await pair.peer.request(pair.circuit, Echo(b"back")) == Echo(b"back")
        assert pair.remotes[-1].startswith("127.0.0.1:")


async def test_a_punch_that_cannot_connect_leaves_the_session_relayed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(puncher, "PUNCH_TIMEOUT", 1.0)
    with trio.socket.socket() as s:  # a port nobody listens on: as a symmetric NAT's guess
        await s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    async with punch_pair(behind_offers=[dead], peer_offers=[dead]) as pair:
        await pair.peer.request(pair.circuit, Echo(b"first"))
        await wait_until(lambda: pair.peer_punch.status()["failed"] == 1)
        assert pair.peer.path_to(pair.circuit) == "relayed"
        assert await pair.peer.request(pair.circuit, Echo(b"still")) == Echo(b"still")
        assert pair.remotes[-1].endswith(f"/circuit/{pair.peer.identity.node_id.hex()}")
        assert not pair.peer_punch.policy.should_try(pair.behind.identity.node_id,
                                                     trio.current_time())  # backing off


@pytest.mark.parametrize("dead_side", ["behind", "peer"])
async def test_one_side_dialling_the_others_punch_port_is_enough(dead_side: str) -> None:
    """Without a NAT in between only one dial is needed: it reaches the other side's
    punch port, which accepts it (the initiator runs the handshake on it, or the node
    behind serves it once the initiator speaks)."""
    with trio.socket.socket() as s:
        await s.bind(("127.0.0.1", 0))
        dead = [f"127.0.0.1:{s.getsockname()[1]}"]
    offers = {"behind_offers": dead} if dead_side == "behind" else {"peer_offers": dead}
    async with punch_pair(**offers) as pair:  # type: ignore[arg-type]
        await pair.peer.request(pair.circuit, Echo(b"first"))
        await wait_until(lambda: pair.peer_punch.status()["punched"] == 1,
                         what="the relayed connection was replaced")
        assert pair.peer.path_to(pair.circuit) == "punched"
        assert await pair.peer.request(pair.circuit, Echo(b"direct")) == Echo(b"direct")
        assert pair.remotes[-1].startswith("127.0.0.1:")


async def test_a_peer_with_no_port_to_punch_from_declines_and_the_session_stays_relayed(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    bind = puncher._Port.bind
    calls: list[int] = []

    def bind_once(listen: HostPort) -> object:  # the initiator's port, then none left
        calls.append(1)
        if len(calls) > 1:
            raise OSError(98, "Address already in use")
        return bind(listen)

    monkeypatch.setattr(puncher._Port, "bind", bind_once)
    async with punch_pair() as pair:
        await pair.peer.request(pair.circuit, Echo(b"first"))
        await wait_until(lambda: pair.peer_punch.status()["failed"] == 1)
        assert pair.peer.path_to(pair.circuit) == "relayed"
        assert any("cannot bind a port for a hole punch" in r.getMessage()
                   for r in caplog.records)
        assert await pair.peer.request(pair.circuit, Echo(b"still")) == Echo(b"still")
