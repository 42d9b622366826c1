"""Sinks under the merge guard: a member that takes pushes and gives no weight back."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from lab.sim.adversaries import Sink, TakingSink
from lab.sim.pushsum import ModelSpec, Simulation

from gossip import GuardSettings, PushAck, PushSum, encode

FP = bytes(range(32))
A, B, LIAR = b"node-a", b"node-b", b"liar"


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="gossip.pushsum")


def core(values=(1.0, 2.0, 3.0), **kw) -> PushSum:
    kw.setdefault("rng", np.random.default_rng(0))
    kw.setdefault("guard", GuardSettings(sink_pause=10.0))
    return PushSum(FP, np.array(values, dtype=np.float64), **kw)


def test_a_plain_ack_to_a_request_keeps_the_share_and_pauses_the_peer() -> None:
    a = core()
    [(peer, request)] = a.make_pushes([LIAR], 0.0)
    assert peer == LIAR and request.want_reply
    before = a.weight, a.estimate.tobytes()
    a.on_ack(LIAR, PushAck(FP, request.push_id), 0.0)
    assert (a.weight, a.estimate.tobytes()) == before  # nothing left
    assert a.outstanding == 0 and a.counters.unreciprocated == 1
    # the next candidate takes the paused peer's place: the round is not lost
    [(peer, _)] = a.make_pushes([LIAR, B], 1.0)
    assert peer == B


def test_without_the_guard_a_plain_ack_takes_the_share() -> None:
    a = core(guard=None)
    [(_, request)] = a.make_pushes([LIAR], 0.0)
    a.on_ack(LIAR, PushAck(FP, request.push_id), 0.0)
    assert a.weight == pytest.approx(0.5)
    assert a.counters.unreciprocated == 0


def test_a_one_way_push_acked_plainly_still_gives_its_share() -> None:
    # one-way pushes ask no reply: a plain ack is the honest answer
    a = core(exchange="push")
    [(_, p)] = a.make_pushes([B], 0.0)
    a.on_ack(B, PushAck(FP, p.push_id), 0.0)
    assert a.weight == pytest.approx(0.5) and a.counters.unreciprocated == 0


def test_a_token_reply_is_merged_but_pauses_the_peer() -> None:
    a = core()
    [(_, request)] = a.make_pushes([LIAR], 0.0)
    zero = encode(np.zeros(3), "f32")
    a.on_ack(LIAR, PushAck(FP, request.push_id, reply=zero,
                           reply_weight=0.01 * request.weight), 0.0)
    assert a.weight == pytest.approx(1.0 - 0.99 * request.weight)
    assert a.make_pushes([LIAR], 1.0) == []
    assert len(a.make_pushes([LIAR], 11.0)) == 1  # paused for sink_pause only


def test_an_honest_exchange_between_guarded_nodes_is_reciprocated() -> None:
    a, b = core(), core(values=(3.0, 2.0, 1.0), rng=np.random.default_rng(1))
    for t in range(5):
        [(_, request)] = a.make_pushes([B], float(t))
        a.on_ack(B, b.on_push(A, request, float(t)), float(t))
        [(_, request)] = b.make_pushes([A], float(t))
        b.on_ack(A, a.on_push(B, request, float(t)), float(t))
    assert a.counters.unreciprocated == 0 and b.counters.unreciprocated == 0
    assert a.weight + b.weight == pytest.approx(2.0, abs=1e-12)
    mass = a.weight * a.estimate + b.weight * b.estimate
    assert mass == pytest.approx(np.array([4.0, 4.0, 4.0]), abs=1e-9)


def _honest_weights(liar: object, guard: GuardSettings | None, n: int = 8,
                    rounds: int = 60) -> list[float]:
    rng = np.random.default_rng(3)
    initial = rng.normal(1.0, 1.0, size=(n + 1, 20))
    sim = Simulation([ModelSpec("G", tuple(range(n + 1)), initial)], seed=3,
                     adversaries={n: liar}, guard=guard)  # type: ignore[dict-item]
    totals = []
    for _ in range(rounds):
        sim.step()
        totals.append(sim.total_weight("G", honest_only=True) / n)
    return totals


def test_simulated_plain_sink_takes_no_honest_weight() -> None:
    guarded = _honest_weights(Sink(), GuardSettings())
    assert min(guarded) == pytest.approx(1.0, abs=1e-9)
    assert min(_honest_weights(Sink(), None)) < 0.5  # it drains them without the guard


def test_simulated_taking_sink_leaves_half_the_honest_weight_after_60_rounds() -> None:
    guarded = _honest_weights(TakingSink(0.01), GuardSettings(sink_pause=60.0))
    assert guarded[-1] >= 0.5
    assert _honest_weights(TakingSink(0.01), None)[-1] < 0.5

