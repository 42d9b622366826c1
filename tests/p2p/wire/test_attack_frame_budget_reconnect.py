"""Holding the frame budget by reconnecting: many sources, frames never sent.

The attack (what the pace rule of tests/test_attack_wire_frame_budget.py left
open): a frame's whole announced size used to be reserved in the node's
FrameBudget when its header arrived. Members at several source addresses
(8 here, 8 sessions each: the 64 session slots of a default node) announce
1 MiB frames, send a few bytes of each, and hang up just before the pace
grace (5 s) would cut them, then handshake again and announce again: one
handshake per 1 MiB of budget per 5 s, no bandwidth. The budget (16 MiB)
stayed full, and nearly every honest push over 64 KiB was refused as the node
being busy.

What stops it (p2p/wire/admission.py, framing.py): a large frame reserves its
budget in steps as its body arrives (FRAME_RESERVE_STEP when its header
arrives, then as much again as it has received each time its body fills what
it holds), so a frame holds at most twice the bytes its sender actually sent
(or one step). Holding the budget now costs bandwidth, whatever the number of
sources or reconnections.
"""

from __future__ import annotations

import struct

import pytest
import trio
import trio.testing
from lab.bench import frame_budget as bench_frame_budget
from wire_kit import handler, honest_pushes, member_session

from p2p.testing import MemoryNetwork, wait_until
from p2p.wire.admission import FRAME_RESERVE_STEP, FrameBudget
from p2p.wire.framing import FrameBudgetExceeded, FrameDecoder, encode_frame
from p2p.wire.identity import Identity
from p2p.wire.transport import ConnectionFailure, MessageStream, Transport

K = 1024
MIB = 1 << 20
FRAME = MIB  # the node's frame cap (node_frame_limit's floor)
HOLD = 4.9  # seconds a squatter holds a frame: just under the pace grace (5 s)
RECONNECT = 0.1  # seconds a squatter takes to hang up, handshake again and announce
PUSHES = 30  # honest pushes, one every 5 s
PUSH = 200_000  # a realistic push (a model of ~50k float32 parameters)


def _squat(sources: int, per_source: int, monkeypatch: pytest.MonkeyPatch, *,
           stepped: bool = True) -> dict[str, float]:
    """scripts/bench/frame_budget.py's simulation: squatters at ``sources`` addresses
    (``per_source`` sessions each) announce 1 MiB frames with 8 bytes of body, hold
    them just under the grace, hang up and announce again ``RECONNECT`` s later;
    an honest source pushes ``PUSH`` bytes every 5 s. ``stepped=False``: frames
    reserve their whole size at their header, as before the fix."""
    bench = bench_frame_budget
    return bench.run(stepped=stepped, burst=8, sources=sources, sessions=per_source,
                     seconds=PUSHES * 5.0, push=PUSH, reconnect=RECONNECT)


@pytest.mark.parametrize("sources", [4, 8])
def test_sources_reconnecting_under_the_grace_leave_room_for_honest_pushes(
        sources: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # 64 sessions in all (a default node's session slots), spread over the sources
    got = _squat(sources, 64 // sources, monkeypatch)
    assert got["honest_arrived"] >= 0.9 * PUSHES, (
        f"honest {PUSH} B pushes: {got['honest_arrived']} of {PUSHES} arrived while "
        f"{sources} sources x {64 // sources} sessions announced 1 MiB frames, sent 8 "
        f"bytes of each and reconnected every {HOLD + RECONNECT} s ({got})")
    # what they hold is what 64 frames may hold before their bodies arrive
    assert got["held_peak_MiB"] * MIB <= 66 * FRAME_RESERVE_STEP
    # the same squatters against whole reservations: the attack this test is about
    before = _squat(sources, 64 // sources, monkeypatch, stepped=False)
    assert before["honest_arrived"] <= 0.1 * PUSHES, before


def test_a_frame_holds_at_most_twice_what_arrived_or_one_step() -> None:
    # whatever the chunking, a large frame's reservation stays within
    # max(step, 2 x bytes of its body received): holding budget costs bytes sent
    budget = FrameBudget(64 * MIB)
    step = budget.step
    for size, chunk in ((80 * K, 1), (FRAME, 1000), (3 * MIB + 5, 70 * K), (200 * K, 13)):
        decoder = FrameDecoder(4 * MIB, budget, source="10.0.0.1")
        frame = encode_frame(bytes(size))
        decoder.feed(frame[:4])  # the header alone: one step reserved
        assert budget.held == min(size, step)
        done: list[memoryview] = []
        for at in range(4, len(frame), chunk):
            done += decoder.feed(frame[at : at + chunk])
            if not done:
                received = decoder.body_received
                assert budget.held <= max(step, 2 * received), (size, chunk, received)
                assert budget.held >= received  # every byte in memory is counted
        assert [len(f) for f in done] == [size]
        assert budget.held == 0 and budget.held_by("10.0.0.1") == 0


# -- the same attack through the transport ------------------------------------


async def test_reconnecting_squatters_at_eight_addresses_leave_room_for_honest_pushes(
        autojump_clock: trio.testing.MockClock) -> None:
    # 8 sources x 4 sessions: each handshakes, announces 1 MiB with 8 bytes of
    # it, hangs up 4.9 s later (before the pace rule cuts it) and starts over
    net = MemoryNetwork()
    node = net.transport(Identity.generate(), "node:1", max_frame_size=FRAME)
    honest = net.transport(Identity.generate(), "honest:1", max_frame_size=FRAME)
    budget = node.frame_budget
    sources, per_source = 8, 4
    announced = 0
    most_held = 0

    async def squatter(source: int, index: int) -> None:
        nonlocal announced, most_held
        me = Transport(Identity.generate(), "127.0.0.1", 0)
        while True:
            client: trio.abc.Stream | None = None
            try:
                client = await member_session(node, net_nursery, me,
                                              f"198.51.100.{source + 1}:{5000 + index}")
                await client.send_all(struct.pack(">I", FRAME) + b"\x00" * 8)
                announced += 1
                await trio.sleep(HOLD)
                most_held = max(most_held, budget.held)
            except (ConnectionFailure, trio.BrokenResourceError):
                await trio.sleep(RECONNECT)  # refused (handshake slots, budget): again
            if client is not None:
                await client.aclose()

    async with trio.open_nursery() as net_nursery:
        await net_nursery.start(node.serve, handler)
        for s in range(sources):
            for i in range(per_source):
                net_nursery.start_soon(squatter, s, i)
        await wait_until(lambda: announced >= sources * per_source)
        ok, refused = await honest_pushes(honest, "node:1", PUSHES, PUSH)  # one every 5 s
        net_nursery.cancel_scope.cancel()
    assert ok >= 0.9 * PUSHES, (
        f"honest {PUSH} B requests: {ok} served, {refused} refused in {PUSHES * 5} s while "
        f"{sources} sources x {per_source} sessions announced 1 MiB frames of the "
        f"{budget.limit >> 20} MiB frame budget, sent 8 bytes of each and reconnected every "
        f"{HOLD} s ({announced} frames announced; budget peak {budget.peak}, refusals "
        f"{budget.refused})")
    assert announced > sources * per_source * (PUSHES * 5 / (HOLD + 1))  # they kept at it
    assert most_held <= (sources * per_source + 2) * budget.step


# -- a frame that cannot grow ---------------------------------------------------


def test_a_frame_that_finds_no_room_to_grow_is_cut_and_gives_its_budget_back() -> None:
    budget = FrameBudget(300 * K, share_pressure=0)  # shares always apply
    first = FrameDecoder(FRAME, budget, source="10.0.0.1")
    assert first.feed(encode_frame(bytes(200 * K))[: 100 * K]) == []
    first_holds = budget.held
    second = FrameDecoder(FRAME, budget, source="10.0.0.2")
    frame = encode_frame(bytes(200 * K))
    with pytest.raises(FrameBudgetExceeded) as cut:
        # admitted at its header; past what it holds, it finds no room to grow
        second.feed(frame[: 150 * K])
    assert not cut.value.by_source  # the node is busy: not the sender's doing
    assert str(cut.value).startswith(f"frame of {200 * K} bytes cut after ")
    assert "of its body: unfinished frames already hold " in str(cut.value)
    # it gave back what it held (the decoder is unusable, as after any refusal)
    assert budget.held == first_holds and budget.announced == 200 * K
    assert budget.held_by("10.0.0.2") == 0
    with pytest.raises(FrameBudgetExceeded):
        second.feed(b"\x00")
    second.release()  # idempotent after a cut
    assert budget.held == first_holds
    [done] = first.feed(encode_frame(bytes(200 * K))[100 * K :])
    assert len(done) == 200 * K and budget.held == 0 and budget.announced == 0


async def test_a_stream_whose_frame_cannot_grow_fails_as_the_node_being_busy(
        autojump_clock: trio.testing.MockClock) -> None:
    budget = FrameBudget(1 * MIB)
    assert budget.reserve(1 * MIB - 200 * K)  # other connections hold most of it
    near, far = trio.testing.memory_stream_pair()
    ms = MessageStream(near, max_frame_size=FRAME, budget=budget, source="10.0.0.3")
    frame = encode_frame(bytes(512 * K))

    async def send_in_two_parts() -> None:
        # a frame that arrives whole in one read never needs to grow: send part of
        # it, and the rest only once the reader is blocked on it (the autojump clock)
        await far.send_all(frame[: 300 * K])
        await trio.sleep(1)
        await far.send_all(frame[300 * K :])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_in_two_parts)
        with pytest.raises(ConnectionFailure) as failed:
            await ms.receive_payload(10, 10)
        nursery.cancel_scope.cancel()
    assert failed.value.kind == "busy"
    assert failed.value.reason.startswith(f"node busy: frame of {512 * K} bytes cut after ")
    assert budget.held == 1 * MIB - 200 * K  # the cut frame gave back what it held
    await ms.aclose()
    assert budget.held == 1 * MIB - 200 * K
