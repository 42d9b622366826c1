"""Admission in the transport: unfinished frames bounded, outgoing connections kept,
silent sessions displaced (loopback TCP and the in-memory network)."""

from __future__ import annotations

import contextlib
import functools
import logging
import struct
from dataclasses import dataclass

import pytest
import trio
import trio.testing

from p2p.testing import MemoryNetwork, open_session, wait_until
from p2p.wire import codec
from p2p.wire.admission import FRAME_PACE_GRACE
from p2p.wire.codec import Message
from p2p.wire.framing import encode_frame
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.messages import Ping, Pong
from p2p.wire.transport import PeerUnreachable, Transport, parse_address


@dataclass(frozen=True)
class Blob:
    data: bytes


codec.register(Blob, "test_admission_blob")


async def no_reply(peer: PeerInfo, msg: Message) -> Message | None:
    return None


async def pong_handler(peer: PeerInfo, msg: object) -> object | None:
    return None


def transport(**kwargs: object) -> Transport:
    return Transport(Identity.generate(), "127.0.0.1", 0, **kwargs)  # type: ignore[arg-type]


async def test_flood_of_unfinished_frames_is_bounded_and_given_back(
        caplog: pytest.LogCaptureFixture) -> None:
    size = 200 * 1024
    server = transport(max_frame_size=256 * 1024, frame_budget=4 * size + 100,
                       max_connections=32)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, pong_handler)
        sessions = []
        with caplog.at_level(logging.WARNING, logger="p2p.wire.transport"):
            for _ in range(12):
                ms, _ = await open_session(address)
                # a frame announced in full, of which 1 KiB ever arrives
                await ms.stream.send_all(struct.pack(">I", size) + b"\0" * 1024)
                sessions.append(ms)
            budget = server.frame_budget
            # all from one source: past half the budget its frames hold at
            # most its share (a quarter: one frame); below half it may burst
            # (a second frame), so the others keep at least half
            await wait_until(lambda: budget.refused == 10)
            assert budget.refused_by_source == 10
            assert budget.source_limit < 2 * size == budget.held_by("127.0.0.1")
            assert budget.peak == 2 * budget.step  # 1 KiB of each arrived: a step held
            await wait_until(lambda: server.admission.sessions <= 2)
        # one line for the source; the other refusals wait for the summary
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(lines) == 1, lines
        assert "unfinished frames from 127.0.0.1 already announce" in lines[0], lines
        for ms in sessions:
            await ms.aclose()
        await wait_until(lambda: server.open_connections == 0)
        assert budget.held == 0  # memory comes back with the connections
        await server.aclose()


async def test_outgoing_connections_survive_an_inbound_flood() -> None:
    node = transport(max_connections=2)  # 2 session slots (2 per source), 1 handshake slot
    peer, other = transport(), transport()
    async with trio.open_nursery() as nursery:
        address = await nursery.start(node.serve, pong_handler)
        peer_address = await nursery.start(peer.serve, pong_handler)
        other_address = await nursery.start(other.serve, pong_handler)
        assert await node.request(peer_address, Ping(1)) == Pong(1)
        pooled = node.dialer.pool[peer_address]
        # strangers take every incoming slot: sessions that ping, idle TCP connections
        sessions = [(await open_session(address))[0] for _ in range(2)]
        idle = [await trio.open_tcp_stream(*parse_address(address)) for _ in range(6)]
        await wait_until(lambda: node.admission.sessions == 2
                         and node.admission.refused.get("sessions_per_source", 0) == 6)
        # the node's own outgoing connection was not closed to admit them...
        assert node.dialer.pool[peer_address] is pooled and not pooled.closed
        assert await node.request(peer_address, Ping(2)) == Pong(2)
        # ...and it can still dial a new peer while the incoming slots are full
        assert await node.request(other_address, Ping(3)) == Pong(3)
        assert sorted(node.pooled_addresses) == sorted([peer_address, other_address])
        for ms in sessions:
            await ms.aclose()
        for s in idle:
            await s.aclose()
        nursery.cancel_scope.cancel()


async def test_a_newcomer_displaces_the_most_silent_session(
        autojump_clock: trio.testing.MockClock) -> None:
    net = MemoryNetwork()
    node = net.transport(Identity.generate(), "node:1", max_connections=2, idle_timeout=600)
    a, b, c = (net.transport(Identity.generate(), f"{x}:1") for x in "abc")
    async with trio.open_nursery() as nursery:
        await nursery.start(node.serve, pong_handler)
        await a.request("node:1", Ping(1))
        await trio.sleep(5)
        await b.request("node:1", Ping(1))
        assert node.admission.sessions == 2
        await trio.sleep(11)  # a silent 16 s, b 11 s: only a passes the 15 s of silence
        assert await c.request("node:1", Ping(2)) == Pong(2)
        assert node.admission.sessions == 2
        assert node.admission.refused == {"session_displaced": 1}
        # b is still connected; a's next request goes over a new connection
        assert await b.request("node:1", Ping(3)) == Pong(3)
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("ending", ["cancelled", "closed"])
async def test_a_reply_frame_left_unfinished_gives_its_budget_back(ending: str) -> None:
    # A peer that answers a request with the start of a big frame and then
    # stalls or hangs up: whether the request is cancelled or fails, the
    # requester's budget comes back.
    size = 200 * 1024
    client = transport(max_frame_size=256 * 1024, read_timeout=5.0)
    responder = transport()
    stalled, observed = trio.Event(), trio.Event()

    async def serve_one(stream: trio.SocketStream) -> None:
        ms = responder._message_stream(stream)
        await responder._handshake(ms, initiator=False, expected_node_id=None)
        await ms.receive_payload(5, 5)  # the request
        await stream.send_all(struct.pack(">I", size) + b"\0" * 1024)
        stalled.set()
        if ending == "closed":
            await observed.wait()
            await stream.aclose()
        else:
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, serve_one, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        budget = client.frame_budget
        held_mid_frame = []

        async def watch() -> None:
            await stalled.wait()
            await wait_until(lambda: budget.held > 0)
            held_mid_frame.append(budget.held)
            observed.set()
            if ending == "cancelled":
                request_scope.cancel()

        nursery.start_soon(watch)
        with trio.CancelScope() as request_scope:
            with pytest.raises(PeerUnreachable):  # unless cancelled first
                await client.request(f"127.0.0.1:{port}", Ping(1), timeout=30.0)
        assert request_scope.cancelled_caught == (ending == "cancelled")
        assert held_mid_frame == [budget.step]  # 1 KiB of it arrived: one step held
        assert budget.held == 0
        await client.aclose()
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("rate", [64 * 1024, None])
async def test_a_trickled_frame_is_dropped_once_it_falls_behind_the_floor_rate(
        autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture,
        rate: int | None) -> None:
    # A session announces a 1 MiB frame and sends 1 KiB every 6 s: never silent
    # for the 10 s read timeout, and within the whole-frame deadline (10 s +
    # 1 MiB at 64 KiB/s = 26 s) for long, but behind the floor rate once the
    # grace is over: dropped then, and the budget given back.
    size = 1 << 20
    options: dict[str, object] = {"read_timeout": 10.0, "idle_timeout": 600.0}
    if rate is not None:
        options["min_frame_rate"] = rate
    server = transport(**options)
    client = transport()
    client_end, server_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.serve_stream, server_end, no_reply, "10.0.0.9:1")
        ms = client._message_stream(client_end)
        await client._handshake(ms, initiator=True, expected_node_id=None)
        budget = server.frame_budget
        with caplog.at_level(logging.WARNING, logger="p2p.wire.transport"):
            await client_end.send_all(struct.pack(">I", size) + b"\0" * 1024)
            start = trio.current_time()
            sent = 1024

            async def trickle() -> None:
                nonlocal sent
                while True:
                    await trio.sleep(6)
                    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        await client_end.send_all(b"\0" * 1024)
                        sent += 1024

            nursery.start_soon(trickle)
            await wait_until(lambda: budget.held == budget.step)  # 1 KiB in: one step
            await wait_until(lambda: budget.held == 0, timeout=600)
            held_for = trio.current_time() - start
        assert budget.held == 0 and server.admission.sessions == 0
        # 1 KiB in after the header: due by grace + 1025 B at the floor rate
        # (the default 128 KiB/s), before the next KiB
        allowance = FRAME_PACE_GRACE + 1025 / (rate or 128 * 1024)
        assert allowance <= held_for <= allowance + 0.1
        assert sent == 1024  # dropped before the next KiB was due
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(lines) == 1, lines
        assert (f"frame of {size} bytes fell behind the floor rate: 1024 bytes received "
                f"{allowance:.1f} s after its header") in lines[0], lines
        await ms.aclose()
        nursery.cancel_scope.cancel()


async def test_a_frame_arriving_above_the_floor_rate_is_received(
        autojump_clock: trio.testing.MockClock) -> None:
    # the honest slow link: a 1 MiB request at 96 KiB/s (above the 64 KiB/s
    # floor; 11 s, more than the read timeout) in 8 KiB chunks is answered
    server = transport(read_timeout=10.0, min_frame_rate=64 * 1024)
    client = transport()
    client_end, server_end = trio.testing.memory_stream_pair()

    async def sizes(peer: PeerInfo, msg: Message) -> Message | None:
        return Pong(len(msg.data)) if isinstance(msg, Blob) else None

    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.serve_stream, server_end, sizes, "10.0.0.9:1")
        ms = client._message_stream(client_end)
        await client._handshake(ms, initiator=True, expected_node_id=None)
        frame = encode_frame(codec.encode(Blob(bytes(1 << 20))))
        start = trio.current_time()
        for at in range(0, len(frame), 8192):
            await client_end.send_all(frame[at : at + 8192])
            await trio.sleep(1 / 12)
        assert trio.current_time() - start > 10.0
        assert await ms.receive(5.0, 5.0) == Pong(1 << 20)
        assert server.frame_budget.held == 0
        await ms.aclose()
        nursery.cancel_scope.cancel()


async def test_an_unfinished_small_frame_is_counted_until_its_connection_closes(
        autojump_clock: trio.testing.MockClock) -> None:
    server = transport(max_connections=8, read_timeout=10.0)
    # one unfinished small frame per connection the transport may hold:
    # 8 sessions + 2 handshakes + 8 outgoing
    assert server.frame_budget.small_limit == 18 * 64 * 1024
    client = transport()
    client_end, server_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.serve_stream, server_end, no_reply, "10.0.0.9:1")
        ms = client._message_stream(client_end)
        await client._handshake(ms, initiator=True, expected_node_id=None)
        await client_end.send_all(struct.pack(">I", 40_000) + b"\0" * 100)
        budget = server.frame_budget
        await wait_until(lambda: budget.small_held == 40_000)
        assert budget.held == 0
        await ms.aclose()
        await wait_until(lambda: server.admission.sessions == 0)
        assert budget.small_held == 0
        nursery.cancel_scope.cancel()
