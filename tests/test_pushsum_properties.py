"""Property tests (hypothesis): conservation, rejection and convex merges."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gossip import Push, PushAck, PushSum, RejectedPush

FP = bytes(range(32))
DIM = 4


def nid(i: int) -> bytes:
    return bytes([i])


ops = st.lists(
    st.tuples(st.sampled_from(["push", "deliver", "ack", "fail"]),
              st.integers(0, 3), st.integers(0, 3), st.integers(0, 10)),
    min_size=1, max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(ops=ops, seed=st.integers(0, 2**16), fanout=st.integers(1, 2),
       privacy=st.sampled_from(["none", "masked"]))
def test_interleavings_conserve_mass(ops, seed: int, fanout: int, privacy: str) -> None:
    rng = np.random.default_rng(seed)
    init = rng.normal(0.0, 10.0, size=(4, DIM))
    nodes = [PushSum(FP, init[i], fanout=fanout, privacy=privacy, masked_pushes=2,
                     unmask_after=3, rng=rng) for i in range(4)]
    in_flight: list[tuple[int, int, Push]] = []  # (src, dst, push) not yet delivered
    acks: list[tuple[int, int, Push]] = []  # merged, ack not yet delivered
    total_w0 = sum(n.weight for n in nodes)
    total_m0 = np.sum([n.mass for n in nodes], axis=0)
    t = 0.0
    for op, i, j, k in ops:
        t += 1.0
        if op == "push":
            peers = [nid(p) for p in ((j + d) % 4 for d in range(4)) if p != i]
            in_flight += [(i, p[0], push) for p, push in nodes[i].make_pushes(peers, t)]
        elif op == "deliver" and in_flight:
            src, dst, push = in_flight.pop(k % len(in_flight))
            nodes[dst].on_push(nid(src), push, t)
            acks.append((src, dst, push))
        elif op == "ack" and acks:
            src, dst, push = acks.pop(k % len(acks))
            nodes[src].on_ack(nid(dst), PushAck(FP, push.push_id), t)
        elif op == "fail" and in_flight:  # an undelivered push reported failed
            src, _, push = in_flight.pop(k % len(in_flight))
            nodes[src].on_failure(push.push_id)
        # merged-but-unacknowledged shares exist twice until their ack lands
        dup_w = sum(p.weight for _, _, p in acks)
        dup_m = sum((p.weight * p.values for _, _, p in acks), np.zeros(DIM))
        w = sum(n.weight for n in nodes) - dup_w
        m = np.sum([n.mass for n in nodes], axis=0) - dup_m
        assert abs(w - total_w0) <= 1e-9 * total_w0
        scale = np.abs(init).sum(axis=0).max() + (100.0 * 10 if privacy == "masked" else 0.0)
        assert np.abs(m - total_m0).max() <= 1e-9 * scale


finite = st.floats(-1e6, 1e6, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(mine=st.lists(finite, min_size=DIM, max_size=DIM),
       theirs=st.lists(finite, min_size=DIM, max_size=DIM),
       w=st.floats(1e-6, 1e3), share=st.floats(1e-6, 1e3))
def test_merge_is_convex_combination(mine, theirs, w: float, share: float) -> None:
    a = PushSum(FP, np.array(mine), weight=w, rng=np.random.default_rng(0))
    push = Push(FP, 1, np.array(theirs, dtype=np.float64), share)
    a.on_push(b"x", push, 0.0)
    lo, hi = np.minimum(mine, theirs), np.maximum(mine, theirs)
    tol = 1e-12 * (np.abs(lo) + np.abs(hi) + 1e-300)
    assert np.all(a.values >= lo - tol) and np.all(a.values <= hi + tol)
    lam = share / (w + share)
    np.testing.assert_allclose(a.values, (1 - lam) * np.array(mine) + lam * np.array(theirs),
                               rtol=1e-9, atol=1e-9)
    assert a.weight == w + share


bad_values = st.one_of(
    st.just(np.array([1.0, np.nan, 0.0, 0.0])),
    st.just(np.array([np.inf, 0.0, 0.0, 0.0])),
    st.just(np.array([-np.inf, 0.0, 0.0, 0.0])),
    st.integers(0, 9).filter(lambda n: n != DIM).map(lambda n: np.zeros(n)),
    st.just(np.zeros(DIM, dtype=np.float32)),
    st.just(np.zeros((2, 2))),
)
bad_weight = st.one_of(st.just(0.0), st.floats(max_value=0.0), st.just(float("nan")),
                       st.just(float("inf")), st.floats(min_value=1e7, allow_infinity=False))


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(["model", "values", "weight"]), values=bad_values,
       weight=bad_weight, model=st.binary(min_size=0, max_size=40).filter(lambda b: b != FP))
def test_rejected_push_changes_nothing(kind: str, values, weight: float, model: bytes) -> None:
    a = PushSum(FP, np.arange(DIM, dtype=np.float64), rng=np.random.default_rng(0))
    good = dict(model=FP, push_id=3, values=np.ones(DIM), weight=0.5)
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
