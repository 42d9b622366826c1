"""Unit tests of the sans-IO push-sum core (gossip.pushsum)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from gossip import (
    InvalidValues,
    Push,
    PushAck,
    PushSum,
    RejectedAck,
    RejectedPush,
    UndeliveredOutcome,
)

FP = bytes(range(32))
OTHER_FP = bytes(32)
A, B, C = b"node-a", b"node-b", b"node-c"


def core(values=(1.0, 2.0, 3.0), **kw) -> PushSum:
    kw.setdefault("rng", np.random.default_rng(0))
    return PushSum(FP, np.array(values, dtype=np.float64), **kw)


def state(ps: PushSum) -> tuple:
    return (ps.weight, ps.values.tobytes(), ps.estimate.tobytes(), ps.outstanding,
            ps.noisy, ps.counters.pushes_received, ps.counters.acks)


def test_push_moves_weight_only_on_ack() -> None:
    a, b = core((0.0, 0.0, 0.0)), core((3.0, 3.0, 3.0))
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
    fields = dict(model=FP, push_id=7, values=np.array([1.0, 1.0, 1.0]), weight=0.5)
    fields.update(kw)
    return Push(**fields)


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (dict(model=OTHER_FP), "fingerprint"),
        (dict(values=np.ones(4)), "shape"),
        (dict(values=np.ones(3, dtype=np.float32)), "dtype"),
        (dict(values=np.array([1.0, np.nan, 1.0])), "non-finite"),
        (dict(values=np.array([1.0, np.inf, 1.0])), "non-finite"),
        (dict(values=np.array([1.0, 1e300, 1.0])), "exceeds the bound"),
        (dict(values=[1.0, 1.0, 1.0]), "numpy array"),
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
        assert np.abs(push.values - a.values).max() > 1.0  # the mask dominates
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
    for t in range(1, 4):
        for x, y, ids in ((a, b, (A, B)), (b, a, (B, A))):
            [(_, p)] = x.make_pushes([ids[1]], float(t))
            x.on_ack(ids[1], y.on_push(ids[0], p, float(t)), float(t))
    assert not a.noisy and not b.noisy and a.counters.unmasks == 1
    # exact: both held identical values, so the masks cancel in the total
    np.testing.assert_allclose(a.mass + b.mass, 2 * np.array([1.0, 2.0, 3.0]), rtol=1e-12)


def test_push_equality_and_snapshot_roundtrip() -> None:
    p = _push()
    assert p == _push() and p != _push(weight=0.25) and p != _push(values=np.zeros(3))
    a = core()
    a2 = PushSum.from_snapshot(a.snapshot(), rng=np.random.default_rng(1))
    assert a2.weight == a.weight and np.array_equal(a2.values, a.values)


def test_unresolved_push_reserves_its_share() -> None:
    a, b = core(max_attempts=1, give_up_after=5), core()
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
