"""Push targets driven by exchange outcomes (gossip.partner_choice): sinks lose their place."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
import trio
import trio.testing
from lab.sim.pushsum import model_fingerprint, node_id

from gossip import GossipDriver, PartnerChoice, PartnerSettings, Push, PushAck, PushSum
from gossip.compression import encode

FP = model_fingerprint("G")
LATENCY = 0.01


def request(weight: float = 0.5, *, want_reply: bool = True) -> Push:
    return Push(model=FP, push_id=1, values=encode(np.zeros(3, dtype=np.float32), "f32"),
                weight=weight, want_reply=want_reply)


def reply_ack(weight: float) -> PushAck:
    return PushAck(FP, 1, reply=encode(np.zeros(3, dtype=np.float32), "f32"),
                   reply_weight=weight)


def test_outcomes_of_answers() -> None:
    p = PartnerChoice(random.Random(0))
    assert p.on_answer(b"a", request(0.5), reply_ack(0.4), 0.0) == "reciprocated"
    assert p.is_proven(b"a")
    assert p.on_answer(b"b", request(0.5), PushAck(FP, 1), 0.0) == "took"
    assert not p.is_proven(b"b") and p.is_paused(b"b", 59.0) and not p.is_paused(b"b", 60.0)
    # a small reply (honest weights may differ several-fold) proves nothing, blames nothing
    assert p.on_answer(b"c", request(0.5), reply_ack(0.01), 0.0) == "neutral"
    # one-way pushes tell nothing
    assert p.on_answer(b"d", request(want_reply=False), PushAck(FP, 1), 0.0) == "neutral"
    assert not p.is_proven(b"c") and not p.is_paused(b"c", 0.0)
    assert not p.is_proven(b"d") and not p.is_paused(b"d", 0.0)


def test_strikes_double_the_pause_and_a_reply_clears_them() -> None:
    p = PartnerChoice(random.Random(0), PartnerSettings(strike_pause=10.0, max_pause=35.0))
    assert [p.strike(b"s", 0.0) for _ in range(4)] == [10.0, 20.0, 35.0, 35.0]
    p.reciprocated(b"s")
    assert p.is_proven(b"s") and not p.is_paused(b"s", 1.0)
    assert p.strike(b"s", 0.0) == 10.0 and not p.is_proven(b"s")


def test_choice_prefers_proven_once_unproven_peers_took() -> None:
    p = PartnerChoice(random.Random(1), PartnerSettings(explore=0.25))
    honest = [b"h1", b"h2"]
    fakes = [bytes([i]) * 4 for i in range(20)]
    for h in honest:
        p.reciprocated(h)
    # no unproven peer took anything yet: the pick is uniform over all candidates
    assert p.trust == 1.0
    picks = Counter(p.choose(fakes + honest, 1, 0.0)[0] for _ in range(4000))
    assert sum(picks[h] for h in honest) / 4000 == pytest.approx(2 / 22, abs=0.02)
    # twenty other unproven peers took shares: the trust in unproven ones falls, and
    # every slot but the explored quarter goes to a proven partner
    for i in range(20):
        p.strike(b"gone" + bytes([i]), 0.0)
    assert p.trust < 0.15
    picks = Counter(p.choose(fakes + honest, 1, 0.0)[0] for _ in range(4000))
    share = sum(picks[h] for h in honest) / 4000
    assert share == pytest.approx(0.75, abs=0.03)
    assert picks[b"h1"] == pytest.approx(picks[b"h2"], rel=0.15)
    # a paused peer is never chosen; k distinct targets, proven ones first in expectation
    for f in fakes:
        p.strike(f, 0.0)
    assert all(set(p.choose(fakes + honest, 3, 1.0)) == set(honest) for _ in range(50))
    assert p.choose(fakes, 2, 1.0) == []
    assert len(set(p.choose(fakes, 5, 1e9))) == 5  # pauses end


def test_without_proofs_the_choice_is_uniform() -> None:
    p = PartnerChoice(random.Random(2))
    peers = [bytes([i]) for i in range(10)]
    picks = Counter(p.choose(peers, 1, 0.0)[0] for _ in range(5000))
    assert set(picks) == set(peers)
    assert max(picks.values()) < 1.3 * min(picks.values())


@pytest.mark.parametrize("bad", [
    {"explore": 1.5}, {"strike_pause": 0.0}, {"max_pause": 1.0}, {"candidates": 0},
    {"max_peers": True},
])
def test_settings_are_checked(bad: dict[str, object]) -> None:
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        PartnerSettings(**bad)  # type: ignore[arg-type]


class SinkNet:
    """Honest push-sum cores plus sinks that ack every push and give nothing back."""

    def __init__(self, honest: int, sinks: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.init = rng.normal(1.0, 1.0, size=(honest, 4))
        self.cores = {node_id(i): PushSum(FP, self.init[i], rng=rng) for i in range(honest)}
        self.sinks = {node_id(1000 + i) for i in range(sinks)}
        self.to_sinks = 0
        self.to_honest = 0
        self.pairs: Counter[tuple[bytes, bytes]] = Counter()  # (sender, receiver) -> pushes

    def holders(self, me: bytes, seed: int) -> object:
        rng = random.Random(seed)
        everyone = [p for p in [*self.cores, *self.sinks] if p != me]

        def pick(fingerprint: bytes, count: int) -> list[bytes]:
            return rng.sample(everyone, min(count, len(everyone)))

        return pick

    def transport(self, me: bytes) -> object:
        net = self

        class Transport:
            async def push(self, peer: bytes, push: Push) -> PushAck:
                await trio.sleep(LATENCY)
                if peer in net.sinks:
                    net.to_sinks += 1
                    return PushAck(push.model, push.push_id)
                net.to_honest += 1
                net.pairs[me, peer] += 1
                return net.cores[peer].on_push(me, push, trio.current_time())

        return Transport()


async def run_rounds(net: SinkNet, partners: bool, rounds: int) -> list[GossipDriver]:
    drivers = [
        GossipDriver({"G": core}, net.transport(peer), net.holders(peer, i),  # type: ignore[arg-type]
                     push_timeout=1.0, pushes_per_round=1,
                     partners=PartnerChoice(random.Random(i)) if partners else None)
        for i, (peer, core) in enumerate(net.cores.items())]
    async with trio.open_nursery() as nursery:
        for d in drivers:
            await nursery.start(d.run)
        for _ in range(rounds):
            for d in drivers:
                d.signal_round()
            await trio.sleep(1.0)
        nursery.cancel_scope.cancel()
    return drivers


async def test_sinks_lose_their_place_among_push_targets(
    autojump_clock: trio.testing.MockClock,
) -> None:
    uniform = SinkNet(3, 20)
    await run_rounds(uniform, False, 100)
    assert uniform.to_honest / (uniform.to_honest + uniform.to_sinks) < 0.2
    chosen = SinkNet(3, 20)
    drivers = await run_rounds(chosen, True, 100)
    # each sink is tried once, paused 60 s, tried once more, then paused 120 s
    assert chosen.to_sinks <= 2 * 3 * 20
    assert chosen.to_honest / (chosen.to_honest + chosen.to_sinks) > 0.7
    assert all(d.partners is not None and d.partners.proven_count() == 2 for d in drivers)


async def test_honest_swarm_mixes_as_with_uniform_targets(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # with no attacker the choice stays uniform over the holders: no push lost, every
    # pair used about as evenly as with uniform targets, the same convergence
    for partners in (False, True):
        net = SinkNet(8, 0, seed=3)
        drivers = await run_rounds(net, partners, 14)
        assert net.to_honest == 8 * 14  # one push per node and round, none skipped
        total_w = sum(c.weight for c in net.cores.values())
        assert total_w == pytest.approx(8.0, rel=1e-9)
        values = np.array([c.values for c in net.cores.values()])
        assert float(np.abs(values - net.init.mean(axis=0)).max()) < 1e-2
        # 14 pushes over 7 peers each: uniform targets use ~6.3 of them on average
        assert len(net.pairs) >= 45
        if partners:
            assert all(d.partners is not None and d.partners.trust == 1.0 for d in drivers)
