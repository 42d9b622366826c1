"""The admission policy core (p2p.wire.admission): slots, caps, silence, frame budget.

Sans-IO: connection ids and times are plain numbers.
"""

from __future__ import annotations

import struct

import pytest

from p2p.wire.admission import (
    MIN_FRAME_LIMIT,
    Admission,
    AdmissionLimits,
    FrameBudget,
    frame_allowance,
    receive_frame_limit,
    source_of,
)
from p2p.wire.framing import FrameBudgetExceeded, FrameDecoder, encode_frame

A, B, C = b"a" * 32, b"b" * 32, b"c" * 32


def limits(**kw: float) -> AdmissionLimits:
    base: dict[str, float] = dict(max_handshakes=4, handshakes_per_source=2, handshake_grace=1.0,
                                  max_sessions=4, sessions_per_source=3, sessions_per_node=1,
                                  silence=10.0, pressure=0.75, idle_limit=100.0)
    base.update(kw)
    return AdmissionLimits(**base)  # type: ignore[arg-type]


def session(adm: Admission, conn: int, source: str, node: bytes, now: float = 0.0) -> bool:
    assert adm.open_handshake(conn, source, now).admitted
    decision = adm.finish_handshake(conn, node, now)
    return decision.admitted


def test_handshake_slots_are_capped_per_source_and_in_all() -> None:
    adm = Admission(limits())
    assert adm.open_handshake(1, "10.0.0.1", 0.0).admitted
    assert adm.open_handshake(2, "10.0.0.1", 0.0).admitted
    refused = adm.open_handshake(3, "10.0.0.1", 0.0)
    assert not refused.admitted and "limit 2 per source" in refused.reason
    assert adm.open_handshake(4, "10.0.0.2", 0.0).admitted
    assert adm.open_handshake(5, "10.0.0.3", 0.0).admitted
    for conn in (1, 2, 4, 5):  # each has sent its first frame (else it would give way)
        adm.first_frame(conn)
    # all 4 taken and none has run for the grace period: refused (a source
    # holding no more than one slot above the newcomer's is not displaced)
    full = adm.open_handshake(6, "10.0.0.2", 0.5)
    assert not full.admitted and "handshake slots are taken" in full.reason
    # later the oldest (a silent stranger) gives way to a newcomer
    later = adm.open_handshake(7, "10.0.0.4", 1.0)
    assert later.admitted and later.close == (1,)
    assert adm.handshakes == 4 and adm.refused == {
        "handshakes_per_source": 1, "max_handshakes": 1, "handshake_displaced": 1}


def test_handshakes_do_not_take_session_slots() -> None:
    adm = Admission(limits(max_sessions=2, max_handshakes=8, handshakes_per_source=8))
    assert session(adm, 1, "10.0.0.1", A) and session(adm, 2, "10.0.0.2", B)
    # the session table is full, yet strangers may still start handshakes...
    for conn in range(3, 9):
        assert adm.open_handshake(conn, "10.0.0.9", 0.0).admitted
    assert adm.sessions == 2 and adm.handshakes == 6
    # ...and one that finishes while both sessions are active is refused
    refused = adm.finish_handshake(3, C, 1.0)
    assert not refused.admitted and "taken by active sessions" in refused.reason
    assert adm.handshakes == 5 and adm.sessions == 2


def test_a_finished_handshake_displaces_the_most_silent_session() -> None:
    adm = Admission(limits(max_sessions=3, sessions_per_source=3))
    for conn, node in ((1, A), (2, B), (3, C)):
        assert session(adm, conn, f"10.0.0.{conn}", node)
    adm.request(1, 5.0)
    adm.request(3, 8.0)
    # 2 is silent since 0: at 12 s it has been silent for the 10 s it takes
    assert adm.open_handshake(4, "10.0.0.4", 12.0).admitted
    decision = adm.finish_handshake(4, b"d" * 32, 12.0)
    assert decision.admitted and decision.close == (2,)
    assert "silent" in decision.why_close and adm.sessions == 3


def test_sessions_per_source_and_per_node() -> None:
    adm = Admission(limits(max_sessions=10, sessions_per_source=2, sessions_per_node=1))
    assert session(adm, 1, "10.0.0.1", A)
    assert adm.open_handshake(2, "10.0.0.1", 0.0).admitted
    assert adm.open_handshake(3, "10.0.0.1", 0.0).admitted  # handshakes are not sessions
    assert adm.finish_handshake(2, B, 0.5).admitted
    # two handshakes raced: the second to finish finds its source full
    over = adm.finish_handshake(3, C, 1.0)
    assert not over.admitted and "limit 2 per source" in over.reason
    # a source at its cap is refused before any handshake work, silent or not
    early = adm.open_handshake(5, "10.0.0.1", 50.0)
    assert not early.admitted and "2 sessions from 10.0.0.1 already open" in early.reason
    # the same node id again (a reconnect): its newest session replaces its oldest
    assert adm.open_handshake(4, "10.0.0.2", 2.0).admitted
    again = adm.finish_handshake(4, A, 2.0)
    assert again.admitted and again.close == (1,) and adm.sessions_of(A) == 1


def test_silent_sessions_expire_sooner_only_under_pressure() -> None:
    adm = Admission(limits(max_sessions=4, sessions_per_source=4, pressure=0.75))
    assert session(adm, 1, "10.0.0.1", A) and session(adm, 2, "10.0.0.2", B)
    assert adm.expired(50.0) == []  # 2 of 4 slots: only idle_limit (100 s) applies
    assert session(adm, 3, "10.0.0.3", C, now=50.0)
    adm.request(1, 50.0)
    # 3 of 4 = pressure: sessions silent for 10 s go, the active ones stay
    assert adm.expired(56.0) == [2]
    assert adm.expired(56.0) == []  # 2 of 4 again
    assert sorted(adm.expired(150.0)) == [1, 3]  # idle_limit: always
    assert adm.refused["session_silent"] == 3


def test_closing_frees_slots_and_ids_cannot_be_reused_while_open() -> None:
    adm = Admission(limits(max_sessions=1))
    assert session(adm, 1, "10.0.0.1", A)
    with pytest.raises(ValueError, match="already in the admission table"):
        adm.open_handshake(1, "10.0.0.1", 0.0)
    with pytest.raises(ValueError, match="no handshake in progress"):
        adm.finish_handshake(7, A, 0.0)
    adm.close(1)
    adm.close(99)  # unknown: ignored
    assert adm.sessions == 0 and session(adm, 2, "10.0.0.1", B)


def test_limits_derived_from_max_connections_and_checked() -> None:
    d = AdmissionLimits.for_connections(64)
    assert (d.max_sessions, d.max_handshakes, d.handshakes_per_source, d.sessions_per_source) \
        == (64, 16, 8, 32)
    one = AdmissionLimits.for_connections(1)
    assert (one.max_sessions, one.max_handshakes, one.handshakes_per_source) == (1, 1, 1)
    with pytest.raises(ValueError, match="max_sessions must be >= 1"):
        AdmissionLimits(max_sessions=0)
    with pytest.raises(ValueError, match="pressure"):
        AdmissionLimits(pressure=1.5)
    with pytest.raises(ValueError, match="silence must be > 0"):
        AdmissionLimits(silence=0)


@pytest.mark.parametrize(("remote", "source"), [
    ("10.0.0.1:4000", "10.0.0.1"), ("[::1]:4000", "::1"), ("mem-client-3", "mem-client-3"),
    ("unknown", "unknown")])
def test_source_of(remote: str, source: str) -> None:
    assert source_of(remote) == source


def test_frame_limit_follows_the_largest_push_under_the_ceiling() -> None:
    assert receive_frame_limit(31_000, 16 << 20) == MIN_FRAME_LIMIT  # small models: the floor
    assert receive_frame_limit(3_000_000, 16 << 20) == 6_000_000
    assert receive_frame_limit(30_000_000, 16 << 20) == 16 << 20  # the ceiling stays
    assert receive_frame_limit(1000, 65536) == 65536
    with pytest.raises(ValueError, match="largest_push_bytes"):
        receive_frame_limit(-1, 100)


def test_frame_budget_bounds_unfinished_frames_of_all_decoders() -> None:
    k = 1024
    budget = FrameBudget(950 * k)
    first, second, third = (FrameDecoder(600 * k, budget) for _ in range(3))
    # a large frame holds one step (64 KiB) at its header, then grows as its
    # body arrives (as much again as it received, each time it is full)
    assert first.feed(struct.pack(">I", 512 * k) + b"x" * 10) == []
    assert budget.held == budget.step == 64 * k and budget.announced == 512 * k
    assert first.feed(b"x" * (300 * k)) == []  # 512 KiB held: the frame's size
    assert second.feed(struct.pack(">I", 400 * k) + b"y" * (300 * k)) == []  # 400 KiB more
    assert budget.held == 912 * k
    with pytest.raises(FrameBudgetExceeded, match=f"already hold {912 * k} of the {950 * k}"):
        third.feed(struct.pack(">I", 256 * k) + b"z")  # its first step would exceed it
    assert budget.held == 912 * k and budget.refused == 1
    with pytest.raises(FrameBudgetExceeded):
        third.feed(b"\x00")  # the decoder stays failed
    # a frame small enough for the staging area draws on the small frames' own
    # allowance, so it gets through when large frames have spent the budget
    # (handshake messages must), and is still counted
    small = FrameDecoder(600 * k, budget)
    assert small.feed(struct.pack(">I", 60 * k) + b"s") == []
    assert budget.held == 912 * k and budget.small_held == 60 * k
    small.release()
    assert budget.small_held == 0
    # completing a frame gives its bytes back; so does closing a connection
    [done] = first.feed(b"x" * (212 * k - 10))
    assert len(done) == 512 * k and budget.held == 400 * k
    second.release()
    second.release()  # idempotent
    assert budget.held == 0 and budget.peak == 912 * k
    assert FrameDecoder(600, budget).feed(encode_frame(b"hi")) == [b"hi"]
    assert budget.held == 0


@pytest.mark.parametrize(("remote", "source"), [
    ("[2001:db8:1:2::5]:4000", "2001:db8:1:2::/64"),
    ("[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:9", "2001:db8:1:2::/64"),
    ("[2001:db8:1:3::5]:4000", "2001:db8:1:3::/64"),
    ("[::ffff:10.0.0.7]:4000", "10.0.0.7"),  # an IPv4 peer on a dual-stack listener
])
def test_ipv6_sources_are_counted_per_64_prefix(remote: str, source: str) -> None:
    # one host holds a whole /64: counted per address, its caps would be no caps
    assert source_of(remote) == source


def test_one_ipv6_host_cannot_take_every_handshake_slot() -> None:
    adm = Admission(limits(max_handshakes=4, handshakes_per_source=2))
    taken = [adm.open_handshake(conn, source_of(f"[2001:db8::{conn:x}]:5000"), 0.0).admitted
             for conn in range(1, 5)]
    assert taken == [True, True, False, False]
    # another /64 of the same /48 (one customer's allocation) neither...
    assert not adm.open_handshake(8, source_of("[2001:db8:0:1::1]:5000"), 0.0).admitted
    # ...but another /48 gets in
    assert adm.open_handshake(9, source_of("[2001:db8:1::1]:5000"), 0.0).admitted


def test_a_flood_from_a_few_sources_cannot_starve_other_sources_of_handshakes() -> None:
    # two flooding sources fill every slot and keep them fresh (each slot
    # younger than the grace): a newcomer from a third source still gets in,
    # at the expense of the source holding the most slots, not of a lone one
    adm = Admission(limits(max_handshakes=4, handshakes_per_source=2, handshake_grace=1.0))
    for conn, source in ((1, "10.0.0.1"), (2, "10.0.0.1"), (3, "10.0.0.2"), (4, "10.0.0.2")):
        assert adm.open_handshake(conn, source, 0.1 * conn).admitted
        adm.first_frame(conn)  # they speak (a mute slot would give way at once)
    honest = adm.open_handshake(5, "10.0.0.3", 0.5)
    assert honest.admitted and honest.close == (1,)  # the oldest of a largest holder
    adm.first_frame(5)
    # the flooders cannot push it out again: each is at or above its fair share
    again = adm.open_handshake(6, "10.0.0.1", 0.6)
    assert not again.admitted
    again = adm.open_handshake(7, "10.0.0.4", 0.6)  # another fresh source: takes from 10.0.0.2
    assert again.admitted and again.close == (3,)
    adm.first_frame(7)
    # with every source at one slot, the grace rule decides as before
    tie = adm.open_handshake(8, "10.0.0.5", 0.7)
    assert not tie.admitted and "handshake slots are taken" in tie.reason
    assert adm.handshakes == 4


def test_unfinished_small_frames_are_counted_and_bounded() -> None:
    k = 1024
    budget = FrameBudget(1000 * k, small_limit=100 * k)
    decoders = [FrameDecoder(600 * k, budget) for _ in range(3)]
    for decoder in decoders[:2]:  # 2 x 40 KiB announced, 1 byte of each arrived
        assert decoder.feed(struct.pack(">I", 40 * k) + b"s") == []
    assert budget.small_held == 80 * k and budget.held == 0
    with pytest.raises(FrameBudgetExceeded,
                       match=f"unfinished small frames already hold {80 * k} of the {100 * k}"):
        decoders[2].feed(struct.pack(">I", 40 * k) + b"t")
    assert budget.small_held == 80 * k and budget.refused == 1
    # a small frame that arrives whole in one read is never held: not counted
    assert FrameDecoder(600 * k, budget).feed(encode_frame(b"x" * 30 * k)) == [b"x" * 30 * k]
    assert budget.small_held == 80 * k
    # completing one gives its bytes back, closing the other too
    [done] = decoders[0].feed(b"s" * (40 * k - 1))
    assert len(done) == 40 * k and budget.small_held == 40 * k
    decoders[1].release()
    assert budget.small_held == 0
    # large frames are not held back by spent small allowance, nor the reverse
    spent = FrameBudget(1000 * k, small_limit=10 * k)
    assert FrameDecoder(600 * k, spent).feed(struct.pack(">I", 8 * k) + b"s") == []
    assert FrameDecoder(600 * k, spent).feed(struct.pack(">I", 500 * k) + b"l") == []
    assert spent.held == spent.step and spent.announced == 500 * k
    assert spent.small_held == 8 * k


def test_frame_allowance_grows_with_size_at_the_floor_rate() -> None:
    assert frame_allowance(0, 30.0, 128 * 1024) == 30.0
    assert frame_allowance(4 << 20, 30.0, 128 * 1024) == 62.0  # 4 MiB at 128 KiB/s: +32 s
    with pytest.raises(ValueError, match="min_rate"):
        frame_allowance(10, 30.0, 0)
