"""Unit tests of the sans-IO peer sampling core."""

from __future__ import annotations

import hashlib
import logging
import random
from dataclasses import replace

import pytest

from peersampling import (
    Descriptor,
    InvalidDescriptor,
    PeerSampler,
    ShuffleReply,
    ShuffleRequest,
    parse_address,
    validate_descriptor,
)

M1 = hashlib.sha256(b"model-1").digest()
M2 = hashlib.sha256(b"model-2").digest()


def desc(i: int, age: int = 0, tags: frozenset[bytes] = frozenset()) -> Descriptor:
    return Descriptor(b"id-%d" % i, f"10.0.0.{i}:7400", age, tags)


def sampler(
    i: int = 0,
    *,
    c: int = 6,
    l: int = 3,  # noqa: E741
    tags: frozenset[bytes] = frozenset(),
    **kw: object,
) -> PeerSampler:
    return PeerSampler(desc(i, tags=tags), c=c, l=l, rng=random.Random(i), **kw)  # type: ignore[arg-type]


def ids(ds: list[Descriptor] | tuple[Descriptor, ...]) -> set[bytes]:
    return {d.node_id for d in ds}


# ---------------------------------------------------------------- descriptors


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (Descriptor("x", "h:1"), "node_id"),  # type: ignore[arg-type]
        (Descriptor(b"", "h:1"), "node_id"),
        (Descriptor(b"x" * 65, "h:1"), "node_id"),
        (Descriptor(b"x", "h"), "address"),
        (Descriptor(b"x", "h:0"), "address"),
        (Descriptor(b"x", "h:70000"), "address"),
        (Descriptor(b"x", ":80"), "address"),
        (Descriptor(b"x", "::1:80"), "address"),
        (Descriptor(b"x", 80), "address"),  # type: ignore[arg-type]
        (Descriptor(b"x", "h:1", -1), "age"),
        (Descriptor(b"x", "h:1", 10**9), "age"),
        (Descriptor(b"x", "h:1", True), "age"),
        (Descriptor(b"x", "h:1", 0, frozenset({b"short"})), "tags"),
        (Descriptor(b"x", "h:1", 0, "abc"), "tags"),  # type: ignore[arg-type]
        (Descriptor(b"x", "h:1", 0, frozenset(i.to_bytes(32, "big") for i in range(257))), "tags"),
        ({"node_id": b"x"}, "descriptor"),
    ],
)
def test_validate_descriptor_names_the_bad_field(bad: object, field: str) -> None:
    with pytest.raises(InvalidDescriptor) as info:
        validate_descriptor(bad)
    assert info.value.field == field
    assert field in str(info.value)


def test_validate_descriptor_normalizes_decoded_tags() -> None:
    d = validate_descriptor(Descriptor(b"x", "[::1]:7400", 3, [M1, M2]))  # type: ignore[arg-type]
    assert d.tags == frozenset({M1, M2})
    assert parse_address("[::1]:7400") == ("::1", 7400)
    assert parse_address("example.org:1") == ("example.org", 1)


def test_constructor_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="c"):
        PeerSampler(desc(0), c=0, rng=random.Random(0))
    with pytest.raises(ValueError, match="shuffle length"):
        PeerSampler(desc(0), c=5, l=6, rng=random.Random(0))
    with pytest.raises(InvalidDescriptor, match="address"):
        PeerSampler(Descriptor(b"x", "nohost"), rng=random.Random(0))


# ---------------------------------------------------------------- aging, selection


def test_start_shuffles_ages_and_contacts_the_oldest() -> None:
    s = sampler(c=6, l=3)
    s.restore([desc(1, 4), desc(2, 9), desc(3, 1), desc(4, 0)])
    (address, req), *_ = s.start_shuffles(1.0)
    assert address == desc(2).address  # the oldest
    assert req.view is None
    assert req.sender == s.self_descriptor and req.sender.age == 0
    assert len(req.entries) == 2 and desc(2).node_id not in ids(req.entries)
    ages = {d.node_id: d.age for d in s.view()}
    assert ages == {b"id-1": 5, b"id-3": 2, b"id-4": 1}  # each grew by one, id-2 left
    assert {d.node_id: d.age for d in req.entries}.items() <= ages.items()


def test_reply_replaces_exactly_the_entries_sent() -> None:
    s = sampler(c=6, l=3)
    s.restore([desc(i, age=i) for i in range(1, 7)])
    (address, req), *_ = s.start_shuffles(1.0)
    before = ids(s.view())
    assert len(before) == 5
    sent = ids(req.entries)
    new = (desc(20), desc(21), desc(22))
    s.on_reply(address, req, ShuffleReply(new), 2.0)
    after = ids(s.view())
    assert len(after) == 6
    assert ids(new) <= after
    # one new entry took the free slot, the two others replaced the two sent
    assert after == (before - sent) | ids(new)


def test_known_entry_in_reply_is_not_duplicated_nor_re_aged() -> None:
    s = sampler(c=6, l=3)
    s.restore([desc(i, age=5) for i in range(1, 7)])
    (address, req), *_ = s.start_shuffles(1.0)
    kept = next(d for d in s.view() if d.node_id not in ids(req.entries))
    third_party = desc(int(kept.node_id[3:]), age=0)
    target = address
    s.on_reply(address, req, ShuffleReply((third_party,)), 2.0)
    view = s.view()
    # the responder answered, so it is alive: with a slot free it stays, age 0
    assert len(view) == len(ids(view)) == 6
    assert next(d for d in view if d.address == target).age == 0
    # a second-hand copy must not reset the age (dead entries would never age)
    assert next(d for d in view if d.node_id == kept.node_id).age == 6


def test_shuffle_target_stays_known_while_in_flight() -> None:
    s = sampler(c=6, l=3)
    s.restore([desc(1)])
    (address, req), *_ = s.start_shuffles(1.0)
    assert s.view() == []  # taken out of the view for the exchange...
    assert not s.is_isolated  # ...but still known until it answers or fails
    assert s.sample() is not None and s.sample().address == address
    s.on_failure(address, req)
    assert s.is_isolated and s.sample() is None


def test_responder_own_descriptor_resets_its_age() -> None:
    s = sampler(c=6, l=3)
    s.restore([desc(i, age=5) for i in range(1, 4)])
    [(_, req)] = s.start_shuffles(1.0)
    other = s.view()[0]
    assert other.age == 6
    # as if ``other`` had been the peer called: its own descriptor is first-hand news
    s.on_reply(other.address, req, ShuffleReply((replace(other, age=0),)), 2.0)
    assert {d.node_id: d.age for d in s.view()}[other.node_id] == 0


def test_reply_entries_beyond_capacity_are_dropped() -> None:
    s = sampler(c=4, l=2)
    s.restore([desc(i) for i in range(1, 5)])
    (address, req), *_ = s.start_shuffles(1.0)
    s.on_reply(address, req, ShuffleReply(tuple(desc(i) for i in range(10, 20))), 2.0)
    assert len(s.view()) == 4


def test_on_request_answers_and_merges() -> None:
    s = sampler(c=6, l=3)
    s.restore([desc(i) for i in range(1, 7)])
    req = ShuffleRequest(desc(30), (desc(31), desc(32)))
    reply = s.on_request(req, 1.0)
    assert len(reply.entries) == 3
    assert desc(30).node_id not in ids(reply.entries)
    after = ids(s.view())
    assert len(after) == 6
    assert ids([desc(30), desc(31), desc(32)]) <= after
    # the responder's view was full: the three it sent are the ones replaced
    assert after.isdisjoint(ids(reply.entries))


def test_failure_removes_peer_from_every_view() -> None:
    s = sampler(tags=frozenset({M1}))
    s.restore([desc(1, tags=frozenset({M1})), desc(2), desc(3, tags=frozenset({M1}))])
    assert ids(s.model_view(M1)) == {b"id-1", b"id-3"}
    s.on_failure(desc(1).address)
    assert b"id-1" not in ids(s.view())
    assert ids(s.model_view(M1)) == {b"id-3"}
    assert s.stats.shuffles_failed == 1


# ---------------------------------------------------------------- bootstrap


def test_bootstrap_learns_the_id_of_the_contacted_node() -> None:
    joiner, seed = sampler(1), sampler(2)
    joiner.bootstrap([desc(2).address, desc(1).address])  # own address is skipped
    assert joiner.bootstrap_addresses == [desc(2).address]
    assert joiner.is_isolated
    [(address, req)] = joiner.start_shuffles(0.0)
    assert address == desc(2).address and req.entries == ()
    reply = seed.on_request(req, 0.0)
    joiner.on_reply(address, req, reply, 0.0)
    assert ids(joiner.view()) == {b"id-2"}
    assert ids(seed.view()) == {b"id-1"}
    assert not joiner.is_isolated and not seed.is_isolated


def test_isolated_without_bootstrap_sends_nothing() -> None:
    s = sampler()
    assert s.start_shuffles(0.0) == []
    assert s.is_isolated and s.sample() is None


# ---------------------------------------------------------------- model views


def test_model_views_hold_only_holders() -> None:
    s = sampler(tags=frozenset({M1}), c=10)
    s.restore([desc(i, 2, frozenset({M1}) if i % 2 else frozenset()) for i in range(1, 9)])
    assert ids(s.model_view(M1)) == {b"id-1", b"id-3", b"id-5", b"id-7"}
    assert all(M1 in d.tags for d in s.model_view(M1))
    assert s.model_view(M2) == []
    # fresher news that id-1 dropped M1 removes it from the model view
    req = ShuffleRequest(desc(1, age=0), ())
    s.on_request(req, 1.0)
    assert b"id-1" not in ids(s.model_view(M1))
    # sample(model) only ever returns holders
    for _ in range(20):
        d = s.sample(M1)
        assert d is not None and M1 in d.tags


def test_model_shuffle_only_merges_holders() -> None:
    s = sampler(tags=frozenset({M1}), c=10)
    s.restore([desc(1, tags=frozenset({M1}))])
    holder, other = desc(40, tags=frozenset({M1})), desc(41)
    reply = s.on_request(ShuffleRequest(desc(42, tags=frozenset({M1})), (holder, other), M1), 0.0)
    assert reply.view == M1
    assert all(M1 in d.tags for d in reply.entries)
    assert ids(s.model_view(M1)) == {b"id-1", b"id-40", b"id-42"}


def test_lookup_finds_holders_through_a_non_holder() -> None:
    a = sampler(1, tags=frozenset({M1}))
    middle = sampler(2)
    b_desc = desc(3, tags=frozenset({M1}))
    middle.on_request(ShuffleRequest(b_desc, ()), 0.0)  # middle has seen b
    a.restore([desc(2)])
    requests = a.start_shuffles(1.0)
    lookups = [(addr, r) for addr, r in requests if r.view == M1]
    assert lookups and lookups[0][0] == desc(2).address and lookups[0][1].entries == ()
    address, req = lookups[0]
    reply = middle.on_request(req, 1.0)
    a.on_reply(address, req, reply, 1.0)
    assert ids(a.model_view(M1)) == {b"id-3"}
    assert a.model_view(M1)[0].age >= 0


def test_set_tags_seeds_new_model_view_from_main_view() -> None:
    s = sampler(c=10)
    s.restore([desc(1, tags=frozenset({M2})), desc(2)])
    assert s.models == frozenset()
    s.set_tags({M2})
    assert s.models == frozenset({M2})
    assert ids(s.model_view(M2)) == {b"id-1"}
    s.set_tags(set())
    assert s.model_view(M2) == []


# ---------------------------------------------------------------- bad input


def test_malformed_descriptors_in_reply_are_dropped_with_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = sampler(c=6, l=3)
    s.restore([desc(1), desc(2)])
    (address, req), *_ = s.start_shuffles(1.0)
    bad = (
        Descriptor(b"", "h:1"),
        Descriptor(b"zz", "h:1", 10**9),
        desc(0),  # the node itself
        Descriptor(b"other", desc(0).address),  # our address under another id
        "garbage",
        desc(7),
    )
    with caplog.at_level(logging.WARNING, logger="peersampling.core"):
        s.on_reply(address, req, ShuffleReply(bad), 2.0)  # type: ignore[arg-type]
    assert ids(s.view()) <= {b"id-1", b"id-2", b"id-7"} and b"id-7" in ids(s.view())
    assert s.stats.descriptors_rejected == 5
    assert any("dropped 5 of 6" in r.message for r in caplog.records)
    assert any("'age'" in r.message for r in caplog.records)


def test_oversized_or_mistyped_messages_change_nothing(caplog: pytest.LogCaptureFixture) -> None:
    s = sampler(c=6, l=3)
    s.restore([desc(i) for i in range(1, 5)])
    (address, req), *_ = s.start_shuffles(1.0)
    before = s.view()
    huge = ShuffleReply(tuple(desc(i) for i in range(100, 100 + s.max_entries + 1)))
    with caplog.at_level(logging.WARNING):
        s.on_reply(address, req, huge, 2.0)
        s.on_reply(address, req, ShuffleReply((desc(50),), M1), 2.0)  # wrong view
        s.on_reply(address, req, "nonsense", 2.0)  # type: ignore[arg-type]
        s.on_reply(address, req, ShuffleReply(b"abc"), 2.0)  # type: ignore[arg-type]
        r1 = s.on_request(ShuffleRequest(desc(60), tuple(huge.entries)), 2.0)
        r2 = s.on_request(ShuffleRequest(Descriptor(b"", "x:1"), (desc(61),)), 2.0)
        r3 = s.on_request(ShuffleRequest(desc(0), (desc(62),)), 2.0)
        r4 = s.on_request(ShuffleRequest(desc(63), (), b"short"), 2.0)
    assert s.view() == before
    assert r1.entries == r2.entries == r3.entries == r4.entries == ()
    assert s.stats.messages_rejected == 8
    assert len([r for r in caplog.records if "dropped shuffle" in r.message]) == 8


def test_decoded_lists_are_accepted() -> None:
    s = sampler(c=6, l=3)
    s.restore([desc(1)])
    (address, req), *_ = s.start_shuffles(1.0)
    decoded = ShuffleReply([Descriptor(b"id-9", "h:9", 1, [M1])])  # type: ignore[arg-type]
    s.on_reply(address, req, decoded, 2.0)
    [d] = [d for d in s.view() if d.node_id == b"id-9"]
    assert d.tags == frozenset({M1})


# ---------------------------------------------------------------- persistence


def test_snapshot_restore_round_trip_skips_bad_entries() -> None:
    s = sampler(tags=frozenset({M1}), c=6)
    s.restore([desc(1), desc(2, tags=frozenset({M1})), desc(3, age=7)])
    snap = s.snapshot()
    assert all(isinstance(d, Descriptor) for d in snap)
    t = sampler(tags=frozenset({M1}), c=6)
    accepted = t.restore([*snap, "junk", desc(0), Descriptor(b"q", "bad")])
    assert accepted == 3
    assert sorted(t.view(), key=lambda d: d.node_id) == sorted(s.view(), key=lambda d: d.node_id)
    assert ids(t.model_view(M1)) == {b"id-2"}
    assert t.stats.descriptors_rejected == 2


def test_peer_entries_report_views_and_contacts() -> None:
    s = sampler(tags=frozenset({M1}))
    s.on_request(ShuffleRequest(desc(5, tags=frozenset({M1})), ()), 12.5)
    rows = s.peer_entries()
    assert {(r.view, r.descriptor.node_id, r.last_contact) for r in rows} == {
        (None, b"id-5", 12.5),
        (M1, b"id-5", 12.5),
    }


# ---------------------------------------------------------------- failures


def test_failed_shuffle_is_retried_once_with_the_next_oldest() -> None:
    s = sampler(c=6, l=3)
    s.restore([desc(1, 9), desc(2, 7), desc(3, 1), desc(4, 0)])
    [(address, req)] = s.start_shuffles(1.0)
    assert address == desc(1).address
    [(address2, req2)] = s.on_failure(address, req)
    assert address2 == desc(2).address and req2.view is None
    assert s.on_failure(address2, req2) == []  # one retry per view and period
    assert s.on_failure(desc(3).address, None) == []  # not a shuffle of ours
    assert ids(s.view()) == {b"id-4"}
    assert PeerSampler(desc(0), rng=random.Random(0), retries=0).retries == 0


def test_dead_peer_copies_cannot_bounce_back() -> None:
    s = sampler(c=6, l=3)
    s.restore([desc(1, 3), desc(2, 0), desc(3, 0)])
    [(address, req)] = s.start_shuffles(1.0)
    s.on_failure(address, req)
    assert b"id-1" not in ids(s.view())
    for t in range(3):  # three more periods pass (failure seen in period 1)
        s.start_shuffles(2.0 + t)
    assert s.period == 4
    r = ShuffleRequest(s.self_descriptor, ())
    # a second-hand copy issued before the failure (age >= 3) is ignored ...
    s.on_reply(desc(9).address, r, ShuffleReply((desc(1, age=3),)), 5.0)
    assert b"id-1" not in ids(s.view()) and s.stats.descriptors_rejected == 0
    # ... one issued since then proves it is back
    s.on_reply(desc(9).address, r, ShuffleReply((desc(1, age=2),)), 5.0)
    assert b"id-1" in ids(s.view())
