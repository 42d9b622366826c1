"""The simulated network at start-up: seeded connect jitter spreads the dials made at one
instant, and admission refusals are counted rather than logged (p2p/simulation/network.py)."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from p2p.simulation.network import SimNetwork, SimTransport
from p2p.wire.codec import Message
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.messages import Ping, Pong
from p2p.wire.transport import TransportError

DIALLERS = 40  # more than the server's 16 handshake slots


def test_connect_delays_are_seeded_per_pair_and_attempt() -> None:
    net = SimNetwork(seed=5, connect_jitter=0.001)
    again = SimNetwork(seed=5, connect_jitter=0.001)
    other = SimNetwork(seed=6, connect_jitter=0.001)
    delays = [net.connect_delay("a:1", f"b:{i}", attempt) for i in range(20) for attempt in (0, 1)]
    assert delays == [again.connect_delay("a:1", f"b:{i}", attempt)
                      for i in range(20) for attempt in (0, 1)]
    assert delays != [other.connect_delay("a:1", f"b:{i}", attempt)
                      for i in range(20) for attempt in (0, 1)]
    assert all(0 <= d < 0.001 for d in delays)
    assert len(set(delays)) == len(delays)  # every dial its own instant
    with pytest.raises(ValueError, match="connect_jitter"):
        SimNetwork(connect_jitter=-1.0)


async def test_a_connection_opens_after_its_seeded_delay(
        autojump_clock: trio.testing.MockClock) -> None:
    net = SimNetwork(seed=1, connect_jitter=0.5)
    server = net.transport(Identity.generate(), "b:1")

    async def no_reply(peer: PeerInfo, msg: Message) -> Message | None:
        return None

    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, no_reply)
        for attempt in range(3):
            started = trio.current_time()
            stream = await net.connect_from("a:1", "b:1")
            assert trio.current_time() - started == pytest.approx(
                net.connect_delay("a:1", "b:1", attempt))
            await stream.aclose()
        assert (net.connections, net.reconnections) == (3, 2)
        nursery.cancel_scope.cancel()


async def _dial_at_once(net: SimNetwork) -> tuple[SimTransport, int]:
    """``DIALLERS`` nodes ask one node at the same instant; its transport and the answers."""
    server = net.transport(Identity.generate(), "10.0.0.1:7000", max_connections=64)
    clients = [net.transport(Identity.generate(), f"10.0.1.{i}:7000") for i in range(DIALLERS)]
    answered = 0

    async def no_reply(peer: PeerInfo, msg: Message) -> Message | None:
        return None

    async def ask(client: SimTransport) -> None:
        nonlocal answered
        try:
            if isinstance(await client.request(server.listen_address, Ping(1)), Pong):
                answered += 1
        except TransportError:
            pass

    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, no_reply)
        async with trio.open_nursery() as dials:
            for client in clients:
                dials.start_soon(ask, client)
        nursery.cancel_scope.cancel()
    return server, answered


@pytest.mark.parametrize("trusted", [False, True])
async def test_simultaneous_dials_are_refused_without_jitter_and_admitted_with_it(
        autojump_clock: trio.testing.MockClock, trusted: bool) -> None:
    server, answered = await _dial_at_once(SimNetwork(trusted_handshakes=trusted))
    refused = server.admission.refused.get("max_handshakes", 0)
    assert server.admission.limits.max_handshakes == 16
    assert refused > 0 and answered == DIALLERS - refused

    server, answered = await _dial_at_once(SimNetwork(trusted_handshakes=trusted,
                                                      connect_jitter=0.001))
    assert server.admission.refused == {}
    assert answered == DIALLERS


async def test_admission_refusals_are_counted_not_logged(
        autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="p2p.wire.transport")
    server, _ = await _dial_at_once(SimNetwork(trusted_handshakes=True))
    refused = server.admission.refused["max_handshakes"]
    assert refused > 0
    assert server.refusals_not_logged == refused
    assert not [r for r in caplog.records if "handshake slots" in r.getMessage()]
    # any other line a peer causes is still logged, as by a daemon
    with trio.CancelScope():
        server._offence("10.0.1.3", "closing connection from %s: %s", "10.0.1.3:7000",
                        "bad message: truncated")
    assert [r for r in caplog.records if "bad message: truncated" in r.getMessage()]
    assert server.refusals_not_logged == refused


def test_in_process_samplers_share_signature_checks_daemons_do_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import random

    import p2p.runtime.signed_sampling as signed_sampling
    from peersampling import Descriptor

    real = signed_sampling.verify_signature
    calls: list[bytes] = []

    def counting(node_id: bytes, signature: bytes, data: bytes) -> bool:
        calls.append(node_id)
        return real(node_id, signature, data)

    monkeypatch.setattr(signed_sampling, "verify_signature", counting)
    signed_sampling._verify_in_process.cache_clear()
    peer = Identity.generate()
    issued = signed_sampling.signed_sampler(peer, "10.0.0.9:7000", frozenset(),
                                            rng=random.Random(0)).self_descriptor
    forged = Descriptor(issued.node_id, "10.0.0.66:7000", 0, issued.tags, issued.epoch,
                        issued.signature)

    def checks(in_process: bool) -> list[bool]:
        samplers = [signed_sampling.signed_sampler(Identity.generate(), f"10.0.1.{i}:7000",
                                                   frozenset(), rng=random.Random(i),
                                                   in_process=in_process) for i in range(3)]
        return [check(d) for s in samplers for d in (issued, forged)
                if (check := s._check_signature) is not None]

    assert checks(in_process=True) == [True, False] * 3
    assert len(calls) == 2  # one Ed25519 check per distinct descriptor, for all three nodes
    calls.clear()
    assert checks(in_process=False) == [True, False] * 3
    assert len(calls) == 6  # a daemon's sampler verifies for itself


def test_collector_tuning_freezes_once_started_and_restores_the_collector() -> None:
    import gc

    from p2p.simulation.collector import CollectorTuning

    before = gc.get_threshold()
    kept = [object() for _ in range(10)]  # something alive to freeze
    with CollectorTuning((5000, 7, 9)) as collector:
        assert gc.get_threshold() == (5000, 7, 9)
        assert collector.frozen == 0
        collector.freeze()
        assert collector.frozen > len(kept) and gc.get_freeze_count() >= collector.frozen
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    assert collector.as_dict()["frozen_objects"] == collector.frozen
    with pytest.raises(ValueError, match="gc threshold"):
        CollectorTuning((0, 10, 10))
