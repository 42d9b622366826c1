"""The trio driver of push-sum over a fake transport, in virtual time (MockClock)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np
import pytest
import trio
import trio.testing
from lab.sim.pushsum import model_fingerprint, node_id

from gossip import GossipDriver, Push, PushAck, PushRefused, PushSum, PushUndelivered
from gossip.wave_rule import Next, WaveRule

FP = model_fingerprint("G")
LATENCY = 0.01  # virtual seconds per push exchange
TIMEOUT = 1.0  # push_timeout: seconds before a retransmission

# (sender, receiver, push, attempt number of this push id) -> None to deliver, or an exception
Fault = Callable[[bytes, bytes, Push, int], Exception | None]


class FakeNet:
    """One push-sum core per node; pushes are merged by the receiver's core after a delay."""

    def __init__(self, cores: Sequence[PushSum], fault: Fault | None = None) -> None:
        self.cores = {node_id(i): c for i, c in enumerate(cores)}
        self.fault = fault
        self.attempts: dict[tuple[bytes, int], int] = {}
        self.sent: list[tuple[bytes, bytes, int]] = []  # (sender, receiver, push id)

    def transport(self, me: bytes) -> _FakeTransport:
        return _FakeTransport(self, me)

    def holders(self, me: bytes, seed: int) -> Callable[[bytes, int], list[bytes]]:
        rng = random.Random(seed)
        others = [p for p in self.cores if p != me]

        def pick(fingerprint: bytes, count: int) -> list[bytes]:
            assert fingerprint == FP
            return rng.sample(others, min(count, len(others)))

        return pick

    def total_weight(self) -> float:
        return sum(c.weight for c in self.cores.values())

    def total_mass(self) -> np.ndarray:
        return np.sum([c.mass for c in self.cores.values()], axis=0)


class _FakeTransport:
    def __init__(self, net: FakeNet, me: bytes) -> None:
        self._net = net
        self._me = me

    async def push(self, peer: bytes, push: Push) -> PushAck:
        key = (self._me, push.push_id)
        attempt = self._net.attempts[key] = self._net.attempts.get(key, 0) + 1
        self._net.sent.append((self._me, peer, push.push_id))
        await trio.sleep(LATENCY)
        exc = self._net.fault(self._me, peer, push, attempt) if self._net.fault else None
        if exc is not None:
            raise exc
        return self._net.cores[peer].on_push(self._me, push, trio.current_time())


class Durations:
    def __init__(self) -> None:
        self.seen: list[float] = []

    def add(self, seconds: float) -> None:
        self.seen.append(seconds)


def make_cores(n: int, dim: int = 5, seed: int = 0, **kw: object) -> tuple[list[PushSum], np.ndarray]:
    rng = np.random.default_rng(seed)
    init = rng.normal(1.0, 1.0, size=(n, dim))
    return [PushSum(FP, init[i], rng=rng, **kw) for i in range(n)], init


def make_drivers(net: FakeNet, sinks: Sequence[Durations] | None = None,
                 **kw: object) -> list[GossipDriver]:
    kw.setdefault("push_timeout", TIMEOUT)
    return [GossipDriver({"G": core}, net.transport(peer), net.holders(peer, seed=i),
                         push_durations=None if sinks is None else sinks[i], **kw)
            for i, (peer, core) in enumerate(net.cores.items())]


async def test_fault_free_rounds_conserve_mass_and_converge(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cores, init = make_cores(5)
    net = FakeNet(cores)
    durations = [Durations() for _ in cores]
    drivers = make_drivers(net, durations, pushes_per_round=2)
    async with trio.open_nursery() as nursery:
        for d in drivers:
            await nursery.start(d.run)
        for _ in range(30):
            for d in drivers:
                d.signal_round()
            await trio.sleep(1.0)  # virtual: every wave of the round has finished
        nursery.cancel_scope.cancel()
    assert all(c.outstanding == 0 for c in cores)
    assert abs(net.total_weight() - 5.0) <= 1e-9 * 5
    np.testing.assert_allclose(net.total_mass(), init.sum(axis=0), rtol=1e-9)
    values = np.array([c.values for c in cores])
    np.testing.assert_allclose(values, np.tile(init.mean(axis=0), (5, 1)), rtol=1e-6)
    # two waves per round, every push acknowledged after exactly the fake latency
    acked = [len(s.seen) for s in durations]
    assert sum(acked) == sum(c.counters.acks for c in cores) == 5 * 30 * 2
    assert all(t == pytest.approx(LATENCY) for s in durations for t in s.seen)
    assert all(not d.peer_failures for d in drivers)


async def test_maybe_delivered_push_is_retransmitted_with_the_same_id(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cores, init = make_cores(2)
    a, b = cores
    A, B = node_id(0), node_id(1)

    def ack_lost(src: bytes, dst: bytes, push: Push, attempt: int) -> Exception | None:
        if src == A and attempt == 1:
            b.on_push(src, push, trio.current_time())  # merged, then the reply is lost
            return PushUndelivered("reply timed out", maybe_delivered=True)
        return None

    net = FakeNet(cores, ack_lost)
    driver = GossipDriver({"G": a}, net.transport(A), lambda fp, k: [B], push_timeout=TIMEOUT)
    await driver.push_wave()
    [(_, _, first_id)] = net.sent
    assert a.outstanding == 1 and a.weight == 1.0  # kept: it may have been merged
    assert driver.peer_failures == {B: 1}
    await driver.push_wave()  # too early to retransmit; a new push must wait too
    assert len(net.sent) == 1
    await trio.sleep(TIMEOUT)
    await driver.push_wave()
    assert net.sent[1] == (A, B, first_id)  # the retransmission, same id
    assert b.counters.duplicates == 1 and b.counters.pushes_received == 1  # merged once
    assert a.outstanding == 0 and a.counters.retransmissions == 1
    assert driver.peer_failures == {}  # the ack cleared the failure count
    assert a.weight + b.weight == pytest.approx(2.0, rel=1e-12)
    np.testing.assert_allclose(a.mass + b.mass, init.sum(axis=0), rtol=1e-12)


async def test_retransmission_that_surely_failed_stays_outstanding(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cores, init = make_cores(2)
    a, b = cores
    A, B = node_id(0), node_id(1)

    def fault(src: bytes, dst: bytes, push: Push, attempt: int) -> Exception | None:
        if attempt == 1:
            b.on_push(src, push, trio.current_time())
            return PushUndelivered("connection lost", maybe_delivered=True)
        if attempt == 2:
            return PushUndelivered("connection refused", maybe_delivered=False)
        return None

    net = FakeNet(cores, fault)
    driver = GossipDriver({"G": a}, net.transport(A), lambda fp, k: [B], push_timeout=TIMEOUT)
    for failures in (1, 2):  # maybe merged, then a retransmission surely not delivered
        await driver.push_wave()
        assert a.outstanding == 1 and a.weight == 1.0 and driver.peer_failures == {B: failures}
        await trio.sleep(TIMEOUT)
    await driver.push_wave()  # the second retransmission gets the ack
    assert [push_id for _, _, push_id in net.sent] == [net.sent[0][2]] * 3
    assert driver.peer_failures == {}
    assert a.outstanding == 0 and a.counters.failures == 0
    assert a.weight + b.weight == pytest.approx(2.0, rel=1e-12)
    np.testing.assert_allclose(a.mass + b.mass, init.sum(axis=0), rtol=1e-12)


@pytest.mark.parametrize(
    ("error", "counted"),
    [(PushRefused("peer does not hold that model"), False),
     (PushUndelivered("connection refused", maybe_delivered=False), True)],
)
async def test_surely_undelivered_push_keeps_the_weight(
    autojump_clock: trio.testing.MockClock, error: Exception, counted: bool,
) -> None:
    cores, init = make_cores(2)
    a, b = cores
    A, B = node_id(0), node_id(1)
    net = FakeNet(cores, lambda src, dst, push, attempt: error)
    driver = GossipDriver({"G": a}, net.transport(A), lambda fp, k: [B], push_timeout=TIMEOUT)
    await driver.push_wave()
    assert a.weight == 1.0 and a.outstanding == 0 and a.counters.failures == 1
    np.testing.assert_array_equal(a.values, init[0])
    assert b.counters.pushes_received == 0
    assert driver.peer_failures == ({B: 1} if counted else {})
    await driver.push_wave()  # forgotten, so the next wave pushes again at once
    assert len(net.sent) == 2 and net.sent[0][2] != net.sent[1][2]
    assert driver.peer_failures == ({B: 2} if counted else {})


async def test_noisy_cores_keep_mixing_until_the_noise_is_folded_in(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cores, init = make_cores(3, dim=50, privacy="masked", masked_pushes=2, unmask_after=5)
    net = FakeNet(cores)
    drivers = make_drivers(net)
    async with trio.open_nursery() as nursery:
        for d in drivers:
            await nursery.start(d.run)
        for d in drivers:  # one round only, of one wave each: a masked push per node
            d.signal_round()
        await trio.sleep(1.2 * LATENCY)
        assert all(d.noisy for d in drivers)  # the masked pushes were acknowledged
        # no more rounds: the drivers keep mixing on their own until the masks cancel
        with trio.fail_after(60):
            while any(c.noisy or c.outstanding for c in cores):
                await trio.sleep(0.1)
        nursery.cancel_scope.cancel()
    # the noise ages only with pushes made: unmask_after of them at least, per core
    assert len(net.sent) >= 3 * 5
    assert all(c.counters.unmasks >= 1 and c.counters.masked_sent == 2 for c in cores)
    np.testing.assert_allclose(net.total_mass(), init.sum(axis=0), rtol=1e-9, atol=1e-9)
    assert abs(net.total_weight() - 3.0) <= 1e-9 * 3


async def test_quiet_cores_push_only_after_a_round(autojump_clock: trio.testing.MockClock) -> None:
    cores, _ = make_cores(2)
    net = FakeNet(cores)
    drivers = make_drivers(net, pushes_per_round=3)
    async with trio.open_nursery() as nursery:
        for d in drivers:
            await nursery.start(d.run)
        await trio.sleep(10.0)
        assert net.sent == []
        drivers[0].signal_round()
        await trio.sleep(10.0)
        assert len(net.sent) == 3 and all(src == node_id(0) for src, _, _ in net.sent)
        nursery.cancel_scope.cancel()


async def test_a_merge_that_brings_noise_starts_mixing_before_the_next_round(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cores, _ = make_cores(3, dim=20, privacy="masked", masked_pushes=2, unmask_after=5)
    net = FakeNet(cores)
    drivers = make_drivers(net)
    receivers = {peer: d for peer, d in zip(net.cores, drivers, strict=True)}
    inner = net.fault

    def merged_then_notify(src: bytes, dst: bytes, push: Push, attempt: int) -> Exception | None:
        exc = inner(src, dst, push, attempt) if inner else None
        if exc is None:  # as the node's push handler does after a merge
            trio.lowlevel.current_trio_token().run_sync_soon(receivers[dst].notify_merged)
        return exc

    net.fault = merged_then_notify
    async with trio.open_nursery() as nursery:
        for d in drivers:
            await nursery.start(d.run)
        drivers[0].signal_round()  # only node 0 trains: its masked push reaches a peer
        with trio.fail_after(60):
            while not any(d.noisy for d in drivers[1:]):
                await trio.sleep(0.01)
        receiver = next(p for p, d in receivers.items() if p != node_id(0) and d.noisy)
        await trio.sleep(20 * LATENCY)
        # the receiver pushed without ever finishing a round of its own
        assert any(src == receiver for src, _, _ in net.sent)
        nursery.cancel_scope.cancel()


async def test_quiet_merges_do_not_wake_the_driver(autojump_clock: trio.testing.MockClock) -> None:
    cores, _ = make_cores(2)
    net = FakeNet(cores)
    drivers = make_drivers(net)
    async with trio.open_nursery() as nursery:
        for d in drivers:
            await nursery.start(d.run)
        drivers[1].notify_merged()  # nothing noisy: no reason to push
        await trio.sleep(10.0)
        assert net.sent == []
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("settings", "key"),
    [({"push_timeout": 0.0}, "push_timeout"),
     ({"push_timeout": 1.0, "pushes_per_round": 0}, "pushes_per_round"),
     ({"push_timeout": 1.0, "noisy_wave_pause": -1.0}, "noisy_wave_pause")],
)
def test_driver_names_a_bad_setting(settings: dict[str, float], key: str) -> None:
    cores, _ = make_cores(1)
    net = FakeNet(cores)
    with pytest.raises(ValueError, match=key):
        GossipDriver({"G": cores[0]}, net.transport(node_id(0)), lambda fp, k: [], **settings)


# ----------------------------------------------------------------- the wave rule


def test_wave_rule_fixed_counts_waves() -> None:
    plan = WaveRule.parse(3).plan()
    assert plan.begin_round()
    steps = []
    for _ in range(4):
        steps.append(plan.next(drift=0.01, answers_due=0))
        plan.waves += 1
    assert steps == [Next.START, Next.START, Next.START, Next.STOP]


def test_auto_mixes_while_the_gap_exceeds_the_drift() -> None:
    plan = WaveRule(gap_ratio=2.0, max_waves=4).plan()
    assert plan.begin_round()
    assert plan.next(0.01, 0) is Next.START  # always one wave
    plan.waves = 1
    assert plan.next(0.01, 1) is Next.WAIT  # its answer decides
    plan.gaps.append(0.2)  # 20 rounds of drift apart: mix on
    assert plan.next(0.01, 0) is Next.START
    plan.waves, plan.gaps = 2, [0.2, 0.1]
    assert plan.next(0.01, 0) is Next.START
    plan.waves, plan.gaps = 3, [0.2, 0.1, 0.05]
    assert plan.next(0.01, 0) is Next.START
    plan.waves, plan.gaps = 4, [0.2, 0.1, 0.05, 0.04]
    assert plan.next(0.01, 0) is Next.STOP  # the cap
    plan.waves, plan.gaps = 2, [0.2, 0.015]
    assert plan.next(0.01, 0) is Next.STOP  # within 2 rounds of drift
    plan.waves, plan.gaps = 2, [0.05, 0.06]
    assert plan.next(0.01, 0) is Next.STOP  # no longer shrinking


def test_auto_spaces_rounds_out_while_one_wave_suffices() -> None:
    rule = WaveRule(gap_ratio=2.0, max_interval=3)
    plan = rule.plan()
    exchanged = []
    for _ in range(9):  # every exchange finds the gap within the drift at once
        go = plan.begin_round()
        exchanged.append(go)
        if go:
            plan.waves, plan.gaps = 1, [0.01]
            plan.end_round(0.01)
    assert exchanged == [True, False, True, False, False, True, False, False, True]
    assert [plan.begin_round() for _ in range(3)] == [False, False, True]
    plan.waves, plan.gaps = 3, [0.5, 0.3, 0.2]  # far apart again: after every round
    plan.end_round(0.01)
    assert plan.interval == 1 and plan.begin_round()


def test_auto_without_a_measure_makes_the_blind_waves() -> None:
    plan = WaveRule(blind_waves=2).plan()  # one-way pushes: no gap comes back
    plan.begin_round()
    assert plan.next(0.01, 0) is Next.START
    plan.waves = 1
    assert plan.next(0.01, 0) is Next.START
    plan.waves = 2
    assert plan.next(0.01, 0) is Next.STOP
    plan.end_round(0.01)
    assert plan.interval == 1


def test_auto_keeps_the_pace_of_the_last_trained_round() -> None:
    plan = WaveRule(gap_ratio=2.0).plan()
    plan.begin_round()
    plan.waves, plan.gaps = 2, [0.3, 0.015]
    assert plan.next(0.01, 0) is Next.STOP
    plan.begin_round()  # the node stopped training: drift 0
    plan.waves, plan.gaps = 1, [0.015]
    assert plan.next(0.0, 0) is Next.STOP  # judged against the last drift, not the floor


@pytest.mark.parametrize("value", [0, -1, 1.5, "often", True])
def test_wave_rule_names_a_bad_count(value: object) -> None:
    with pytest.raises(ValueError, match="pushes_per_round"):
        WaveRule.parse(value)  # type: ignore[arg-type]


# ----------------------------------------------------------------- auto and pipelining


async def _train_and_mix(drivers: Sequence[GossipDriver], cores: Sequence[PushSum],
                         rng: np.random.Generator, step: float) -> list[int]:
    """One round: every core moves by ``step`` (relative noise), then mixes; waves per node."""
    before = [sum(d.waves.values()) for d in drivers]
    for core in cores:
        values = core.values
        core.set_values(values + step * rng.normal(0.0, 1.0, values.shape) * np.abs(values))
    async with trio.open_nursery() as nursery:
        for d in drivers:
            nursery.start_soon(d.mix_round)
    return [sum(d.waves.values()) - b for d, b in zip(drivers, before, strict=True)]


async def test_auto_mixes_more_while_far_apart_and_less_once_close(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cores, init = make_cores(6, dim=64, seed=3, encoding="f64", delta_encoding="f64")
    net = FakeNet(cores)
    drivers = make_drivers(net, pushes_per_round="auto")
    rng = np.random.default_rng(7)
    first = await _train_and_mix(drivers, cores, rng, step=1e-3)
    for _ in range(30):
        await _train_and_mix(drivers, cores, rng, step=1e-3)
    late = [0] * len(cores)
    for _ in range(12):
        late = [a + b for a, b in zip(late, await _train_and_mix(drivers, cores, rng, 1e-3),
                                      strict=True)]
    # far apart (values N(1, 1), drift 0.1 %): several waves after the first round
    assert sum(first) >= 2.5 * len(cores)
    # once they agree to within a round's drift: fewer than one wave per round (trio's
    # scheduling order varies between runs: 41-56 of 72 node-rounds in 40 runs)
    assert sum(late) < 12 * len(cores)
    assert sum(late) / 12 < sum(first) / 3
    assert all(c.outstanding == 0 for c in cores)
    assert abs(net.total_weight() - len(cores)) <= 1e-9 * len(cores)


class _Concurrency:
    """Counts a sender's pushes in flight in a fake transport."""

    def __init__(self, inner: _FakeTransport) -> None:
        self.inner = inner
        self.now = 0
        self.peak = 0

    async def push(self, peer: bytes, push: Push) -> PushAck:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            return await self.inner.push(peer, push)
        finally:
            self.now -= 1


@pytest.mark.parametrize("in_flight", [1, 3])
async def test_pipelining_keeps_up_to_max_in_flight_pushes_going(
    autojump_clock: trio.testing.MockClock, in_flight: int,
) -> None:
    cores, init = make_cores(5, max_in_flight=in_flight)
    net = FakeNet(cores)
    me = node_id(0)
    others = [p for p in net.cores if p != me]
    turn = iter(range(10**6))

    def next_holder(fingerprint: bytes, count: int) -> list[bytes]:
        return [others[next(turn) % len(others)]]  # a different peer each time

    counted = _Concurrency(net.transport(me))
    driver = GossipDriver({"G": cores[0]}, counted, next_holder, push_timeout=TIMEOUT,
                          pushes_per_round=6)
    started = trio.current_time()
    await driver.mix_round()
    elapsed = trio.current_time() - started
    assert driver.waves["G"] == 6 and cores[0].counters.acks == 6
    assert counted.peak == in_flight
    # k in flight: the six exchanges take about 6/k round trips, not 6
    assert elapsed == pytest.approx(LATENCY * 6 / in_flight)
    assert abs(net.total_weight() - 5.0) <= 1e-9 * 5
    np.testing.assert_allclose(net.total_mass(), init.sum(axis=0), rtol=1e-9)


async def test_a_maybe_delivered_push_ends_the_round_and_is_retransmitted_later(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cores, init = make_cores(2)
    a, b = cores
    A, B = node_id(0), node_id(1)

    lost: list[int] = []

    def ack_lost(src: bytes, dst: bytes, push: Push, attempt: int) -> Exception | None:
        if not lost or push.push_id == lost[0] and attempt == 1:
            lost.append(push.push_id)
            b.on_push(src, push, trio.current_time())  # merged, then the reply is lost
            return PushUndelivered("reply timed out", maybe_delivered=True)
        return None

    net = FakeNet(cores, ack_lost)
    driver = GossipDriver({"G": a}, net.transport(A), lambda fp, k: [B], push_timeout=TIMEOUT,
                          pushes_per_round="auto")
    with trio.fail_after(TIMEOUT / 2):  # the round does not wait for the retransmission
        await driver.mix_round()
    assert len(net.sent) == 1 and a.outstanding == 1 and a.weight == 1.0
    await trio.sleep(TIMEOUT)
    await driver.mix_round()  # the retransmission first, then this round's new exchange
    assert net.sent[1] == net.sent[0]  # same push id, merged once
    later = [push_id for _, _, push_id in net.sent[2:]]
    assert later and net.sent[0][2] not in later
    assert b.counters.duplicates == 1 and b.counters.pushes_received == 1 + len(later)
    assert a.outstanding == 0
    assert a.weight + b.weight == pytest.approx(2.0, rel=1e-12)
    np.testing.assert_allclose(a.mass + b.mass, init.sum(axis=0), rtol=1e-9)


async def test_auto_skipping_a_round_still_retransmits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cores, _ = make_cores(2)
    a, _b = cores
    A, B = node_id(0), node_id(1)
    net = FakeNet(cores, lambda src, dst, push, attempt:
                  PushUndelivered("reply timed out", maybe_delivered=True) if attempt == 1
                  else None)
    driver = GossipDriver({"G": a}, net.transport(A), lambda fp, k: [B], push_timeout=TIMEOUT,
                          pushes_per_round="auto")
    await driver.mix_round()
    driver.plans["G"].interval = 3  # as if one wave had sufficed lately
    await trio.sleep(TIMEOUT)
    await driver.mix_round()  # a skipped round: no new push, the expired one goes again
    assert [push_id for _, _, push_id in net.sent] == [net.sent[0][2]] * 2
    assert a.outstanding == 0 and driver.waves["G"] == 1
