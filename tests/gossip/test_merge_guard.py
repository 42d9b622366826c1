"""Merge defences of the push-sum core (gossip.merge_guard, issue 11 item 3)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from lab.sim.adversaries import HeavyPusher, MaskLookalike, Poisoner, Sink
from lab.sim.pushsum import ModelSpec, Simulation

from gossip import GuardSettings, MergeGuard, Push, PushAck, PushSum, RefusedByGuard, encode

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


def test_net_balance_per_sender_caps_what_it_hands_us_and_decays() -> None:
    settings = GuardSettings(balance_cap=2.0, balance_halflife=10.0)
    b = core(guard=settings)
    same = [1.0, 2.0, 3.0]
    b.on_push(LIAR, push(same, 0.9, 1), 0.0)  # balance 0.9
    b.on_push(LIAR, push(same, 1.0, 2), 0.0)  # 1.9
    assert refused(b, LIAR, push(same, 0.2, 3), 0.0) == "weight_balance"  # 2.1 > 2
    b.on_push(LIAR, push(same, 0.1, 4), 0.0)  # exactly the cap: 2.0
    b.on_push(A, push(same, 0.9, 1), 0.0)  # another sender has its own balance
    assert refused(b, LIAR, push(same, 0.7, 5), 5.0) == "weight_balance"  # 2 / sqrt 2 + .7
    b.on_push(LIAR, push(same, 0.9, 6), 10.0)  # halved: 1.0 + 0.9 <= 2
    assert b.weight == pytest.approx(1 + 0.9 + 1.0 + 0.1 + 0.9 + 0.9)


def test_weight_given_back_restores_the_senders_balance() -> None:
    settings = GuardSettings(balance_cap=1.0, balance_halflife=1e9)
    b = core(exchange="push", guard=settings)
    same = [1.0, 2.0, 3.0]
    b.on_push(A, push(same, 0.6, 1), 0.0)  # balance 0.6
    assert refused(b, A, push(same, 0.5, 3), 0.0) == "weight_balance"  # 1.1 > 1
    [(peer, mine)] = b.make_pushes([A], 0.0)  # we hand A 1.6 / 2 = 0.8 back: -> -0.2
    b.on_ack(A, PushAck(FP, mine.push_id), 0.0)
    b.on_push(A, push(same, 0.5, 4), 0.0)  # 0.3
    assert b.weight == pytest.approx(1.6 - 0.8 + 0.5)


def test_no_push_to_a_peer_we_already_gave_the_cap() -> None:
    a = core(exchange="push", guard=GuardSettings(balance_cap=0.6, balance_halflife=10.0))
    [(_, first)] = a.make_pushes([B], 0.0)  # share 0.5: balance with B -0.5
    a.on_ack(B, PushAck(FP, first.push_id), 0.0)
    assert a.make_pushes([B], 0.0) == []  # -0.5 - 0.25 (the next whole share) < -0.6
    assert a.counters.guard_held == 1
    [(peer, _)] = a.make_pushes([B, A], 0.0)  # the next candidate takes the slot
    assert peer == A


def test_a_balance_halves_every_halflife() -> None:
    a = core(exchange="push", guard=GuardSettings(balance_cap=0.6, balance_halflife=10.0))
    [(_, first)] = a.make_pushes([B], 0.0)
    a.on_ack(B, PushAck(FP, first.push_id), 0.0)  # -0.5
    assert a.make_pushes([B], 5.0) == []  # -0.354 - 0.25 = -0.604 < -0.6
    assert len(a.make_pushes([B], 10.0)) == 1  # -0.25 - 0.25 = -0.5 >= -0.6


def test_masked_flags_only_where_the_receiver_masks_and_rate_limited() -> None:
    none = core()
    assert refused(none, LIAR, push([10.0, -10.0, 5.0], 0.5, masked=True, noisy=True)) == \
        "flag_mode"
    assert refused(none, LIAR, push([1.0, 2.0, 3.0], 0.5, noisy=True, noise_age=3)) == \
        "flag_mode"
    masked = core(privacy="masked", guard=GuardSettings(flag_budget=2, flag_period=100.0,
                                                         balance_cap=50.0))
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
    b = core(honest[0], guard=GuardSettings(clip_factor=2.0))  # the factor this pins
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
    settings = GuardSettings(sink_pause=10.0)
    a = core(guard=settings)
    [(_, request)] = a.make_pushes([LIAR], 0.0)
    a.on_ack(LIAR, PushAck(FP, request.push_id), 0.0)  # a sink: took the share, no reply
    assert a.make_pushes([LIAR], 1.0) == []
    assert len(a.make_pushes([LIAR], 11.0)) == 1  # forgiven after sink_pause


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


def test_clip_debt_charges_a_poisoners_kick_in_full_and_an_honest_outlier_little() -> None:
    guard = MergeGuard(GuardSettings())
    # clipped_away = share (1 - tau / |update|)
    assert guard.clip_charge(0.5, 0.5 * (1 - 1e-5)) == pytest.approx(0.5 * (1 - 1e-5))
    lagging = guard.clip_charge(0.5, 0.5 * (1 - 1 / 10))  # 10 x the radius: a quarter
    assert lagging == pytest.approx(0.45 * 0.25)
    assert guard.clip_charge(0.5, 0.0) == 0.0


def test_a_sender_over_its_clip_debt_is_refused_by_name() -> None:
    rng = np.random.default_rng(5)
    honest = rng.normal(0.0, 1.0, size=(4, 50))
    b = core(honest[0])
    for i, row in enumerate(honest[1:]):  # three honest exchanges set the radius
        b.on_push(bytes([i]), push(row, 0.25, 100 + i, want_reply=True), float(i))
    rules = []
    for k in range(4):  # poisoned requests: each clipped away almost whole
        p = push(1e5 * rng.standard_normal(50), 0.5, 200 + k, want_reply=True)
        try:
            b.on_push(LIAR, p, 10.0)
            rules.append("merged")
        except RefusedByGuard as exc:
            rules.append(exc.rule)
    assert rules == ["merged", "merged", "clip_debt", "clip_debt"]
    b.on_push(LIAR, push(1e5 * rng.standard_normal(50), 0.5, 300, want_reply=True), 40.0)


def test_the_fold_floor_of_the_clip_radius_lasts_fold_floor_merges_checks() -> None:
    # Issue 12: after a masking epoch's fold the radius is at least clip_factor x the
    # training the fold added, for each sender's first fold_floor_merges clip checks only:
    # a poisoner gets the wider radius right after a fold, not until the next one.
    from gossip.merge_guard import ClipRadius

    settings = GuardSettings(clip_factor=4.0, fold_floor_merges=3)
    clip = ClipRadius(settings)
    for k in range(4):
        clip.note_partner(bytes([k + 1]) * 8)  # holders we pushed to: their norms count
        clip.record(bytes([k + 1]) * 8, 0.01)  # a round's drift
    s, t = bytes([1]) * 8, bytes([2]) * 8
    assert clip.radius(1.0, s) == pytest.approx(0.04)
    clip.note_fold(0.5)  # an epoch of training
    for _ in range(3):
        assert clip.fold_floor(s) == pytest.approx(2.0)
        assert clip.radius(1.0, s) == pytest.approx(2.0)
        assert clip.radius(1.0, s, with_fold_floor=False) == pytest.approx(0.04)
        clip.record(s, 0.01)
    assert clip.fold_floor(s) == 0.0
    assert clip.radius(1.0, s) == pytest.approx(0.04)
    # another sender still has its own checks; a reply's check spends none
    clip.record(t, 0.01, fold_check=False)
    assert clip.radius(1.0, t) == pytest.approx(2.0)
    clip.note_fold(0.5)  # the next fold: a fresh floor
    assert clip.radius(1.0, s) == pytest.approx(2.0)
    assert ClipRadius(GuardSettings(fold_floor_merges=0)).fold_floor(s) == 0.0
    with pytest.raises(ValueError, match="fold_floor_merges"):
        GuardSettings(fold_floor_merges=-1)
    with pytest.raises(ValueError, match="jump"):
        clip.note_fold(float("nan"))


def test_one_sender_cannot_spend_the_fold_floor_of_the_others() -> None:
    # A burst of pushes from one peer right after our fold spends its own floor only;
    # identities first seen after the fold get none (fake ones cannot widen more).
    from gossip.merge_guard import ClipRadius

    settings = GuardSettings(clip_factor=4.0, fold_floor_merges=3)
    clip = ClipRadius(settings)
    honest, liar = b"h" * 8, b"z" * 8
    for sender in (honest, liar, b"a" * 8, b"b" * 8):
        clip.note_partner(sender)  # holders we pushed to: their norms count
        clip.record(sender, 0.01)  # clear updates before the fold
    clip.note_fold(0.5)
    for _ in range(20):
        clip.record(liar, 5.0)  # refused or not, each is one of z's checks
    assert clip.radius(1.0, liar) < 2.0
    assert clip.radius(1.0, honest) == pytest.approx(2.0)  # an honest holder's push
    for k in range(10):
        fake = bytes([200 + k]) * 8
        assert clip.fold_floor(fake) == 0.0  # not a sender before the fold
        clip.note_partner(fake)
        clip.record(fake, 0.01)
    assert clip.fold_floor(honest) == pytest.approx(2.0)
    assert ClipRadius(settings).fold_floor(honest) == 0.0  # no fold yet: no floor
