"""Signed self-descriptors and the Sybil-resistant rules of the peer sampling core."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from p2p.wire.identity import Identity, verify_signature
from peersampling import (
    Descriptor,
    InvalidDescriptor,
    PeerSampler,
    RankedView,
    ShuffleReply,
    ShuffleRequest,
    SignatureCheck,
    SybilRules,
    sign_descriptor,
    signing_payload,
    validate_descriptor,
)
from peersampling.ranked import slot_and_rank

M1 = bytes(range(32))

_IDENTITIES = [Identity.from_seed(bytes([i]) * 32) for i in range(1, 40)]


def ident(i: int) -> Identity:
    return _IDENTITIES[i]


def signed(i: int, *, epoch: int = 1, tags: frozenset[bytes] = frozenset(),
           address: str | None = None) -> Descriptor:
    who = ident(i)
    d = Descriptor(who.node_id, address or f"10.0.0.{i}:7400", 0, tags, epoch)
    return sign_descriptor(d, who.sign)


RULES = SybilRules()


def node(i: int = 0, *, rules: SybilRules | None = RULES, c: int = 6, l: int = 3,  # noqa: E741
         tags: frozenset[bytes] = frozenset()) -> PeerSampler:
    who = ident(i)
    me = Descriptor(who.node_id, f"10.0.0.{i}:7400", 0, tags, 1)
    return PeerSampler(me, c=c, l=l, rng=random.Random(i), sign=who.sign,
                       verify=verify_signature, sybil=rules)


def ids(ds: list[Descriptor] | tuple[Descriptor, ...]) -> set[bytes]:
    return {d.node_id for d in ds}


# ------------------------------------------------------------------ signatures


def test_signature_covers_everything_but_the_age() -> None:
    d = signed(1, tags=frozenset({M1}))
    check = SignatureCheck(verify_signature)
    assert check(d)
    assert check(replace(d, age=7))  # age is a per-hop counter, outside the signature
    assert signing_payload(d) == signing_payload(replace(d, age=9))
    for tampered in (replace(d, address="10.9.9.9:7400"), replace(d, tags=frozenset()),
                     replace(d, epoch=2), replace(d, node_id=ident(2).node_id),
                     replace(d, signature=b"")):
        assert not check(tampered)
    assert check.checks == 5  # age-only change: cached; no signature: refused unchecked


def test_validate_descriptor_checks_epoch_and_signature_fields() -> None:
    with pytest.raises(InvalidDescriptor) as info:
        validate_descriptor(Descriptor(b"x", "h:1", 0, frozenset(), -1))
    assert info.value.field == "epoch"
    with pytest.raises(InvalidDescriptor) as info:
        validate_descriptor(Descriptor(b"x", "h:1", 0, frozenset(), 0, b"short"))
    assert info.value.field == "signature"


def test_the_node_signs_itself_and_a_change_issues_a_new_epoch() -> None:
    s = node(0)
    check = SignatureCheck(verify_signature)
    first = s.self_descriptor
    assert check(first) and first.epoch == 1
    s.set_tags({M1})
    second = s.self_descriptor
    assert second.epoch == 2 and second.tags == {M1} and check(second)
    s.set_address("10.0.1.1:7400")
    assert s.self_descriptor.epoch == 3 and check(s.self_descriptor)


@pytest.mark.parametrize("rules", [None, SybilRules()], ids=["cyclon", "sybil"])
def test_bad_signature_is_refused(rules: SybilRules | None) -> None:
    s = node(0, rules=rules)
    good, forged = signed(1), replace(signed(2), address="10.0.0.99:7400")
    unsigned = Descriptor(ident(3).node_id, "10.0.0.3:7400")
    reply = s.on_request(ShuffleRequest(signed(4), (good, forged, unsigned)), 1.0)
    assert reply.entries  # the message as a whole was fine
    st_ = s.stats
    assert st_.signatures_rejected == 2 and st_.descriptors_rejected == 2
    # a forged sender gets an empty reply and changes nothing
    before = s.snapshot()
    bad_sender = replace(signed(5), address="10.0.0.66:7400")
    assert s.on_request(ShuffleRequest(bad_sender, (signed(6),)), 1.0) == ShuffleReply((), None)
    assert s.snapshot() == before
    assert s.stats.messages_rejected == 1


def test_restored_peer_without_a_valid_signature_becomes_a_contact_address() -> None:
    s = node(0)
    unsigned = Descriptor(ident(1).node_id, "10.0.0.1:7400")
    assert s.restore([unsigned, signed(2)]) == 1
    assert ids(s.view()) == {ident(2).node_id}
    lone = node(0)
    lone.restore([unsigned])
    assert lone.view() == []
    (address, req), = lone.start_shuffles(1.0)
    assert address == "10.0.0.1:7400" and req.entries == ()


# ------------------------------------------------------------------ epochs


@pytest.mark.parametrize("rules", [None, SybilRules()], ids=["cyclon", "sybil"])
def test_a_newer_epoch_replaces_an_older_one_and_never_the_reverse(
        rules: SybilRules | None) -> None:
    s = node(0, rules=rules)
    old = signed(1, epoch=5)
    s.restore([old])
    newer = signed(1, epoch=6, tags=frozenset({M1}))
    s.on_request(ShuffleRequest(signed(2), (newer,)), 1.0)
    [entry] = [d for d in s.view() if d.node_id == old.node_id]
    assert entry.epoch == 6 and entry.tags == {M1}
    # a replayed older version, even sent by the node itself, changes nothing
    s.on_request(ShuffleRequest(old, ()), 2.0)
    [entry] = [d for d in s.view() if d.node_id == old.node_id]
    assert entry.epoch == 6


# ---------------------------------------------------------------- unsolicited caps


def test_unsolicited_descriptors_are_capped_per_source_and_period() -> None:
    s = node(0, rules=SybilRules(unsolicited_per_source=3, unsolicited_per_period=5), l=3)
    sender = signed(1)
    for k in range(3):  # 3 requests of 3 descriptors each from one source
        s.on_request(ShuffleRequest(sender, (signed(10 + 2 * k), signed(11 + 2 * k))), 1.0)
    assert s.stats.unsolicited_dropped == 6  # only the first request was taken
    s.on_request(ShuffleRequest(signed(2), (signed(20), signed(21))), 1.0)
    assert s.stats.unsolicited_dropped == 7  # 5 per period in all: 2 of 3 taken
    s.start_shuffles(2.0)  # a new period: the budgets start again
    s.on_request(ShuffleRequest(sender, (signed(22), signed(23))), 2.0)
    assert s.stats.unsolicited_dropped == 7


# --------------------------------------------------------------------- probes


def probes(s: PeerSampler, out: list[tuple[str, ShuffleRequest]]
           ) -> list[tuple[str, ShuffleRequest]]:
    """The probes among a round's requests: empty requests to addresses not in the view."""
    known = {d.address for d in s.view()}
    return [(a, r) for a, r in out if r.view is None and r.entries == () and a not in known]


def test_a_new_entry_is_probed_before_it_is_used() -> None:
    s = node(0)
    s.restore([signed(1)])
    (address, req), *_ = s.start_shuffles(1.0)
    assert address == "10.0.0.1:7400"
    newcomer = signed(7)
    s.on_reply(address, req, ShuffleReply((signed(1), newcomer)), 1.0)
    assert newcomer.node_id not in ids(s.view())  # not used before a probe
    out = s.start_shuffles(2.0)
    assert ("10.0.0.7:7400", ShuffleRequest(s.self_descriptor, (), None)) in probes(s, out)
    probe = next(r for a, r in out if a == "10.0.0.7:7400")
    s.on_reply("10.0.0.7:7400", probe, ShuffleReply((newcomer,)), 2.0)
    assert newcomer.node_id in ids(s.view())
    assert s.stats.probes_sent >= 1 and s.stats.probes_failed == 0


def test_a_probe_answered_with_another_id_or_not_at_all_keeps_the_entry_out() -> None:
    s = node(0)
    s.restore([signed(1)])
    (address, req), *_ = s.start_shuffles(1.0)
    liar, dead = signed(7), signed(8)
    s.on_reply(address, req, ShuffleReply((signed(1), liar, dead)), 1.0)
    out = dict(probes(s, s.start_shuffles(2.0)))
    assert set(out) == {liar.address, dead.address}
    # someone else answers at the liar's address: the id is not proven there
    impostor = signed(9, address=liar.address)
    s.on_reply(liar.address, out[liar.address], ShuffleReply((impostor,)), 2.0)
    s.on_failure(dead.address, out[dead.address])
    assert s.stats.probes_failed == 2
    assert not ids(s.view()) & {liar.node_id, dead.node_id}


def test_pulled_candidates_are_probed_before_pushed_ones() -> None:
    rules = SybilRules(probes_per_period=2, pushed_probes_per_period=1)
    s = node(0, rules=rules, c=8, l=4)
    s.restore([signed(1)])
    s.on_request(ShuffleRequest(signed(20), (signed(21), signed(22), signed(23))), 1.0)
    (address, req), *_ = s.start_shuffles(1.0)
    s.on_reply(address, req, ShuffleReply((signed(1), signed(30), signed(31), signed(32))), 1.0)
    out = probes(s, s.start_shuffles(2.0))
    pulled = {signed(i).address for i in (30, 31, 32)}
    assert len(out) == 2 and all(a in pulled for a, _ in out)


# ------------------------------------------------------------ history sampler


def ranked(order: list[int], slots: int = 5) -> RankedView:
    v = RankedView(slots, random.Random(42))
    for i in order:
        v.consider(Descriptor(b"id-%d" % i, f"h{i}:1"), proven=True)
    return v


def owners(v: RankedView) -> set[bytes]:
    """Holders sitting in their own slot (not parked as spares)."""
    return {n for k, n in enumerate(v.slot_holders())
            if n is not None and slot_and_rank(v._key, n, v.capacity)[0] == k}


def no_ties(n: int, slots: int = 5) -> bool:
    v = RankedView(slots, random.Random(42))
    placed = [slot_and_rank(v._key, b"id-%d" % i, slots) for i in range(n)]
    return len(set(placed)) == n


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40).flatmap(lambda n: st.permutations(list(range(n)))),
       st.integers(1, 3))
def test_ranked_slots_depend_on_the_set_of_ids_only(order: list[int], repeat: int) -> None:
    # The owner of each slot (its lowest-ranked id) does not depend on the
    # order or on how often ids are offered (ties aside: 32-bit ranks); spares
    # fill the other slots, so min(slots, ids) slots are taken.
    assume(no_ties(len(order)))
    v = ranked(order * repeat)
    assert owners(v) == owners(ranked(sorted(order)))
    assert len(v) == min(5, len(order))


def test_flooding_ids_gains_nothing_over_offering_them_once() -> None:
    honest, fakes = list(range(40)), list(range(100, 110))
    once = ranked(honest + fakes)
    flooded = ranked(fakes * 50 + honest + fakes * 50)
    assert once.is_full and flooded.is_full
    assert owners(once) == owners(flooded)


def test_ranked_slots_pick_ids_uniformly() -> None:
    # 20 % of the ids are "fakes"; over 150 independent views of 20 slots the
    # share of slots they win is close to 20 % (fixed seeds: deterministic;
    # the binomial standard deviation is 0.7 points, the bounds are 4 of them)
    won = total = 0
    for seed in range(150):
        v = RankedView(20, random.Random(seed))
        for i in range(250):
            v.consider(Descriptor(b"id-%d" % i, f"h{i}:1"), proven=True)
        holders = v.slot_holders()
        won += sum(1 for h in holders if h is not None and int(h[3:]) < 50)
        total += len(holders)
    assert 0.17 < won / total < 0.23


def test_unproven_ids_wait_and_a_removed_holder_frees_its_slot_for_earlier_losers() -> None:
    v = RankedView(3, random.Random(1))
    a = Descriptor(b"id-0", "h0:1")
    assert not v.consider(a, proven=False)  # waits for a probe
    assert len(v) == 0 and v.has_candidates()
    assert [d for d, _ in v.take_candidates(3, pushed=0)] == [a]
    everyone = [Descriptor(b"id-%d" % i, f"h{i}:1") for i in range(12)]
    for d in everyone:
        v.consider(d, proven=True)
    assert v.is_full and len(v) == 3
    victim = v.slot_holders()[0]
    assert victim is not None
    v.pop(victim)
    assert len(v) == 2 and not v.is_full
    for d in everyone:  # ids that lost before are examined again
        if d.node_id != victim:
            v.consider(d, proven=True)
    assert v.is_full and victim not in v
    assert owners(v) <= {d.node_id for d in everyone}
    v.reset_slot(random.Random(2))
    assert v.is_full


def test_a_holder_moving_to_a_new_address_is_probed_there_before_the_move_is_used() -> None:
    s = node(0, c=3)
    s.restore([signed(i, epoch=5) for i in range(1, 9)])  # more than the view holds: full
    held = s.view()[0]
    i = int(held.address.split(".")[3].split(":")[0])
    moved = signed(i, epoch=6, address="10.0.9.1:7400")
    s.on_request(ShuffleRequest(signed(20), (moved,)), 1.0)
    assert [d.address for d in s.view() if d.node_id == moved.node_id] == [held.address]
    out: dict[str, ShuffleRequest] = {}
    for period in (2.0, 3.0):  # one probe per period goes to pushed candidates
        out.update(probes(s, s.start_shuffles(period)))
    assert moved.address in out
    s.on_reply(moved.address, out[moved.address], ShuffleReply((moved,)), 3.0)
    [entry] = [d for d in s.view() if d.node_id == moved.node_id]
    assert entry.address == moved.address and entry.epoch == 6


# --------------------------------------------------------------- distrust


def test_a_distrusted_peer_leaves_every_view_and_stays_out_until_its_time_is_over() -> None:
    s = node(0, tags=frozenset({M1}))
    sink, honest = signed(5, tags=frozenset({M1})), signed(6, tags=frozenset({M1}))
    s.restore([sink, honest])
    assert {sink.node_id, honest.node_id} <= ids(s.model_view(M1)) & ids(s.view())
    assert s.distrust(sink.node_id, 3) == 2  # main view and the model view
    assert sink.node_id not in ids(s.view()) | ids(s.model_view(M1))
    assert honest.node_id in ids(s.model_view(M1))
    assert s.stats.distrusted == 1
    # offered again in a reply, or asking itself: refused while distrusted
    reply = s.on_request(ShuffleRequest(sink, (signed(7),), M1), 0.5)
    assert reply.entries == (s.self_descriptor,)  # who we are, nothing more
    for t in (1.0, 2.0):
        for address, req in s.start_shuffles(t):
            s.on_reply(address, req, ShuffleReply((sink,), req.view), t)
            assert sink.node_id not in ids(s.view()) | ids(s.model_view(M1))
    assert signed(7).node_id not in ids(s.view())  # nothing learnt from its request
    # once the periods are over it is an ordinary stranger again (probed before use)
    for t in (3.0, 4.0, 5.0):
        for address, req in s.start_shuffles(t):
            s.on_reply(address, req, ShuffleReply((sink,), req.view), t)
    assert sink.node_id in ids(s.view())
    with pytest.raises(ValueError, match="periods"):
        s.distrust(sink.node_id, 0)
