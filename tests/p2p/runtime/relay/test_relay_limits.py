"""A relay under a flood of circuit requests stays within its limits (virtual time):
circuits at once, circuits per node, the rate of each circuit, its duration; and its
books (sans-IO) refuse what is over a cap, saying which."""

from __future__ import annotations

import trio
import trio.testing
from relay_kit import Echo, relay_lab

from p2p.runtime.relay.book import RelayBook
from p2p.runtime.relay.service import _Circuit
from p2p.wire.circuit import RelayLimits
from p2p.wire.identity import Identity
from p2p.wire.transport import PeerUnreachable, Transport

A, B, C, D, E, F, G, T = (bytes([i]) * 32 for i in range(1, 9))


def test_books_cap_circuits_per_node_and_source_and_share_the_rest_fairly() -> None:
    book = RelayBook(RelayLimits(max_circuits=5, circuits_per_peer=2, max_reservations=2,
                                 waiting_per_peer=1, reservation_ttl=10.0))
    assert book.open(A, "h1", T, 0.0) == (None, "no reservation: that node holds no "
                                                "reservation with this relay", [])
    assert book.wait(T, "ht", 0.0) is None
    assert "already waiting" in (book.wait(T, "ht", 0.0) or "")  # one connection each here
    assert book.wait(C, "hc", 0.0) is None
    assert "relay full" in (book.wait(B, "hb", 0.0) or "")  # two nodes hold reservations
    assert book.open(A, "h1", T, 1.0)[0] is not None
    assert book.open(A, "h1", C, 1.0)[0] is not None
    assert book.open(A, "h2", T, 1.0)[1].startswith("per-peer limit")  # A: 2 open
    assert book.open(T, "ht", T, 1.0)[1] == "a circuit to yourself"
    # 4 circuits to T at most (twice the per-peer cap): a source without one takes the
    # oldest of the source holding the most, if that one holds two or more
    oldest_h3 = book.open(B, "h3", T, 2.0)[0]
    assert book.open(D, "h3", T, 3.0)[0] is not None
    assert book.open(E, "h4", T, 4.0)[0] is not None  # T: h1, h3, h3, h4
    cid, why, evicted = book.open(F, "h5", T, 5.0)
    assert cid is not None and why == "" and evicted == [oldest_h3]
    assert book.open(G, "h4", T, 6.0)[1].startswith("per-target limit")  # h4 has one
    # 5 at once at most: the same rule over every circuit (h1 holds two)
    assert len(book.circuits) == 5
    cid, why, evicted = book.open(G, "h6", C, 7.0)
    assert cid is not None and len(evicted) == 1 and len(book.circuits) == 5
    assert sum(c.source == "h1" for c in book.circuits.values()) == 1  # h1 gave one up
    assert book.stats.circuits_evicted == 2 and book.stats.peak_circuits == 5
    book.end_wait(T, 8.0)
    assert book.reserved(T, 17.9) and not book.reserved(T, 18.0)  # the ttl after the last wait
    assert book.stats.refusals["per-peer limit"] == 1


def test_nodes_behind_one_nat_share_its_address_four_times() -> None:
    book = RelayBook(RelayLimits(max_circuits=20, circuits_per_peer=1))
    targets = [bytes([100 + i]) * 32 for i in range(5)]
    for i, target in enumerate(targets):
        assert book.wait(target, f"t{i}", 0.0) is None
    for node, target in zip((A, B, C, D), targets, strict=False):
        assert book.open(node, "nat", target, 1.0)[0] is not None  # 4 nodes, one address
    assert book.open(E, "nat", targets[4], 1.0)[1] == "per-source limit: 4 circuits open " \
                                                      "from nat"
    assert book.open(E, "elsewhere", targets[4], 1.0)[0] is not None


async def test_a_flood_of_circuit_requests_stays_within_the_relays_limits(
        autojump_clock: trio.abc.Clock) -> None:
    # one target: the cap of circuits at once binds before the per-target one
    limits = RelayLimits(max_circuits=3, circuits_per_peer=4, circuit_rate=50_000,
                         circuit_duration=30.0)
    async with relay_lab(limits=limits) as lab:
        book = lab.service.book
        outcomes = {"served": 0, "refused": 0}

        async def flooder(k: int) -> None:
            me = lab.net.transport(Identity.generate(), f"10.9.{k}.1:7661")
            for _ in range(3):  # three rounds of two sessions held together
                async with trio.open_nursery() as hold:
                    for _ in range(2):
                        hold.start_soon(one_session, me)

        async def one_session(me: Transport) -> None:
            try:
                async with me.dialer.session(lab.circuit, None) as (ms, _):
                    await ms.send(Echo(b"x" * 20_000))
                    await ms.receive(60, 60)
                    outcomes["served"] += 1
                    await trio.sleep(1.0)  # held open a while
            except PeerUnreachable:
                outcomes["refused"] += 1

        async with trio.open_nursery() as flood:
            for k in range(6):
                flood.start_soon(flooder, k)
        peak = book.stats
        assert peak.peak_circuits == limits.max_circuits  # reached, never passed
        assert peak.peak_per_initiator <= limits.circuits_per_peer
        assert peak.peak_per_target <= limits.circuits_per_peer
        assert outcomes["served"] > 0 and outcomes["refused"] > 0
        assert book.stats.circuits_refused == outcomes["refused"] >= 1
        assert not book.circuits  # every circuit closed with its session

        # the rate of one circuit: 200 kB each way through 50 kB/s
        started = trio.current_time()
        big = b"y" * 200_000
        assert await lab.peer.request(lab.circuit, Echo(big), timeout=60) == Echo(big)
        burst = max(limits.circuit_rate // 4, 64 * 1024)
        assert trio.current_time() - started >= (len(big) - burst) / limits.circuit_rate

        # the duration: the relay ends the circuit; the next request finds the pooled
        # connection closed and opens another circuit
        opened = book.stats.circuits_opened
        await trio.sleep(limits.circuit_duration)
        assert not book.circuits
        assert await lab.peer.request(lab.circuit, Echo(b"again")) == Echo(b"again")
        assert book.stats.circuits_opened == opened + 1



async def test_a_circuit_started_late_still_ends_at_its_duration(
        autojump_clock: trio.abc.Clock) -> None:
    """The wait for the other side counts from the circuit's opening, not from when this
    side's stream arrived (late under load), so its slot is held circuit_duration at most."""
    book = RelayBook(RelayLimits(circuit_duration=10.0))
    circuit = _Circuit(book, 1, b"i" * 32, forget=lambda cid: None)
    await trio.sleep(8.0)  # the initiator's connection is handed over late
    a, _ = trio.testing.memory_stream_pair()
    await circuit.run(0, a)  # the target never comes
    assert trio.current_time() - circuit.opened <= 10.0
