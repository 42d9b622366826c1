"""Property tests: random message sequences never break the view invariants."""

from __future__ import annotations

import hashlib
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from peersampling import (
    MAX_AGE,
    Descriptor,
    PeerSampler,
    ShuffleReply,
    ShuffleRequest,
    validate_descriptor,
)

M = hashlib.sha256(b"m").digest()
OTHER = hashlib.sha256(b"other").digest()
ME = Descriptor(b"me", "10.9.9.9:1", 0, frozenset({M}))
C, L = 6, 3

valid_descriptors = st.builds(
    lambda i, age, tags: Descriptor(b"n%d" % i, f"10.0.0.{i}:7400", age, tags),
    st.integers(0, 14),
    st.integers(0, 40),
    st.sampled_from([frozenset(), frozenset({M}), frozenset({OTHER}), frozenset({M, OTHER})]),
)
bad_descriptors = st.one_of(
    st.just(ME),
    st.builds(lambda a: Descriptor(b"n1", "10.0.0.1:7400", a), st.integers(MAX_AGE + 1, 10**12)),
    st.builds(lambda a: Descriptor(b"n1", "10.0.0.1:7400", a), st.integers(-(10**6), -1)),
    st.just(Descriptor(b"", "10.0.0.1:7400")),
    st.just(Descriptor(b"n2", "no-port")),
    st.just(Descriptor(b"n3", "10.0.0.3:7400", 0, frozenset({b"short"}))),
    st.just(Descriptor(b"n4", ME.address)),
    st.none(),
    st.text(max_size=3),
)
descriptors = st.one_of(valid_descriptors, valid_descriptors, bad_descriptors)
entry_lists = st.one_of(
    st.lists(descriptors, max_size=8).map(tuple),
    st.lists(valid_descriptors, min_size=40, max_size=45).map(tuple),  # oversized
)
views = st.sampled_from([None, M, OTHER])

operations = st.one_of(
    st.tuples(st.just("start")),
    st.tuples(st.just("reply"), st.integers(0, 100), entry_lists),
    st.tuples(st.just("request"), descriptors, entry_lists, views),
    st.tuples(st.just("fail"), st.integers(0, 14)),
    st.tuples(st.just("tags"), st.sampled_from([frozenset({M}), frozenset({M, OTHER})])),
)


def check_invariants(s: PeerSampler) -> None:
    view = s.view()
    assert len(view) <= s.c
    assert len({d.node_id for d in view}) == len(view)
    for d in view:
        assert validate_descriptor(d) is not None
        assert d.node_id != s.node_id and d.address != s.self_descriptor.address
    for m in s.models:
        mv = s.model_view(m)
        assert len(mv) <= s.model_view_size
        assert len({d.node_id for d in mv}) == len(mv)
        assert all(m in d.tags and d.node_id != s.node_id for d in mv)
        assert all(0 <= d.age <= MAX_AGE for d in mv)


@settings(max_examples=100, deadline=None)
@given(st.lists(operations, max_size=40), st.integers(0, 2**32))
def test_random_message_sequences_keep_views_sound(ops: list[tuple], seed: int) -> None:
    s = PeerSampler(ME, c=C, l=L, rng=random.Random(seed))
    s.bootstrap(["10.0.0.200:7400"])
    pending: list[tuple[str, ShuffleRequest]] = []
    now = 0.0
    for op in ops:
        now += 1.0
        kind = op[0]
        if kind == "start":
            before = {d.node_id: d.age for d in s.view()}
            out = s.start_shuffles(now)
            pending.extend(out)
            for _address, req in out:
                assert req.sender == s.self_descriptor and req.sender.age == 0
                assert len(req.entries) <= L - 1
                for d in req.entries:
                    if req.view is None:  # entries carry their aged ages
                        assert d.age == before[d.node_id] + 1
            after = {d.node_id: d.age for d in s.view()}
            assert all(after[n] == before[n] + 1 for n in after)
        elif kind == "reply" and pending:
            address, req = pending.pop(op[1] % len(pending))
            s.on_reply(address, req, ShuffleReply(op[2], req.view), now)
        elif kind == "request":
            reply = s.on_request(ShuffleRequest(op[1], op[2], op[3]), now)
            assert len(reply.entries) <= L
            if isinstance(op[1], Descriptor):
                assert all(d.node_id != op[1].node_id for d in reply.entries)
        elif kind == "fail":
            address = f"10.0.0.{op[1]}:7400"
            s.on_failure(address)
            assert address not in {d.address for d in s.snapshot()}
        elif kind == "tags":
            s.set_tags(op[1])
        check_invariants(s)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 30), min_size=1, max_size=10, unique=True),
    st.lists(st.integers(31, 60), max_size=8, unique=True),
    st.lists(st.integers(0, 30), max_size=4, unique=True),
    st.integers(0, 2**32),
)
def test_reply_evicts_only_entries_that_were_sent(
    initial: list[int], fresh: list[int], known: list[int], seed: int
) -> None:
    def d(i: int) -> Descriptor:
        return Descriptor(b"n%d" % i, f"10.1.{i // 256}.{i % 256}:7400", 3)

    s = PeerSampler(ME, c=C, l=L, rng=random.Random(seed))
    s.restore([d(i) for i in initial])
    (address, req), *_ = s.start_shuffles(1.0)
    before = {x.node_id for x in s.view()}
    sent = {x.node_id for x in req.entries}
    received = [d(i) for i in fresh] + [d(i) for i in known]
    s.on_reply(address, req, ShuffleReply(tuple(received)), 2.0)
    after = {x.node_id for x in s.view()}
    target = {b"n%d" % i for i in initial if f"10.1.{i // 256}.{i % 256}:7400" == address}
    new = {x.node_id for x in received} - before
    assert before - after <= sent  # only entries we sent were evicted
    assert after <= before | new | target  # the responder may come back (it is alive)
    room = C - len(before)
    # every new entry is kept while there is a free slot or a sent entry to replace
    assert len(after & new) == min(len(new), room + len(sent))
    assert len(after) <= C
