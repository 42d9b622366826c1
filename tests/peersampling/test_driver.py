"""The trio driver over a fake in-memory network (virtual time)."""

from __future__ import annotations

import logging
import random
from functools import partial

import pytest
import trio
import trio.testing

from peersampling import (
    Descriptor,
    PeerSampler,
    PeerUnreachable,
    ShuffleReply,
    ShuffleRequest,
    largest_strong_component,
    largest_weak_component,
    run_peer_sampling,
)
from peersampling.driver import ShuffleTransport


class FakeNetwork:
    """Delivers requests to in-memory samplers after a small delay."""

    def __init__(self, *, delay: float = 0.01) -> None:
        self.samplers: dict[str, PeerSampler] = {}
        self.down: set[str] = set()
        self.delay = delay
        self.requests = 0
        self.in_flight = 0

    def transport(self, origin: str) -> ShuffleTransport:
        net = self

        class _Transport:
            async def request(self, address: str, req: ShuffleRequest) -> ShuffleReply:
                net.requests += 1
                net.in_flight += 1
                try:
                    await trio.sleep(net.delay)
                finally:
                    net.in_flight -= 1
                target = net.samplers.get(address)
                if target is None or address in net.down or origin in net.down:
                    raise PeerUnreachable(address)
                return target.on_request(req, trio.current_time())

        return _Transport()

    async def quiet(self) -> None:
        """Return at a moment when no shuffle is in flight.

        Cyclon takes a shuffle's target out of the view until it answers, so
        a view is only complete between exchanges; checking it at an arbitrary
        instant would race with the round schedule.
        """
        while self.in_flight:
            await trio.sleep(self.delay / 4)


def make(i: int, c: int = 8, l: int = 3) -> PeerSampler:  # noqa: E741
    me = Descriptor(b"node-%d" % i, f"127.0.0.1:{7400 + i}")
    return PeerSampler(me, c=c, l=l, rng=random.Random(i))


async def test_twenty_nodes_from_one_bootstrap_address_form_a_connected_overlay(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = FakeNetwork()
    nodes = [make(i) for i in range(20)]
    for s in nodes:
        net.samplers[s.self_descriptor.address] = s
        s.bootstrap([nodes[0].self_descriptor.address])
    async with trio.open_nursery() as nursery:
        for i, s in enumerate(nodes):
            transport = net.transport(s.self_descriptor.address)
            await nursery.start(partial(run_peer_sampling, s, transport, period=1.0,
                                        rng=random.Random(100 + i)))
        await trio.sleep(30.5)
        await net.quiet()  # views are whole only between exchanges
        nursery.cancel_scope.cancel()
    graph = {s.self_descriptor.address: [d.address for d in s.view()] for s in nodes}
    assert all(not s.is_isolated for s in nodes)
    assert largest_weak_component(graph) == 20
    assert largest_strong_component(graph) == 20
    # in a network this small, replies often carry peers already known, so
    # Cyclon views hover just below c rather than exactly at it
    assert min(len(s.view()) for s in nodes) >= 6
    assert all(s.stats.shuffles_failed == 0 for s in nodes)


async def test_unreachable_bootstrap_backs_off_and_reports_isolation(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    net = FakeNetwork()
    s = make(1)
    s.bootstrap(["127.0.0.1:9999"])  # nobody there
    with caplog.at_level(logging.INFO, logger="peersampling"):
        with trio.move_on_after(1000):
            await run_peer_sampling(s, net.transport("x"), period=1.0, max_backoff=64.0,
                                    rng=random.Random(7))
    assert s.is_isolated
    # 1 + 2 + 4 + ... + 64, then every ~64 s: far fewer than 1000 attempts
    assert 15 <= s.stats.bootstrap_attempts <= 30
    assert s.stats.shuffles_failed == s.stats.bootstrap_attempts
    assert sum("isolated" in r.message for r in caplog.records) == 1


async def test_recovers_once_bootstrap_comes_up(autojump_clock: trio.testing.MockClock) -> None:
    net = FakeNetwork()
    a, b = make(1), make(2)
    net.samplers = {a.self_descriptor.address: a, b.self_descriptor.address: b}
    net.down.add(b.self_descriptor.address)
    a.bootstrap([b.self_descriptor.address])
    async with trio.open_nursery() as nursery:
        # (the backoff jitter comes from a seeded generator: the same schedule every run)
        nursery.start_soon(partial(run_peer_sampling, a, net.transport("a"), period=1.0,
                                   rng=random.Random(3)))
        await trio.sleep(20)
        assert a.is_isolated
        net.down.clear()
        await trio.sleep(40)  # longer than the backoff reached so far
        # b is out of a's view while a shuffle with it is in flight (Cyclon
        # holds the target apart until it answers): look between exchanges
        await net.quiet()
        assert not a.is_isolated and [d.address for d in a.view()] == [b.self_descriptor.address]
        nursery.cancel_scope.cancel()


class _Misbehaving:
    def __init__(self) -> None:
        self.calls = 0

    async def request(self, address: str, req: ShuffleRequest) -> ShuffleReply:
        self.calls += 1
        kind = self.calls % 4
        if kind == 0:
            raise ValueError("decoder blew up")
        if kind == 1:
            await trio.sleep_forever()  # never answers: the driver's timeout fires
        if kind == 2:
            raise TimeoutError
        return ShuffleReply(("not a descriptor",))  # type: ignore[arg-type]


async def test_transport_errors_never_crash_the_loop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    s = make(1)
    s.restore([Descriptor(b"p%d" % i, f"10.0.0.{i}:1") for i in range(1, 8)])
    s.bootstrap(["10.0.0.99:1"])
    transport = _Misbehaving()
    with trio.move_on_after(200):
        await run_peer_sampling(s, transport, period=1.0, timeout=0.5, rng=random.Random(5))
    assert transport.calls >= 10
    assert s.stats.shuffles_failed >= 7
    assert s.stats.descriptors_rejected >= 1
