"""Reachability (sans-IO): observed addresses, dial-back majorities, the advertised address."""

from __future__ import annotations

import pytest

from common.address import HostPort, address_scope, advertisable
from p2p.runtime.connectivity import DialBackGate, Reachability
from p2p.runtime.connectivity.reachability import wants_relay

A, B, C, D = (bytes([i]) * 32 for i in range(1, 5))


@pytest.mark.parametrize(("host", "scope"), [
    ("0.0.0.0", "unspecified"), ("::", "unspecified"), ("127.0.0.1", "loopback"),
    ("::1", "loopback"), ("localhost", "loopback"), ("169.254.9.9", "link-local"),
    ("fe80::1", "link-local"), ("10.1.2.3", "private"), ("172.20.0.1", "private"),
    ("192.168.0.7", "private"), ("100.64.1.1", "private"), ("fd12::1", "private"),
    ("::ffff:10.0.0.1", "private"), ("203.0.113.5", "public"), ("8.8.8.8", "public"),
    ("2001:db8::5", "public"), ("node.example.org", "name"),
])
def test_address_scope(host: str, scope: str) -> None:
    assert address_scope(host) == scope


def test_never_advertised_unspecified_link_local_or_foreign_loopback() -> None:
    assert not advertisable(HostPort("0.0.0.0", 7661))
    assert not advertisable(HostPort("::", 7661))
    assert not advertisable(HostPort("fe80::1", 7661))
    assert not advertisable(HostPort("127.0.0.1", 7661))
    assert advertisable(HostPort("127.0.0.1", 7661), local_swarm=True)
    assert advertisable(HostPort("10.0.0.5", 7661))
    assert advertisable(HostPort("203.0.113.5", 7661))


def test_listen_on_every_interface_is_advertised_as_the_confirmed_dialled_address() -> None:
    r = Reachability(HostPort("0.0.0.0", 7661), interface_host="10.0.0.5")
    assert r.advertised(0.0) == "10.0.0.5:7661"  # never 0.0.0.0
    r.observed(A, "203.0.113.7:40001")
    assert r.confirmed() == []  # one peer is not enough: it may lie
    r.observed(B, "203.0.113.7:40002")
    assert r.confirmed() == [HostPort("203.0.113.7", 7661)]
    assert r.reachable(0.0)[0] == "unknown"
    r.dial_back(A, "203.0.113.7:7661", True, "", 1.0)
    assert r.reachable(1.0)[0] == "unknown"  # one success may be a lie too
    r.dial_back(B, "203.0.113.7:7661", True, "", 2.0)
    assert r.reachable(2.0) == ("yes", "")
    assert r.advertised(2.0) == "203.0.113.7:7661"
    assert r.status(2.0).confirmed == ("203.0.113.7:7661",)


def test_a_node_behind_nat_says_it_is_unreachable_and_why() -> None:
    r = Reachability(HostPort("10.0.0.5", 7661))
    for peer in (A, B):
        r.observed(peer, "198.51.100.2:5555")
        r.dial_back(peer, "198.51.100.2:7661", False, "connect failed: connection timed out",
                    0.0)
    state, why = r.reachable(0.0)
    assert state == "no"
    assert "198.51.100.2:7661" in why and "NAT" in why
    # a confirmed but undialled public address is not advertised over the LAN one
    assert r.advertised(0.0) == "10.0.0.5:7661"


def test_one_lying_peer_does_not_settle_reachability() -> None:
    r = Reachability(HostPort("10.0.0.5", 7661))
    r.dial_back(A, "198.51.100.2:7661", True, "", 0.0)  # the liar
    r.dial_back(B, "198.51.100.2:7661", False, "refused", 0.0)
    r.dial_back(C, "198.51.100.2:7661", False, "refused", 0.0)
    assert r.reachable(0.0)[0] == "no"
    r.dial_back(D, "198.51.100.2:7661", True, "", 0.0)
    assert r.reachable(0.0)[0] == "unknown"  # 2 against 2: not settled


def test_loopback_observations_count_only_in_a_one_host_swarm() -> None:
    remote = Reachability(HostPort("10.0.0.5", 7661))
    local = Reachability(HostPort("127.0.0.1", 7661))
    for r in (remote, local):
        r.observed(A, "127.0.0.1:1")
        r.observed(B, "127.0.0.1:2")
    assert remote.confirmed() == []
    assert local.confirmed() == [HostPort("127.0.0.1", 7661)]
    assert local.advertised(0.0) == "127.0.0.1:7661"


def test_advertise_setting_wins_and_junk_observations_are_ignored() -> None:
    r = Reachability(HostPort("0.0.0.0", 7661), HostPort("node.example.org", 7000))
    r.observed(A, "mem-client-3")
    r.observed(B, "not an address")
    assert r.confirmed() == []
    assert r.advertised(0.0) == "node.example.org:7000"


def test_dial_back_gate_dials_only_the_requesters_ip_and_rate_limits() -> None:
    gate = DialBackGate(interval=30.0, per_minute=3, concurrent=2)
    address, _ = gate.admit("198.51.100.2:40001", 7661, 0.0)
    assert address == "198.51.100.2:7661"  # its own IP, the port it asked for
    again, why = gate.admit("198.51.100.2:40002", 7661, 1.0)
    assert again is None and "per 30 s" in why
    assert gate.admit("mem-client-1", 7661, 1.0)[0] is None  # no IP: nothing to dial
    assert gate.admit("198.51.100.3:1", 7661, 1.0)[0] == "198.51.100.3:7661"
    busy, why = gate.admit("198.51.100.4:1", 7661, 1.0)
    assert busy is None and "busy" in why  # two running
    gate.done()
    gate.done()
    assert gate.admit("[2001:db8::9]:1", 7661, 2.0)[0] == "[2001:db8::9]:7661"
    assert gate.admit("198.51.100.5:1", 7661, 3.0)[0] is None  # 3 in the last minute
    assert gate.admit("198.51.100.5:1", 7661, 61.0)[0] == "198.51.100.5:7661"
    assert gate.refused == 4 and gate.served == 4


def test_peers_on_its_own_lan_do_not_make_a_node_behind_a_nat_reachable() -> None:
    r = Reachability(HostPort("0.0.0.0", 7661), interface_host="10.2.0.10")
    for peer in (A, B):  # two peers on its LAN dial it back at its LAN address
        r.observed(peer, "10.2.0.10:7661")
        r.dial_back(peer, "10.2.0.10:7661", True, "", 0.0)
    assert r.reachable(0.0)[0] == "yes"  # a swarm on one LAN: reachable by all
    for peer in (C, D):  # peers beyond its NAT cannot
        r.observed(peer, "203.0.113.102:40000")
        r.dial_back(peer, "203.0.113.102:7661", False, "connect failed: timed out", 1.0)
    state, why = r.reachable(1.0)
    assert state == "no" and "203.0.113.102:7661" in why
    assert r.advertised(1.0) == "10.2.0.10:7661"  # its own (relays go first: plan_addresses)


def test_a_node_reserves_with_relays_when_peers_cannot_dial_it() -> None:
    from p2p.runtime.connectivity.reachability import wants_relay

    assert wants_relay("auto", "no", "203.0.113.5:7661")
    assert not wants_relay("auto", "yes", "10.0.0.5:7661")
    assert wants_relay("auto", "unknown", "10.0.0.5:7661")  # a LAN address: behind a NAT
    assert not wants_relay("auto", "unknown", "203.0.113.5:7661")
    assert not wants_relay("auto", "unknown", "127.0.0.1:7661")  # a one-host swarm
    assert wants_relay("always", "yes", "203.0.113.5:7661")
    assert not wants_relay("never", "no", "10.0.0.5:7661")


def test_relayed_addresses_come_first_and_the_nodes_own_last() -> None:
    from p2p.runtime.connectivity.reachability import plan_addresses

    relayed = [f"203.0.113.{i}:7661/circuit/{'ab' * 32}" for i in (1, 2)]
    assert plan_addresses("10.0.0.5:7661", relayed, "no") == (
        relayed[0], (relayed[1], "10.0.0.5:7661"))
    assert plan_addresses("10.0.0.5:7661", relayed, "yes") == ("10.0.0.5:7661", ())
    assert plan_addresses("10.0.0.5:7661", [], "no") == ("10.0.0.5:7661", ())
    assert plan_addresses("127.0.0.1:7661", relayed[:1], "unknown") == (relayed[0], ())


def test_punch_candidates_are_the_nat_outside_hosts_then_its_own_at_the_punch_port() -> None:
    r = Reachability(HostPort("0.0.0.0", 7661), interface_host="10.0.0.5")
    assert r.punch_candidates(40123) == ["10.0.0.5:40123"]  # nothing observed: its LAN
    r.observed(A, "198.51.100.2:5555")
    r.observed(B, "198.51.100.9:6666")
    r.observed(C, "198.51.100.2:5557")
    # newest observation first, each host once, all at the port of this punch
    assert r.punch_candidates(40123) == ["198.51.100.2:40123", "198.51.100.9:40123",
                                         "10.0.0.5:40123"]


def test_lan_dial_backs_do_not_make_it_reachable_once_a_peer_saw_it_behind_a_nat() -> None:
    """Seen on the testbed: two peers on its LAN dialled it back before anyone beyond its
    (symmetric) NAT had tried; it said "yes" and advertised its LAN address to everyone."""
    r = Reachability(HostPort("0.0.0.0", 7661), interface_host="10.2.0.11")
    r.observed(C, "203.0.113.102:51234")  # a peer beyond the NAT (a fresh port: symmetric)
    for peer in (A, B):
        r.observed(peer, "10.2.0.11:7661")
        r.dial_back(peer, "10.2.0.11:7661", True, "", 0.0)
    state, why = r.reachable(0.0)
    assert state == "unknown" and "only peers on its own network" in why
    assert wants_relay("auto", state, r.advertised(0.0))  # it keeps its relays
    r.dial_back(C, "203.0.113.102:7661", False, "connect failed: timed out", 1.0)
    r.dial_back(D, "203.0.113.102:7661", False, "connect failed: timed out", 1.0)
    assert r.reachable(1.0)[0] == "no"


def test_a_dual_stack_node_offers_its_other_family_as_an_alternate() -> None:
    """Seen on the testbed (--ipv6): public nodes advertised [2001:db8::b]:7661 only, which
    the IPv4-only nodes behind NATs could not dial."""
    from p2p.runtime.connectivity.reachability import plan_addresses

    r = Reachability(HostPort("::", 7661), interface_host="2001:db8::b")
    for peer, seen in ((A, "[2001:db8::b]:40001"), (B, "[2001:db8::b]:40002"),
                       (C, "203.0.113.11:40003"), (D, "203.0.113.11:40004")):
        r.observed(peer, seen)
        r.dial_back(peer, f"{seen.rpartition(':')[0]}:7661", True, "", 1.0)
    assert r.reachable(1.0)[0] == "yes"
    direct = r.advertised(1.0)
    assert plan_addresses(direct, [], "yes", r.dialled_addresses(1.0)) == (
        "[2001:db8::b]:7661", ("203.0.113.11:7661",))
    assert plan_addresses(direct, [], "no", r.dialled_addresses(1.0)) == (direct, ())
