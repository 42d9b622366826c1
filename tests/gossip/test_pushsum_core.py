"""Unit tests of the sans-IO push-sum core (gossip.pushsum)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from gossip import (
    EncodedVector,
    InvalidValues,
    Push,
    PushAck,
    PushSum,
    RejectedAck,
    RejectedPush,
    RejectedReply,
    UndeliveredOutcome,
    decode,
    encode,
)

FP = bytes(range(32))
OTHER_FP = bytes(32)
A, B, C = b"node-a", b"node-b", b"node-c"


def core(values=(1.0, 2.0, 3.0), **kw) -> PushSum:
    kw.setdefault("rng", np.random.default_rng(0))
    return PushSum(FP, np.array(values, dtype=np.float64), **kw)


def vec(values, encoding: str = "f64") -> EncodedVector:
    return encode(np.asarray(values, dtype=np.float64), encoding)


def raw(encoding: str, data: np.ndarray, scales: np.ndarray | None = None) -> EncodedVector:
    """An EncodedVector as a peer might send it, unchecked."""
    return EncodedVector(encoding, int(data.shape[0]) if data.ndim else 0, data,
                         np.zeros(0, np.float32) if scales is None else scales)


def state(ps: PushSum) -> tuple:
    return (ps.weight, ps.values.tobytes(), ps.estimate.tobytes(), ps.outstanding,
            ps.noisy, ps.counters.pushes_received, ps.counters.acks)


def test_push_moves_weight_only_on_ack() -> None:
    a, b = core((0.0, 0.0, 0.0), exchange="push"), core((3.0, 3.0, 3.0))
    [(peer, push)] = a.make_pushes([B], 0.0)
    assert peer == B and push.weight == pytest.approx(0.5) and a.weight == 1.0
    assert a.make_pushes([B], 0.1) == []  # one outstanding push at a time
    ack = b.on_push(A, push, 0.1)
    assert b.weight == pytest.approx(1.5)
    np.testing.assert_allclose(b.values, [2.0, 2.0, 2.0])  # (3*1 + 0*0.5) / 1.5
    assert a.weight == 1.0
    a.on_ack(B, ack, 0.2)
    assert a.weight == pytest.approx(0.5) and a.outstanding == 0
    assert a.weight + b.weight == pytest.approx(2.0)
    np.testing.assert_allclose(a.mass + b.mass, [3.0, 3.0, 3.0])


def test_fanout_splits_weight() -> None:
    a = core(fanout=3)
    pushes = a.make_pushes([B, C, B, b"d", b"e"], 0.0)
    assert [p for p, _ in pushes] == [B, C, b"d"]
    assert all(push.weight == pytest.approx(0.25) for _, push in pushes)


def test_failure_and_expiry_keep_weight() -> None:
    a = core(max_attempts=2, give_up_after=2)
    [(_, push)] = a.make_pushes([B], 0.0)
    assert a.on_failure(push.push_id) and a.weight == 1.0 and a.outstanding == 0
    assert not a.on_failure(push.push_id)
    [(_, push)] = a.make_pushes([B], 1.0)
    assert a.expire(1.5, timeout=1.0) == []
    assert a.expire(2.0, timeout=1.0) == [(B, push)]  # retransmission, same id
    assert a.expire(3.0, timeout=1.0) == [] and a.outstanding == 0
    assert a.weight == 1.0 and a.counters.failures == 2 and a.counters.retransmissions == 1


def test_retransmitted_push_merged_once() -> None:
    a, b = core(), core((5.0, 5.0, 5.0))
    [(_, push)] = a.make_pushes([B], 0.0)
    b.on_push(A, push, 0.1)  # its ack is lost
    before = state(b)
    [(_, again)] = a.expire(2.0, timeout=1.0)
    ack = b.on_push(A, again, 2.1)
    assert state(b) == before and b.counters.duplicates == 1
    a.on_ack(B, ack, 2.2)
    assert a.weight + b.weight == pytest.approx(2.0)


def test_duplicate_and_unexpected_acks_rejected(caplog: pytest.LogCaptureFixture) -> None:
    a, b = core(), core()
    [(_, push)] = a.make_pushes([B], 0.0)
    ack = b.on_push(A, push, 0.1)
    with pytest.raises(RejectedAck, match="came from"):
        a.on_ack(C, ack, 0.2)  # wrong peer
    a.on_ack(B, ack, 0.2)
    before = state(a)
    with caplog.at_level(logging.WARNING, logger="gossip.pushsum"):
        with pytest.raises(RejectedAck, match="duplicate"):
            a.on_ack(B, ack, 0.3)
    assert "duplicate ack" in caplog.text
    with pytest.raises(RejectedAck, match="unexpected"):
        a.on_ack(B, PushAck(FP, 12345), 0.3)
    with pytest.raises(RejectedAck, match="fingerprint"):
        a.on_ack(B, PushAck(OTHER_FP, push.push_id), 0.3)
    assert state(a) == before and a.counters.rejected == 4


def _push(**kw) -> Push:
    fields = dict(model=FP, push_id=7, values=vec([1.0, 1.0, 1.0]), weight=0.5)
    fields.update(kw)
    return Push(**fields)


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (dict(model=OTHER_FP), "fingerprint"),
        (dict(values=vec(np.ones(4))), "length 4, expected 3"),
        (dict(values=raw("f32", np.ones(3))), "dtype"),
        (dict(values=raw("f64", np.array([1.0, np.nan, 1.0]))), "not finite"),
        (dict(values=raw("f64", np.array([1.0, np.inf, 1.0]))), "not finite"),
        (dict(values=vec([1.0, 1e300, 1.0])), "exceeds the bound"),
        (dict(values=raw("int8", np.ones(3, np.int8), np.array([-1.0], np.float32))),
         "negative"),
        (dict(values=raw("f12", np.ones(3))), "unknown encoding"),
        (dict(values=np.ones(3)), "EncodedVector"),
        (dict(want_reply=1), "want_reply"),
        (dict(weight=0.0), "weight"),
        (dict(weight=-0.5), "weight"),
        (dict(weight=float("nan")), "weight"),
        (dict(weight=1e300), "weight"),
        (dict(push_id=-1), "push_id"),
        (dict(noise_age=-3), "noise_age"),
    ],
)
def test_bad_push_rejected_without_change(bad: dict, match: str,
                                          caplog: pytest.LogCaptureFixture) -> None:
    b = core()
    before = state(b)
    with caplog.at_level(logging.WARNING, logger="gossip.pushsum"):
        with pytest.raises(RejectedPush, match=match):
            b.on_push(A, _push(**bad), 0.0)
    assert state(b) == before and b.counters.rejected == 1
    assert "rejected push" in caplog.text and len(caplog.records) == 1


def test_weight_bound_on_merge() -> None:
    b = core(max_weight=1.2)
    with pytest.raises(RejectedPush, match="max_weight"):
        b.on_push(A, _push(weight=0.5), 0.0)
    assert b.weight == 1.0


def test_set_values_validates() -> None:
    a = core()
    a.set_values(np.array([4.0, 5.0, 6.0], dtype=np.float32))
    assert a.values.dtype == np.float64
    np.testing.assert_array_equal(a.values, [4, 5, 6])
    for bad in (np.ones(2), np.array([1.0, np.nan, 2.0]), np.ones((3, 1))):
        with pytest.raises(InvalidValues):
            a.set_values(bad)
    np.testing.assert_array_equal(a.values, [4, 5, 6])


def test_constructor_validates() -> None:
    with pytest.raises(InvalidValues, match="fingerprint"):
        PushSum(b"short", np.ones(3))
    with pytest.raises(InvalidValues, match="privacy"):
        PushSum(FP, np.ones(3), privacy="secret")
    with pytest.raises(InvalidValues, match="weight"):
        PushSum(FP, np.ones(3), weight=0.0)


def test_masked_pushes_hide_values_and_restart_remasks() -> None:
    a = core(privacy="masked", masked_pushes=2, mask_std=100.0)
    b = core((0.0, 0.0, 0.0))
    for t in range(2):
        [(_, push)] = a.make_pushes([B], float(t))
        assert push.masked and push.noisy and push.noise_age == 0
        assert np.abs(decode(push.values, 3) - a.values).max() > 1.0  # the mask dominates
        a.on_ack(B, b.on_push(A, push, t + 0.1), t + 0.2)
    [(_, push)] = a.make_pushes([B], 2.0)
    assert not push.masked and push.noisy  # compensation is still held apart
    np.testing.assert_array_equal(a.values, [1.0, 2.0, 3.0])  # trained values untouched
    np.testing.assert_array_equal(b.values, [0.0, 0.0, 0.0])
    a.on_failure(push.push_id)
    snap = a.snapshot()
    assert not a.in_masked_phase
    a.restore(snap)
    assert a.in_masked_phase
    [(_, push)] = a.make_pushes([B], 3.0)
    assert push.masked


def test_noise_folded_in_after_unmask_after_rounds() -> None:
    a = core(privacy="masked", masked_pushes=1, unmask_after=3)
    b = core((1.0, 2.0, 3.0), unmask_after=3)
    [(_, push)] = a.make_pushes([B], 0.0)
    a.on_ack(B, b.on_push(A, push, 0.1), 0.2)
    assert a.noisy and b.noisy
    # calls that push nothing (no partner) do not age the noise: it is not mixing
    for t in range(10):
        a.make_pushes([], float(t))
    assert a.noisy
    # nor do pushes that nobody answers with pushes of its own: a one-way push
    # leaves the sender's estimate as it was (noise ages with merges received)
    for t in range(10):
        [(_, p)] = a.make_pushes([B], float(t))
        a.on_failure(p.push_id)
    assert a.noisy
    # each end merges unmask_after pushes of the other, then folds at its next push
    for t in range(1, 5):
        for x, y, ids in ((a, b, (A, B)), (b, a, (B, A))):
            [(_, p)] = x.make_pushes([ids[1]], float(t))
            x.on_ack(ids[1], y.on_push(ids[0], p, float(t)), float(t))
    assert not a.noisy and not b.noisy and a.counters.unmasks == 1
    # exact: both held identical values, so the masks cancel in the total
    np.testing.assert_allclose(a.mass + b.mass, 2 * np.array([1.0, 2.0, 3.0]), rtol=1e-12)


def test_push_equality_and_snapshot_roundtrip() -> None:
    p = _push()
    assert p == _push() and p != _push(weight=0.25) and p != _push(values=vec(np.zeros(3)))
    assert p != _push(values=vec([1.0, 1.0, 1.0], "f32")) and p != _push(want_reply=True)
    a = core()
    a2 = PushSum.from_snapshot(a.snapshot(), rng=np.random.default_rng(1))
    assert a2.weight == a.weight and np.array_equal(a2.values, a.values)


def test_unresolved_push_reserves_its_share() -> None:
    a, b = core(max_attempts=1, give_up_after=5, exchange="push"), core()
    [(_, push)] = a.make_pushes([B], 0.0)
    ack = b.on_push(A, push, 0.1)  # merged, ack lost
    assert a.make_pushes([C], 0.5) == []
    [(_, again)] = a.expire(1.0, timeout=1.0)  # now unresolved, retransmitted
    assert again == push and a.reserved_weight == pytest.approx(0.5)
    [(_, nxt)] = a.make_pushes([C], 1.5)  # no longer blocks; share from available weight
    assert nxt.weight == pytest.approx(0.25)
    a.on_ack(B, ack, 1.6)  # the late ack resolves it
    assert a.weight == pytest.approx(0.5) and a.reserved_weight == 0.0
    assert a.weight + b.weight == pytest.approx(2.0)


# ------------------------------------------------------- undelivered pushes


def test_first_attempt_surely_undelivered_is_forgotten_with_weight_kept() -> None:
    a = core()
    [(_, push)] = a.make_pushes([B], 0.0)
    assert a.on_undelivered(push.push_id, maybe_delivered=False) is UndeliveredOutcome.FORGOTTEN
    assert a.weight == 1.0 and a.outstanding == 0 and a.counters.failures == 1
    assert a.expire(10.0, timeout=1.0) == []  # nothing left to retransmit
    [(_, nxt)] = a.make_pushes([B], 1.0)  # no longer blocks new pushes
    assert nxt.push_id != push.push_id


def test_maybe_delivered_stays_outstanding_and_is_retransmitted() -> None:
    a, b = core(), core((5.0, 5.0, 5.0))
    [(_, push)] = a.make_pushes([B], 0.0)
    b.on_push(A, push, 0.1)  # merged; the ack is lost on the way back
    assert a.on_undelivered(push.push_id, maybe_delivered=True) is UndeliveredOutcome.OUTSTANDING
    assert a.outstanding == 1 and a.weight == 1.0 and a.counters.failures == 0
    assert a.make_pushes([C], 0.5) == []  # still blocks new pushes
    [(peer, again)] = a.expire(1.0, timeout=1.0)
    assert peer == B and again == push  # same id, same payload
    a.on_ack(B, b.on_push(A, again, 1.1), 1.2)  # merged once, acked again
    assert b.counters.duplicates == 1
    assert a.weight + b.weight == pytest.approx(2.0)
    np.testing.assert_allclose(a.mass + b.mass, [6.0, 7.0, 8.0])


def test_retransmission_is_never_forgotten() -> None:
    a, b = core(), core((5.0, 5.0, 5.0))
    [(_, push)] = a.make_pushes([B], 0.0)
    ack = b.on_push(A, push, 0.1)  # the first attempt was merged, its ack lost
    [(_, again)] = a.expire(1.0, timeout=1.0)
    # the retransmission surely did not arrive, but the first attempt did
    assert a.on_undelivered(again.push_id, maybe_delivered=False) is UndeliveredOutcome.OUTSTANDING
    assert not a.on_failure(again.push_id)  # the shorthand applies the same rule
    assert a.outstanding == 1 and a.counters.failures == 0
    a.on_ack(B, ack, 1.5)  # so a late ack still resolves it: mass is conserved
    assert a.weight + b.weight == pytest.approx(2.0)
    np.testing.assert_allclose(a.mass + b.mass, [6.0, 7.0, 8.0])


def test_retransmission_is_given_up_by_expire_only() -> None:
    a = core(max_attempts=2, give_up_after=3)
    [(_, push)] = a.make_pushes([B], 0.0)
    for t in (1.0, 2.0):
        [(_, again)] = a.expire(t, timeout=1.0)
        assert a.on_undelivered(again.push_id, False) is UndeliveredOutcome.OUTSTANDING
    assert a.expire(3.0, timeout=1.0) == [] and a.outstanding == 0
    assert a.weight == 1.0 and a.counters.failures == 1


def test_undelivered_unknown_push_changes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    a = core()
    before = state(a)
    with caplog.at_level(logging.WARNING, logger="gossip.pushsum"):
        assert a.on_undelivered(424242, maybe_delivered=True) is UndeliveredOutcome.UNKNOWN
    assert "not outstanding" in caplog.text
    assert state(a) == before and a.counters.failures == 0


# ------------------------------------------------------------ new exchange


def test_options_are_validated_with_clear_errors() -> None:
    for bad, match in ((dict(exchange="pull"), "exchange"), (dict(encoding="f8"), "encoding"),
                       (dict(delta_encoding="int4"), "delta_encoding"),
                       (dict(max_in_flight=0), "max_in_flight"),
                       (dict(max_in_flight=True), "max_in_flight"),
                       (dict(reply_store_bytes=-1), "reply_store_bytes"),
                       (dict(reference_store_bytes=-1), "reference_store_bytes"),
                       (dict(reference_store_bytes=1.5), "reference_store_bytes")):
        with pytest.raises(InvalidValues, match=match):
            core(**bad)


@pytest.mark.parametrize("encoding", ["f64", "f32", "f16", "bf16", "int8"])
def test_push_pull_reaches_the_pairwise_average_in_one_round_trip(encoding: str) -> None:
    a = core((0.0, 1.0, 2.0), encoding=encoding)
    b = core((4.0, 5.0, 6.0), encoding=encoding)
    [(_, push)] = a.make_pushes([B], 0.0)
    assert push.want_reply and push.values.encoding == encoding
    ack = b.on_push(A, push, 0.1)
    assert ack.reply is not None and ack.reply.encoding == "int8"
    assert ack.reply_weight == pytest.approx(0.5)
    a.on_ack(B, ack, 0.2)
    # equal weights: both ends at the pair's mean, the weights unchanged
    for end in (a, b):
        assert end.weight == pytest.approx(1.0)
        np.testing.assert_allclose(end.values, [2.0, 3.0, 4.0], rtol=0, atol=0.05)
    # and exactly conserved, whatever the encodings rounded
    assert a.weight + b.weight == pytest.approx(2.0, rel=1e-15)
    np.testing.assert_allclose(a.mass + b.mass, [4.0, 6.0, 8.0], rtol=1e-14)
    c = a.counters
    assert c.replies_received == 1 and b.counters.replies_sent == 1
    assert c.bytes_received == ack.nbytes and b.counters.bytes_sent == ack.nbytes
    assert a.last_gap == pytest.approx(np.sqrt(np.mean(16.0 * np.ones(3))) / np.sqrt(5 / 3),
                                       rel=0.05)


def test_rounding_residual_stays_with_the_sender() -> None:
    x = np.array([1.0 + 1e-4, 2.0 / 3.0, np.pi])
    a, b = core(x, exchange="push", encoding="f16"), core((0.0, 0.0, 0.0))
    [(_, push)] = a.make_pushes([B], 0.0)
    q = decode(push.values, 3)
    assert not np.array_equal(q, x)  # f16 rounded
    a.on_ack(B, b.on_push(A, push, 0.1), 0.2)
    np.testing.assert_array_equal(b.mass, 0.5 * q)  # the receiver has exactly what travelled
    np.testing.assert_allclose(a.mass, x - 0.5 * q, rtol=1e-15)  # the sender keeps the rest


def test_values_too_large_for_f16_travel_wider() -> None:
    a = core((1e5, 0.0, 1.0), encoding="f16")
    [(_, push)] = a.make_pushes([B], 0.0)
    assert push.values.encoding == "f32"
    np.testing.assert_array_equal(decode(push.values, 3), [1e5, 0.0, 1.0])


def test_retransmitted_request_gets_the_stored_reply_without_a_second_merge() -> None:
    a, b = core(), core((5.0, 5.0, 5.0))
    [(_, push)] = a.make_pushes([B], 0.0)
    first = b.on_push(A, push, 0.1)  # merged and answered; the ack is lost
    before = state(b)
    [(_, again)] = a.expire(2.0, timeout=1.0)
    second = b.on_push(A, again, 2.1)
    assert second is first and state(b) == before and b.counters.duplicates == 1
    a.on_ack(B, second, 2.2)
    assert a.weight + b.weight == pytest.approx(2.0)
    np.testing.assert_allclose(a.mass + b.mass, [6.0, 7.0, 8.0], rtol=1e-14)


def test_request_whose_stored_reply_was_evicted_is_refused_not_merged_twice() -> None:
    a, b = core(), core((5.0, 5.0, 5.0), reply_store_bytes=0)
    [(_, push)] = a.make_pushes([B], 0.0)
    b.on_push(A, push, 0.1)
    before = state(b)
    [(_, again)] = a.expire(2.0, timeout=1.0)
    with pytest.raises(RejectedPush, match="no longer stored"):
        b.on_push(A, again, 2.1)
    assert state(b) == before and b.counters.replies_evicted == 1


def test_reply_store_is_bounded_by_bytes() -> None:
    one = PushAck(FP, 0, vec(np.zeros(3), "int8"), 0.5).nbytes
    b = core(reply_store_bytes=2 * one)
    for i in range(4):
        a = core()
        [(_, push)] = a.make_pushes([B], 0.0)
        b.on_push(bytes([i]), push, 0.1)
    assert len(b._replies) == 2 and b._replies.nbytes <= 2 * one


def _reply_ack(push: Push, **kw) -> PushAck:
    fields = dict(model=FP, push_id=push.push_id, reply=vec(np.zeros(3), "int8"),
                  reply_weight=push.weight)
    fields.update(kw)
    return PushAck(**fields)


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (dict(reply_weight=0.75), "more than the share"),
        (dict(reply_weight=0.0), "outside"),
        (dict(reply_weight=-0.1), "outside"),
        (dict(reply_weight=float("nan")), "finite"),
        (dict(reply=None), "without reply values"),
        (dict(reply=vec(np.zeros(4))), "length"),
        (dict(reply=raw("f64", np.array([0.0, np.inf, 0.0]))), "not finite"),
        (dict(reply=vec([0.0, 2e6, 0.0])), "exceeds the bound"),
    ],
)
def test_bad_reply_is_dropped_but_the_ack_applied(bad: dict, match: str) -> None:
    a = core()
    [(_, push)] = a.make_pushes([B], 0.0)
    sent_mass = 0.5 * decode(push.values, 3)
    mass = a.mass
    with pytest.raises(RejectedReply, match=match):
        a.on_ack(B, _reply_ack(push, **bad), 0.1)
    # the responder merged our share: it is removed, its reply is not merged
    assert a.outstanding == 0 and a.weight == pytest.approx(0.5)
    np.testing.assert_allclose(a.mass, mass - sent_mass, rtol=1e-15)
    c = a.counters
    assert c.acks == 1 and c.bad_replies == 1 and c.rejected == 1 and c.replies_received == 0
    with pytest.raises(RejectedAck, match="duplicate"):  # a RejectedAck, not a reply problem
        a.on_ack(B, _reply_ack(push), 0.2)


def test_reply_to_a_one_way_push_is_dropped() -> None:
    a = core(exchange="push")
    [(_, push)] = a.make_pushes([B], 0.0)
    assert not push.want_reply
    with pytest.raises(RejectedReply, match="asked for none"):
        a.on_ack(B, _reply_ack(push), 0.1)
    assert a.weight == pytest.approx(0.5)


def test_masked_mode_uses_one_way_pushes_and_plain_acks() -> None:
    a = core(privacy="masked", masked_pushes=1)
    [(_, push)] = a.make_pushes([B], 0.0)
    assert push.masked and not push.want_reply
    assert push.values.encoding == "f32"  # masks travel with at least float32 precision
    m = core(privacy="masked", masked_pushes=0)  # a masked-mode receiver ignores want_reply
    p = core()
    [(_, request)] = p.make_pushes([B], 0.0)
    assert request.want_reply
    ack = m.on_push(A, request, 0.1)
    assert ack.reply is None and m.weight == pytest.approx(1.5)
    noisy = core((0.0, 0.0, 0.0))  # a receiver holding noise apart answers plainly too
    noisy.on_push(C, push, 0.1)
    assert noisy.noisy and noisy.on_push(A, request, 0.2).reply is None


def test_masked_pushes_keep_f32_even_with_int8_encoding() -> None:
    a = core(privacy="masked", masked_pushes=1, encoding="int8")
    [(_, push)] = a.make_pushes([B], 0.0)
    assert push.values.encoding == "f32"


def test_pipelining_to_distinct_peers_with_shares_from_the_available_weight() -> None:
    a = core(max_in_flight=2)
    [(p1, first)] = a.make_pushes([B], 0.0)
    assert a.make_pushes([B], 0.1) == []  # B already awaits one of our pushes
    [(p2, second)] = a.make_pushes([B, C], 0.2)
    assert (p1, p2) == (B, C)
    assert first.weight == pytest.approx(0.5) and second.weight == pytest.approx(0.25)
    assert a.in_flight == 2 and a.available_weight == pytest.approx(0.25)
    assert a.make_pushes([b"d"], 0.3) == []  # max_in_flight reached
    b, c = core((3.0, 3.0, 3.0)), core((5.0, 5.0, 5.0))
    a.on_ack(C, c.on_push(A, second, 0.4), 0.5)  # acks in any order
    a.on_ack(B, b.on_push(A, first, 0.4), 0.5)
    assert a.outstanding == 0
    assert a.weight + b.weight + c.weight == pytest.approx(3.0, rel=1e-15)
    np.testing.assert_allclose(a.mass + b.mass + c.mass, [9.0, 10.0, 11.0], rtol=1e-14)


def test_responder_never_gives_more_than_it_takes_nor_its_promised_weight() -> None:
    b = core((4.0, 4.0, 4.0))
    [(_, own)] = b.make_pushes([C], 0.0)  # half of b's weight is promised to C
    a = core(weight=3.0)
    [(_, push)] = a.make_pushes([B], 0.0)  # share 1.5
    ack = b.on_push(A, push, 0.1)
    assert ack.reply_weight == pytest.approx(0.25)  # a quarter: half of what is not promised
    b.on_ack(C, core().on_push(B, own, 0.2), 0.3)
    assert b.weight > 0
    a2, b2 = core(weight=0.5), core((4.0, 4.0, 4.0))
    [(_, light)] = a2.make_pushes([B], 0.0)
    assert b2.on_push(A, light, 0.1).reply_weight == pytest.approx(0.25)  # = the share


def test_round_drift_and_last_gap() -> None:
    a = core((3.0, 4.0, 0.0))
    assert a.round_drift is None and a.last_gap is None
    a.set_values(np.array([3.0, 4.0, 5.0]))
    assert a.round_drift == pytest.approx(np.sqrt(25 / 3) / np.sqrt(25 / 3))
    a.set_values(np.array([3.0, 4.0, 5.0]))
    assert a.round_drift == 0.0
    b = core((3.0, 4.0, 5.0))
    [(_, push)] = a.make_pushes([B], 0.0)
    a.on_ack(B, b.on_push(A, push, 0.1), 0.2)
    assert a.last_gap == 0.0  # both ends agreed


# ------------------------------------------------- requests against references


def _exchange(src: PushSum, src_id: bytes, dst: PushSum, dst_id: bytes, t: float = 0.0) -> Push:
    """One complete push-pull exchange from ``src`` to ``dst``; returns the request."""
    [(_, push)] = src.make_pushes([dst_id], t)
    src.on_ack(dst_id, dst.on_push(src_id, push, t + 0.1), t + 0.2)
    return push


def _rebuilt(receiver: PushSum, sender_id: bytes, push: Push) -> np.ndarray:
    """What ``receiver`` merges for ``push``: its reference plus the decoded delta."""
    ref = receiver.held_reference(sender_id, push.base, not push.base_by_sender)
    assert ref is not None
    return ref + decode(push.values, push.values.length)


def test_both_ends_derive_the_same_reference_and_the_next_request_is_a_delta() -> None:
    rng = np.random.default_rng(5)
    a, b = core(rng.normal(size=300)), core(rng.normal(size=300))
    first = _exchange(a, A, b, B)
    assert first.base == 0 and first.values.encoding == "f32"  # nothing shared yet: absolute
    ref_a = a.held_reference(B, first.push_id, True)
    ref_b = b.held_reference(A, first.push_id, False)
    assert ref_a is not None and ref_b is not None
    assert ref_a.dtype == np.float32 and ref_a.tobytes() == ref_b.tobytes()  # bit for bit
    a.set_values(a.values + 1e-3 * rng.normal(size=300))  # training moves a a little
    [(_, second)] = a.make_pushes([B], 1.0)
    assert (second.base, second.base_by_sender) == (first.push_id, True)
    assert second.values.encoding == "int8"  # a small delta: the coarse encoding suffices
    # the receiver rebuilds exactly the vector the sender will remove on the ack
    np.testing.assert_array_equal(_rebuilt(b, A, second), a._outstanding[second.push_id].sent)
    mass, weight = a.mass + b.mass, a.weight + b.weight
    a.on_ack(B, b.on_push(A, second, 1.1), 1.2)
    np.testing.assert_allclose(a.mass + b.mass, mass, rtol=1e-13, atol=1e-13)
    assert a.weight + b.weight == pytest.approx(weight, rel=1e-15)
    assert a.counters.delta_pushes_sent == 1 and b.counters.references_missing == 0
    assert second.nbytes < 0.35 * first.nbytes  # about a quarter of the f32 request


def test_either_end_starts_the_next_exchange_from_the_pair_reference() -> None:
    a, b = core((1.0, 2.0, 3.0)), core((3.0, 2.0, 1.0))  # same rng: same push ids
    first = _exchange(a, A, b, B)
    [(_, back)] = b.make_pushes([A], 1.0)  # b started none: the reference is a's exchange
    assert (back.base, back.base_by_sender) == (first.push_id, False)
    np.testing.assert_array_equal(_rebuilt(a, B, back), b._outstanding[back.push_id].sent)
    b.on_ack(A, a.on_push(B, back, 1.1), 1.2)
    # the ids collide (both cores drew the same start), the direction tells them apart
    assert back.push_id == first.push_id
    for started_here, ref_of_a, ref_of_b in ((True, a, b), (False, b, a)):
        mine = ref_of_a.held_reference(B if ref_of_a is a else A, first.push_id, started_here)
        theirs = ref_of_b.held_reference(A if ref_of_b is b else B, first.push_id,
                                         not started_here)
        assert mine is not None and theirs is not None
        assert mine.tobytes() == theirs.tobytes()
    assert a.weight + b.weight == pytest.approx(2.0, rel=1e-15)
    np.testing.assert_allclose(a.mass + b.mass, [4.0, 4.0, 4.0], rtol=1e-14)


def test_missing_reference_is_refused_and_the_next_request_is_absolute(
        caplog: pytest.LogCaptureFixture) -> None:
    a, b = core((1.0, 2.0, 3.0)), core((3.0, 2.0, 1.0))
    _exchange(a, A, b, B)
    b.restore(b.snapshot())  # a restart: references are not checkpointed
    [(_, push)] = a.make_pushes([B], 1.0)
    assert push.base != 0
    before = state(b)
    with caplog.at_level(logging.INFO, logger="gossip.pushsum"), \
            pytest.raises(RejectedPush, match="no reference"):
        b.on_push(A, push, 1.1)
    assert state(b) == before
    assert b.counters.references_missing == 1 and b.counters.rejected == 0
    assert "WARNING" not in caplog.text  # a restart is not an offence
    # surely not merged: forgotten with the weight kept, and no delta to b any more
    assert a.on_undelivered(push.push_id, maybe_delivered=False) is UndeliveredOutcome.FORGOTTEN
    assert a.weight == 1.0
    [(_, again)] = a.make_pushes([B], 2.0)
    assert again.base == 0 and again.values.encoding == "f32"
    a.on_ack(B, b.on_push(A, again, 2.1), 2.2)
    np.testing.assert_allclose(a.mass + b.mass, [4.0, 4.0, 4.0], rtol=1e-14)


def test_a_lost_reply_leaves_the_initiator_one_reference_behind() -> None:
    a, b = core((1.0, 2.0, 3.0)), core((3.0, 2.0, 1.0))
    first = _exchange(a, A, b, B)
    [(_, second)] = a.make_pushes([B], 1.0)
    b.on_push(A, second, 1.1)  # merged and answered: b records the second reference
    for _ in range(5):  # ... but the reply never arrives: a gives up, keeping the share
        a.expire(10.0 * (_ + 1), timeout=1.0)
    a.on_undelivered(second.push_id, maybe_delivered=True)
    assert b.held_reference(A, second.push_id, False) is not None
    assert a.held_reference(B, second.push_id, True) is None
    # a's next request names the first reference, which b still holds (latest two)
    a._outstanding.clear()  # the given-up push (simulated; its mass stays duplicated)
    [(_, third)] = a.make_pushes([B], 100.0)
    assert third.base == first.push_id
    ack = b.on_push(A, third, 100.1)
    assert ack.reply is not None
    # b's own next request names the second reference, which a lacks: refused
    [(_, fourth)] = b.make_pushes([A], 101.0)
    with pytest.raises(RejectedPush, match="no reference"):
        a.on_push(B, fourth, 101.1)


def test_references_are_bounded_two_per_peer_and_by_bytes() -> None:
    b = core((0.0, 0.0, 0.0))
    a = core((1.0, 1.0, 1.0))
    ids = [_exchange(a, A, b, B, t).push_id for t in (0.0, 1.0, 2.0)]
    held = [b.held_reference(A, i, False) is not None for i in ids]
    assert held == [False, True, True]  # the latest two
    small = core((0.0, 0.0, 0.0), reference_store_bytes=2 * 3 * 4)  # two float32 references
    for i in range(3):
        peer = core((float(i), 0.0, 0.0))
        _exchange(peer, bytes([i]), small, B)
    assert small.reference_bytes == 24
    assert small.held_reference(bytes([0]), ids[0], False) is None  # least recently used out
    none = core(reference_store_bytes=0)
    _exchange(none, A, b, B)
    [(_, push)] = none.make_pushes([B], 5.0)
    assert push.base == 0 and none.reference_bytes == 0


def test_stale_reference_widens_the_request_so_it_cannot_stall() -> None:
    rng = np.random.default_rng(1)
    a, b, c = (core(rng.normal(size=512)) for _ in range(3))
    _exchange(a, A, b, B)
    # a and c come to agree closely; a's reference with b is now far from both
    for t in range(1, 8):
        _exchange(a, A, c, C, float(t))
        a.set_values(a.values)  # no training
    [(_, push)] = a.make_pushes([B], 20.0)
    assert push.base != 0
    assert push.values.encoding in ("f16", "f32") and a.counters.requests_widened >= 1
    q = a._outstanding[push.push_id].sent
    np.testing.assert_array_equal(_rebuilt(b, A, push), q)


@pytest.mark.parametrize(("fields", "match"), [
    (dict(base=-1), "base"),
    (dict(base=True), "base"),
    (dict(base_by_sender=1), "base_by_sender"),
    (dict(base=3, want_reply=False), "only a push-pull request"),
    (dict(base=3, noisy=True), "only a push-pull request"),
    (dict(base=3, masked=True), "only a push-pull request"),
])
def test_bad_base_fields_are_rejected(fields: dict, match: str) -> None:
    b = core()
    push = dict(model=FP, push_id=7, values=vec(np.zeros(3)), weight=0.5, want_reply=True)
    push.update(fields)
    before = state(b)
    with pytest.raises(RejectedPush, match=match):
        b.on_push(A, Push(**push), 0.0)
    assert state(b) == before and b.counters.rejected == 1


def test_delta_that_overflows_the_bound_is_rejected() -> None:
    a, b = core((1.0, 2.0, 3.0)), core((3.0, 2.0, 1.0))
    first = _exchange(a, A, b, B)
    bad = Push(FP, 99, vec([999_999.5, 0.0, 0.0]), 0.5, want_reply=True, base=first.push_id,
               base_by_sender=True)
    before = state(b)
    with pytest.raises(RejectedPush, match="exceeds the bound"):
        b.on_push(A, bad, 1.0)
    assert state(b) == before


def test_estimate_view_is_read_only_and_not_a_copy() -> None:
    a, b = core((0.0, 0.0, 0.0)), core((4.0, 4.0, 4.0))
    view = a.estimate_view()
    assert not view.flags.writeable
    with pytest.raises(ValueError):
        view[0] = 1.0
    assert np.shares_memory(view, a.estimate_view())  # the core's array, no copy
    [(_, push)] = a.make_pushes([B], 0.0)
    a.on_ack(B, b.on_push(A, push, 0.0), 0.0)
    np.testing.assert_array_equal(a.estimate_view(), a.estimate)
    np.testing.assert_allclose(a.estimate_view(), [2.0, 2.0, 2.0], rtol=1e-6)  # int8 reply


def test_held_apart_noise_leaves_the_trained_values_alone() -> None:
    """x and z share one array while clean; noise arriving must not reach z."""
    a = core((1.0, 1.0, 1.0), privacy="masked", masked_pushes=1, mask_std=5.0)
    b = core((3.0, 3.0, 3.0), privacy="masked", masked_pushes=1, mask_std=5.0)
    [(_, push)] = a.make_pushes([B], 0.0)
    b.on_push(A, push, 0.0)  # a masked push: b holds the noise apart
    assert b.noisy
    np.testing.assert_array_equal(b.values, [3.0, 3.0, 3.0])
    assert not np.array_equal(b.estimate, b.values)
    b.set_values(np.array([3.5, 3.5, 3.5]))  # training moves both by the same step
    np.testing.assert_array_equal(b.values, [3.5, 3.5, 3.5])
    assert not np.shares_memory(b.estimate_view(), b.values)
