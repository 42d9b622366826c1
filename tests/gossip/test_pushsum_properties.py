"""Property tests (hypothesis): conservation, rejection and convex merges."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gossip import ENCODINGS, EncodedVector, Push, PushAck, PushSum, RejectedPush, decode, encode
from gossip.pushsum import REPLY_STORE_BYTES
from gossip.references import REFERENCE_STORE_BYTES

FP = bytes(range(32))
DIM = 4


def nid(i: int) -> bytes:
    return bytes([i])


class Observed(PushSum):
    """A core that records the values it rebuilt from each delta request it merged."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rebuilt: dict[tuple[bytes, int], np.ndarray] = {}

    def _rebuild_request(self, sender: bytes, push: Push, delta: np.ndarray,
                         now: float) -> np.ndarray:
        q = super()._rebuild_request(sender, push, delta, now)
        self.rebuilt[(sender, push.push_id)] = q.copy()
        return q


ops = st.lists(
    st.tuples(st.sampled_from(["push", "deliver", "ack", "fail", "redeliver", "expire",
                               "exchange", "exchange", "exchange"]),
              st.integers(0, 3), st.integers(0, 3), st.integers(0, 10)),
    min_size=10, max_size=60,
)


@settings(max_examples=100, deadline=None)
@given(ops=ops, seed=st.integers(0, 2**16), fanout=st.integers(1, 2),
       privacy=st.sampled_from(["none", "none", "masked", "mixed"]),
       exchange=st.sampled_from(["push-pull", "push-pull", "push"]),
       encoding=st.sampled_from(ENCODINGS),
       delta_encoding=st.sampled_from(ENCODINGS), max_in_flight=st.integers(1, 3),
       store=st.sampled_from([REPLY_STORE_BYTES, 0]),
       references=st.sampled_from([REFERENCE_STORE_BYTES, 2 * DIM * 4, 0]))
def test_interleavings_conserve_mass(ops, seed: int, fanout: int, privacy: str, exchange: str,
                                     encoding: str, delta_encoding: str, max_in_flight: int,
                                     store: int, references: int) -> None:
    """Sum of weights and of mass are exact under any interleaving, loss and duplication.

    Loss: a push reported failed, or an ack never delivered (then ``expire``
    retransmits and the receiver answers again, or refuses if its stored reply
    is gone). Duplication: a push delivered twice. ``exchange``: node i's new
    pushes delivered and acknowledged at once, so that pairs come to share
    references. Delta requests: the receiver merges bit for bit the vector the
    sender will remove (its reference plus the delta), and both ends of an
    exchange hold the same reference; one naming a reference the receiver does
    not hold (evicted, or its exchange's ack not applied there yet) is
    refused, and the sender is told as the daemon's driver tells it.
    """
    rng = np.random.default_rng(seed)
    init = rng.normal(0.0, 10.0, size=(4, DIM))
    modes = ["masked", "none", "masked", "none"] if privacy == "mixed" else [privacy] * 4
    nodes = [Observed(FP, init[i], fanout=fanout, privacy=modes[i], masked_pushes=2,
                     unmask_after=3, rng=rng, exchange=exchange, encoding=encoding,
                     delta_encoding=delta_encoding, max_in_flight=max_in_flight,
                     max_attempts=2, give_up_after=1000, reply_store_bytes=store,
                     reference_store_bytes=references)
             for i in range(4)]
    in_flight: list[tuple[int, int, Push]] = []  # (src, dst, push) not yet delivered
    acks: list[tuple[int, int, Push, PushAck]] = []  # merged, ack not yet delivered
    merged: dict[tuple[int, int], PushAck] = {}  # (src, push id) -> the ack it got
    # (src, push id) -> the values the sender will remove on the ack (its own record)
    sent: dict[tuple[int, int], np.ndarray] = {}
    seen = {"delta": 0}

    def record(src: int, pushes: list) -> list[tuple[int, int, Push]]:
        for _, push in pushes:
            q = nodes[src]._outstanding[push.push_id].sent
            assert sent.setdefault((src, push.push_id), q.copy()).tobytes() == q.tobytes()
        return [(src, p[0], push) for p, push in pushes]

    def deliver(index: int, again: bool, t: float) -> None:
        src, dst, push = in_flight[index]
        if not again:
            in_flight.pop(index)
        before = (nodes[dst].weight, nodes[dst].mass)
        ref = None
        if push.base:
            ref = nodes[dst].held_reference(nid(src), push.base, not push.base_by_sender)
        try:
            ack = nodes[dst].on_push(nid(src), push, t)
        except RejectedPush:
            assert (nodes[dst].weight, nodes[dst].mass.tobytes()) == (
                before[0], before[1].tobytes())
            if (src, push.push_id) in merged:  # a retransmission whose reply was evicted
                assert store == 0
                return
            # a delta whose reference the receiver does not hold: refused, not merged
            assert push.base and ref is None
            if again:
                in_flight.pop(index)
            nodes[src].on_undelivered(push.push_id, maybe_delivered=False)
            return
        first = merged.get((src, push.push_id))
        if first is not None:  # answered again: the same ack, nothing merged twice
            assert ack == first
            assert nodes[dst].weight == before[0]
            assert np.array_equal(nodes[dst].mass, before[1])
        else:
            merged[(src, push.push_id)] = ack
            acks.append((src, dst, push, ack))
            if push.base:  # the receiver merged bit for bit what the sender will remove
                rebuilt = nodes[dst].rebuilt.pop((nid(src), push.push_id))
                assert rebuilt.tobytes() == sent[(src, push.push_id)].tobytes()
                seen["delta"] += 1
        if ack.reply is not None:
            assert push.want_reply and modes[dst] == "none" and not push.noisy
            assert 0 < ack.reply_weight <= push.weight

    def acknowledge(index: int, t: float) -> None:
        src, dst, push, ack = acks.pop(index)
        if push.push_id not in nodes[src]._outstanding:
            # given up meanwhile: its mass would stay duplicated
            raise AssertionError("give_up_after is out of reach in this test")
        nodes[src].on_ack(nid(dst), ack, t)
        if ack.reply is not None:  # both ends hold the same reference, if any
            mine = nodes[src].held_reference(nid(dst), push.push_id, True)
            theirs = nodes[dst].held_reference(nid(src), push.push_id, False)
            if mine is not None and theirs is not None:
                assert mine.tobytes() == theirs.tobytes()
            if references == REFERENCE_STORE_BYTES:
                assert mine is not None

    total_w0 = sum(n.weight for n in nodes)
    total_m0 = np.sum([n.mass for n in nodes], axis=0)
    t = 0.0
    for op, i, j, k in ops:
        t += 1.0
        peers = [nid(p) for p in ((j + d) % 4 for d in range(4)) if p != i]
        if op == "push":
            in_flight += record(i, nodes[i].make_pushes(peers, t))
        elif op == "exchange":
            new = record(i, nodes[i].make_pushes(peers, t))
            for entry in new:
                in_flight.append(entry)
                n_acks = len(acks)
                deliver(len(in_flight) - 1, False, t)
                if len(acks) > n_acks:
                    acknowledge(len(acks) - 1, t)
        elif op == "expire":  # retransmissions of pushes whose ack did not come
            in_flight += record(i, nodes[i].expire(t, 0.5))
        elif op in ("deliver", "redeliver") and in_flight:
            deliver(k % len(in_flight), op == "redeliver", t)
        elif op == "ack" and acks:
            acknowledge(k % len(acks), t)
        elif op == "fail":  # a push that surely did not arrive reported failed
            lost = [e for e in in_flight if (e[0], e[2].push_id) not in merged]
            if lost:
                src, dst, push = lost[k % len(lost)]
                in_flight.remove((src, dst, push))
                nodes[src].on_failure(push.push_id)
        # merged-but-unacknowledged exchanges exist twice until their ack lands:
        # the receiver holds +s q_A - r q_B that the sender has not given up yet
        dup_w = 0.0
        dup_m = np.zeros(DIM)
        for src, _, push, ack in acks:
            q_a = sent[(src, push.push_id)]
            dup_w += push.weight
            dup_m += push.weight * q_a
            if ack.reply is not None:
                dup_w -= ack.reply_weight
                dup_m -= ack.reply_weight * (q_a + decode(ack.reply, DIM))
        w = sum(n.weight for n in nodes) - dup_w
        m = np.sum([n.mass for n in nodes], axis=0) - dup_m
        assert all(n.weight > 0 for n in nodes)
        assert abs(w - total_w0) <= 1e-9 * total_w0
        scale = np.abs(init).sum(axis=0).max() + (100.0 * 10 if privacy != "none" else 0.0)
        assert np.abs(m - total_m0).max() <= 1e-9 * scale
    DELTAS.append(seen["delta"])


DELTAS: list[int] = []  # delta requests merged per example (see the test below)


def test_interleavings_exercise_delta_requests() -> None:
    """The property test above does reach the reference path (guards its strategy)."""
    DELTAS.clear()
    test_interleavings_conserve_mass()
    assert sum(1 for n in DELTAS if n > 0) >= 3, DELTAS


finite = st.floats(-1e6, 1e6, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(mine=st.lists(finite, min_size=DIM, max_size=DIM),
       theirs=st.lists(finite, min_size=DIM, max_size=DIM),
       w=st.floats(1e-6, 1e3), share=st.floats(1e-6, 1e3))
def test_merge_is_convex_combination(mine, theirs, w: float, share: float) -> None:
    a = PushSum(FP, np.array(mine), weight=w, rng=np.random.default_rng(0))
    push = Push(FP, 1, encode(np.array(theirs, dtype=np.float64), "f64"), share)
    a.on_push(b"x", push, 0.0)
    lo, hi = np.minimum(mine, theirs), np.maximum(mine, theirs)
    tol = 1e-12 * (np.abs(lo) + np.abs(hi) + 1e-300)
    assert np.all(a.values >= lo - tol) and np.all(a.values <= hi + tol)
    lam = share / (w + share)
    np.testing.assert_allclose(a.values, (1 - lam) * np.array(mine) + lam * np.array(theirs),
                               rtol=1e-9, atol=1e-9)
    assert a.weight == w + share


def _raw(encoding: str, data: np.ndarray, scales: np.ndarray | None = None) -> EncodedVector:
    return EncodedVector(encoding, int(data.shape[0]), data,
                         np.zeros(0, np.float32) if scales is None else scales)


bad_values = st.one_of(
    st.just(_raw("f64", np.array([1.0, np.nan, 0.0, 0.0]))),
    st.just(_raw("f32", np.array([np.inf, 0.0, 0.0, 0.0], np.float32))),
    st.just(_raw("f16", np.array([-np.inf, 0.0, 0.0, 0.0], np.float16))),
    st.integers(0, 9).filter(lambda n: n != DIM).map(lambda n: encode(np.zeros(n), "f64")),
    st.just(_raw("f64", np.zeros(DIM, dtype=np.float32))),
    st.just(EncodedVector("f64", DIM, np.zeros((2, 2)), np.zeros(0, np.float32))),
    st.just(_raw("int8", np.zeros(DIM, np.int8), np.ones(2, np.float32))),
    st.just(_raw("int8", np.ones(DIM, np.int8), np.array([np.nan], np.float32))),
    st.just(np.zeros(DIM)),
)
bad_weight = st.one_of(st.just(0.0), st.floats(max_value=0.0), st.just(float("nan")),
                       st.just(float("inf")), st.floats(min_value=1e7, allow_infinity=False))


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(["model", "values", "weight"]), values=bad_values,
       weight=bad_weight, model=st.binary(min_size=0, max_size=40).filter(lambda b: b != FP))
def test_rejected_push_changes_nothing(kind: str, values, weight: float, model: bytes) -> None:
    a = PushSum(FP, np.arange(DIM, dtype=np.float64), rng=np.random.default_rng(0))
    good = dict(model=FP, push_id=3, values=encode(np.ones(DIM), "f64"), weight=0.5)
    good[kind] = {"model": model, "values": values, "weight": weight}[kind]
    before = (a.weight, a.values.tobytes(), a.estimate.tobytes(), a.counters.pushes_received)
    try:
        a.on_push(b"x", Push(**good), 0.0)
    except RejectedPush:
        pass
    else:
        raise AssertionError(f"bad {kind} accepted")
    assert (a.weight, a.values.tobytes(), a.estimate.tobytes(),
            a.counters.pushes_received) == before
    assert a.counters.rejected == 1
