"""Merge defences of the push-sum core (gossip.merge_guard, issue 11 item 3)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from gossip import GuardSettings, Push, PushAck, PushSum, RefusedByGuard, encode
from gossip.attacks import HeavyPusher, MaskLookalike, Poisoner, Sink
from gossip.simulator import ModelSpec, Simulation

FP = bytes(range(32))
A, B, LIAR = b"node-a", b"node-b", b"liar"


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="gossip.pushsum")


def core(values=(1.0, 2.0, 3.0), **kw) -> PushSum:
    kw.setdefault("rng", np.random.default_rng(0))
    kw.setdefault("guard", GuardSettings())
    return PushSum(FP, np.array(values, dtype=np.float64), **kw)


def push(values, weight: float, push_id: int = 7, **kw) -> Push:
    return Push(FP, push_id, encode(np.asarray(values, dtype=np.float64), "f64"), weight, **kw)


def snapshot_of(ps: PushSum) -> tuple:
    return ps.weight, ps.estimate.tobytes(), ps.values.tobytes(), ps.counters.pushes_received


def refused(ps: PushSum, sender: bytes, p: Push, now: float = 0.0) -> str:
    before = snapshot_of(ps)
    with pytest.raises(RefusedByGuard) as info:
        ps.on_push(sender, p, now)
    assert snapshot_of(ps) == before  # nothing merged
    return info.value.rule


def test_a_share_beyond_the_ratio_is_refused_by_name() -> None:
    b = core()
    assert refused(b, LIAR, push([1.0, 2.0, 3.0], 9e5)) == "weight_share"
    assert refused(b, LIAR, push([1.0, 2.0, 3.0], 4.01)) == "weight_share"
    assert b.counters.guard_refused == 2 and b.counters.rejected == 2
    b.on_push(A, push([1.0, 2.0, 3.0], 0.5, 8), 0.0)  # an honest share
    assert b.weight == pytest.approx(1.5)


def test_without_a_guard_the_core_takes_any_weight_below_max_weight() -> None:
    b = core(guard=None)
    b.on_push(LIAR, push([1.0, 2.0, 3.0], 9e5), 0.0)
    assert b.weight == pytest.approx(9e5 + 1)


def test_net_weight_budget_per_sender_refills_with_time() -> None:
    settings = GuardSettings(weight_budget=1.0, weight_overdraft=1.0, budget_period=10.0)
    b = core(guard=settings)
    same = [1.0, 2.0, 3.0]
    b.on_push(LIAR, push(same, 0.9, 1), 0.0)  # budget 1 -> 0.1
    b.on_push(LIAR, push(same, 1.0, 2), 0.0)  # one overdraft (<= budget) -> -0.9
    assert refused(b, LIAR, push(same, 0.1, 3), 0.0) == "weight_budget"  # empty
    b.on_push(A, push(same, 0.9, 1), 0.0)  # another sender has its own bucket
    assert refused(b, LIAR, push(same, 0.1, 4), 9.0) == "weight_budget"  # -0.9 + 0.9 = 0
    b.on_push(LIAR, push(same, 0.1, 5), 9.5)  # refilled above 0
    assert b.weight == pytest.approx(1 + 0.9 + 1.0 + 0.9 + 0.1)


def test_weight_given_back_restores_the_senders_budget() -> None:
    settings = GuardSettings(weight_budget=1.0, weight_overdraft=1.0, budget_period=1e9)
    b = core(exchange="push", guard=settings)
    same = [1.0, 2.0, 3.0]
    b.on_push(A, push(same, 0.6, 1), 0.0)  # 1 -> 0.4
    b.on_push(A, push(same, 1.0, 2), 0.0)  # overdraft -> -0.6
    assert refused(b, A, push(same, 0.5, 3), 0.0) == "weight_budget"
    [(peer, mine)] = b.make_pushes([A], 0.0)  # we hand A weight 1.3 back: -> 0.7
    b.on_ack(A, PushAck(FP, mine.push_id), 0.0)
    b.on_push(A, push(same, 0.5, 4), 0.0)


def test_masked_flags_only_where_the_receiver_masks_and_rate_limited() -> None:
    none = core()
    assert refused(none, LIAR, push([10.0, -10.0, 5.0], 0.5, masked=True, noisy=True)) == \
        "flag_mode"
    assert refused(none, LIAR, push([1.0, 2.0, 3.0], 0.5, noisy=True, noise_age=3)) == \
        "flag_mode"
    masked = core(privacy="masked", guard=GuardSettings(flag_budget=2, flag_period=100.0,
                                                         weight_budget=50.0))
    masked.on_push(A, push([10.0, -10.0, 5.0], 0.5, 1, masked=True, noisy=True), 0.0)
    masked.on_push(A, push([10.0, -10.0, 5.0], 0.5, 2, masked=True, noisy=True), 0.0)
    assert masked.noisy
    assert refused(masked, A, push([1.0, 2.0, 3.0], 0.5, 3, noisy=True), 1.0) == "flag_budget"
    masked.on_push(A, push([1.0, 2.0, 3.0], 0.5, 4, noisy=True), 60.0)  # one refilled


def _exchange(a: PushSum, b: PushSum, now: float = 0.0) -> PushAck:
    [(_, request)] = a.make_pushes([B], now)
    ack = b.on_push(A, request, now)
    a.on_ack(B, ack, now)
    return ack


def test_a_clipped_request_moves_the_responder_by_at_most_its_radius_and_keeps_mass() -> None:
    rng = np.random.default_rng(3)
    honest = rng.normal(0.0, 1.0, size=(4, 50))
    b = core(honest[0])
    for i, row in enumerate(honest[1:]):  # three honest exchanges set the radius
        b.on_push(bytes([i]), push(row, 0.25, 100 + i, want_reply=True), float(i))
    poison = 1e5 * rng.standard_normal(50)
    a = core(poison, guard=None)  # the liar's core, to account its side exactly
    mass0, w0 = a.mass + b.mass, a.weight + b.weight
    x0, clipped = b.estimate, b.counters.clipped
    ack = _exchange(a, b)
    assert b.counters.clipped == clipped + 1 and ack.reply is not None
    moved = float(np.linalg.norm(b.estimate - x0))
    assert 0 < moved < 10.0  # instead of ~5e5: the radius is a few times honest distances
    np.testing.assert_allclose(a.mass + b.mass, mass0, rtol=0, atol=1e-9 * np.abs(mass0).max())
    assert a.weight + b.weight == pytest.approx(w0, rel=1e-15)


def test_a_one_way_push_beyond_the_radius_is_refused_and_kept_by_the_sender() -> None:
    b = core((1.0, 1.0, 1.0))
    b.on_push(A, push([1.1, 0.9, 1.0], 0.5, 1), 0.0)
    assert refused(b, LIAR, push([1e5, -1e5, 3e4], 0.5, 2)) == "clip"
    liar = core((1e5, -1e5, 3e4), exchange="push", guard=None)
    [(_, p)] = liar.make_pushes([B], 0.0)
    with pytest.raises(RefusedByGuard):
        b.on_push(LIAR, p, 0.0)
    liar.on_undelivered(p.push_id, maybe_delivered=False)  # refused: the weight stays
    assert liar.weight == 1.0


def test_a_poisoned_reply_is_clipped_at_the_initiator() -> None:
    a = core((1.0, 1.0, 1.0))
    for i in range(3):
        a.on_push(bytes([i]), push([1.1, 0.9, 1.0 + 0.01 * i], 0.25, 10 + i), float(i))
    [(_, request)] = a.make_pushes([LIAR], 5.0)
    q = np.array([1e5, -1e5, 3e4])
    reply = encode(q - 1.0, "f64")
    a.on_ack(LIAR, PushAck(FP, request.push_id, reply=reply, reply_weight=request.weight), 5.0)
    assert a.counters.clipped_replies == 1
    assert np.abs(a.estimate).max() < 5.0


def test_a_peer_answering_requests_with_plain_acks_gets_no_more_pushes() -> None:
    settings = GuardSettings(budget_period=10.0)
    a = core(guard=settings)
    [(_, request)] = a.make_pushes([LIAR], 0.0)
    a.on_ack(LIAR, PushAck(FP, request.push_id), 0.0)  # a sink: took the share, no reply
    assert a.make_pushes([LIAR], 1.0) == []
    assert len(a.make_pushes([LIAR], 11.0)) == 1  # forgiven after budget_period


def _honest_with(liar: object, n: int, rounds: int, guard: GuardSettings | None
                 ) -> tuple[list[float], Simulation, float]:
    """Honest total weights per round, the simulation, and the worst honest
    relative error against the honest initial mean at the end."""
    rng = np.random.default_rng(5)
    initial = rng.normal(1.0, 1.0, size=(n + 1, 30))
    sim = Simulation([ModelSpec("G", tuple(range(n + 1)), initial)], seed=5,
                     adversaries={n: liar}, guard=guard)  # type: ignore[dict-item]
    totals = []
    for _ in range(rounds):
        sim.step()
        totals.append(sim.total_weight("G", honest_only=True))
    m = initial[:n].mean(axis=0)
    xs = np.array([sim.cores[(i, "G")].estimate for i in sim.honest("G")])
    return totals, sim, float(np.linalg.norm(xs - m, axis=1).max() / np.linalg.norm(m))


def test_simulated_weight_liar_keeps_honest_total_weight_within_bounds() -> None:
    n = 16
    totals, _, _ = _honest_with(HeavyPusher(9e5), n, 40, GuardSettings())
    assert 0.5 * n <= min(totals) and max(totals) <= 2 * n
    unguarded, _, _ = _honest_with(HeavyPusher(9e5), n, 3, None)
    assert max(unguarded) > 1000 * n  # the attack does work without the defences


def test_simulated_poison_and_mask_lookalikes_stay_far_from_the_unguarded_damage() -> None:
    n = 12
    for liar in (Poisoner, MaskLookalike):
        _, _, error = _honest_with(liar(), n, 15, GuardSettings())
        _, _, unguarded = _honest_with(liar(), n, 15, None)
        assert error < 1.0 and unguarded > 1.5


def test_simulated_sink_leaves_half_the_honest_weight() -> None:
    n = 16
    totals, _, _ = _honest_with(Sink(), n, 60, GuardSettings())
    assert min(totals) >= 0.5 * n
    unguarded, _, _ = _honest_with(Sink(), n, 60, None)
    assert min(unguarded) < 0.5 * n
