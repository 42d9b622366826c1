"""Transport: request/reply over memory streams and loopback TCP, and its failures."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import msgpack
import numpy as np
import pytest
import trio
import trio.testing

from p2p.testing import Tap, wait_until
from p2p.wire import codec
from p2p.wire.framing import encode_frame, uninitialized_buffer
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.messages import ERROR_INTERNAL, ERROR_NO_REPLY, Error, Ping, Pong
from p2p.wire.sealing import TAG_SIZE, Opener, Sealer, SealError
from p2p.wire.transport import (
    ConnectionFailure,
    MessageStream,
    PeerUnreachable,
    Rejected,
    RemoteError,
    Transport,
)

SWARM = b"k" * 32
MARKER = b"PLAINTEXT-MARKER-1234567890"


@dataclass(frozen=True)
class Echo:
    text: str
    blob: bytes
    values: np.ndarray


@dataclass(frozen=True)
class EchoReply:
    text: str
    peer: bytes
    total: float


codec.register(Echo, "test_echo")
codec.register(EchoReply, "test_echo_reply")


async def echo_handler(peer: PeerInfo, msg: object) -> object | None:
    if isinstance(msg, Echo):
        if msg.text == "reject":
            raise Rejected("rejected", "not today")
        if msg.text == "none":
            return None
        if msg.text == "crash":
            raise RuntimeError("boom")
        if msg.text == "unsendable":
            return EchoReply("x", b"", "not a float")  # type: ignore[arg-type]
        if msg.text == "unregistered":
            return object()
        if msg.text == "slow":
            await trio.sleep(5)
        return EchoReply(msg.text, peer.node_id, float(msg.values.sum()))
    return None


def echo(text: str = "hi", n: int = 4) -> Echo:
    return Echo(text, MARKER, np.arange(n, dtype=np.float64))


def transport(swarm_key: bytes | None = None, **kwargs: object) -> Transport:
    return Transport(Identity.generate(), "127.0.0.1", 0, swarm_key=swarm_key, **kwargs)  # type: ignore[arg-type]


# --- in-memory network ----------------------------------------------------------------


class MemoryNet:
    """Routes ``connector`` calls to server transports over memory stream pairs."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.servers: dict[str, Transport] = {}
        self.wire = bytearray()  # everything that crossed any connection
        self.client_ends: list[trio.abc.Stream] = []

    def add(self, address: str, server: Transport) -> None:
        self.servers[address] = server

    async def connect(self, address: str) -> trio.abc.Stream:
        server = self.servers.get(address)
        if server is None:
            raise OSError(f"connection refused by {address}")
        client_end, server_end = trio.testing.memory_stream_pair()
        self.nursery.start_soon(server.serve_stream, server_end, echo_handler, "mem-client")
        self.client_ends.append(client_end)
        return Tap(client_end, self.wire)


async def test_memory_request_reply_and_pooling() -> None:
    async with trio.open_nursery() as nursery:
        net = MemoryNet(nursery)
        server = transport(SWARM)
        net.add("mem:1", server)
        client = transport(SWARM, connector=net.connect)
        reply = await client.request("mem:1", echo("hello", 10))
        assert reply == EchoReply("hello", client.identity.node_id, 45.0)
        assert await client.request("mem:1", Ping(42)) == Pong(42)
        assert len(net.client_ends) == 1  # pooled: one connection for both requests
        assert client.pooled_addresses == ["mem:1"]
        await client.aclose()
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("swarm_key", [None, SWARM])
async def test_sealed_frames_are_not_readable(swarm_key: bytes | None) -> None:
    async with trio.open_nursery() as nursery:
        net = MemoryNet(nursery)
        net.add("mem:1", transport(swarm_key))
        client = transport(swarm_key, connector=net.connect)
        await client.request("mem:1", echo())
        # Without a swarm key frames are authenticated but in clear; with it, sealed.
        assert (MARKER in net.wire) == (swarm_key is None)
        nursery.cancel_scope.cancel()


async def test_handler_outcomes_become_error_replies(caplog: pytest.LogCaptureFixture) -> None:
    async with trio.open_nursery() as nursery:
        net = MemoryNet(nursery)
        net.add("mem:1", transport())
        client = transport(connector=net.connect)
        with pytest.raises(RemoteError) as info:
            await client.request("mem:1", echo("reject"))
        assert (info.value.code, info.value.reason) == ("rejected", "not today")
        assert info.value.address == "mem:1"
        with pytest.raises(RemoteError) as info:
            await client.request("mem:1", echo("none"))
        assert info.value.code == ERROR_NO_REPLY
        with (
            caplog.at_level(logging.ERROR, logger="p2p.wire.transport"),
            pytest.raises(RemoteError) as info,
        ):
            await client.request("mem:1", echo("crash"))
        assert info.value.code == ERROR_INTERNAL
        assert "boom" not in info.value.reason  # internals stay local...
        assert any("handler failed" in r.message for r in caplog.records)  # ...but are logged
        for text in ("unsendable", "unregistered"):
            with caplog.at_level(logging.ERROR, logger="p2p.wire.transport"):
                with pytest.raises(RemoteError, match="unsendable reply"):
                    await client.request("mem:1", echo(text))
        # the connection survived all of this
        assert isinstance(await client.request("mem:1", echo()), EchoReply)
        assert len(net.client_ends) == 1
        nursery.cancel_scope.cancel()


async def test_injected_frame_closes_connection(caplog: pytest.LogCaptureFixture) -> None:
    """An attacker writing a forged frame into a sealed connection gets it closed."""
    async with trio.open_nursery() as nursery:
        net = MemoryNet(nursery)
        net.add("mem:1", transport(SWARM))
        client = transport(SWARM, connector=net.connect)
        await client.request("mem:1", echo())
        with caplog.at_level(logging.WARNING, logger="p2p.wire.transport"):
            await net.client_ends[0].send_all(encode_frame(codec.encode(Ping(1))))
            await wait_until(lambda: any("decrypt failure" in r.getMessage()
                                         for r in caplog.records))
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert "mem-client" in warnings[0] and "decrypt failure" in warnings[0]
        # the client's pooled connection is dead; the next request reconnects transparently
        assert isinstance(await client.request("mem:1", echo()), EchoReply)
        assert len(net.client_ends) == 2
        nursery.cancel_scope.cancel()


async def test_replayed_sealed_frame_closes_connection(caplog: pytest.LogCaptureFixture) -> None:
    async with trio.open_nursery() as nursery:
        net = MemoryNet(nursery)
        net.add("mem:1", transport(SWARM))
        client = transport(SWARM, connector=net.connect)
        mark = len(net.wire)
        await client.request("mem:1", Ping(5))
        # the last frame the client sent is a sealed Ping: 4-byte length + ciphertext
        sent = bytes(net.wire[mark:])
        size = int.from_bytes(sent[:4], "big")
        with caplog.at_level(logging.WARNING, logger="p2p.wire.transport"):
            await net.client_ends[0].send_all(sent[: 4 + size])
            await wait_until(lambda: any("decrypt failure" in r.getMessage()
                                         for r in caplog.records))
        assert any("decrypt failure" in r.getMessage() for r in caplog.records)
        nursery.cancel_scope.cancel()


async def test_rate_limit_throttles(autojump_clock: trio.testing.MockClock) -> None:
    async with trio.open_nursery() as nursery:
        net = MemoryNet(nursery)
        net.add("mem:1", transport(max_messages_per_second=10.0))
        client = transport(connector=net.connect)
        start = trio.current_time()
        for i in range(30):
            await client.request("mem:1", Ping(i))
        # 10 burst, then 20 more at 10/s
        assert trio.current_time() - start >= 1.9
        nursery.cancel_scope.cancel()


# --- loopback TCP ----------------------------------------------------------------------


@pytest.mark.parametrize("cipher", ["chacha20", "aes-gcm"])
async def test_tcp_request_reply_with_swarm_key(cipher: str) -> None:
    server = transport(SWARM, cipher=cipher)
    client = transport(SWARM)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, echo_handler)
        assert address == server.listen_address and address.startswith("127.0.0.1:")
        assert not address.endswith(":0")
        big = Echo("big", b"", np.ones(131072))
        reply = await client.request(address, big)
        assert reply == EchoReply("big", client.identity.node_id, 131072.0)
        assert await client.request(address, Ping(1), node_id=server.identity.node_id) == Pong(1)
        await client.aclose()
        await server.aclose()


async def _raw_exchange(address: str, data: bytes) -> bytes:
    """Connect, send ``data``, return everything received until the peer closes."""
    host, port = address.rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    received = bytearray()
    with trio.fail_after(60):  # a hang guard: the node closes at once
        await stream.send_all(data)
        while chunk := await stream.receive_some(65536):
            received += chunk
    await stream.aclose()
    return bytes(received)


@pytest.mark.parametrize(
    ("garbage", "reason"),
    [
        (encode_frame(b"\xc1\xc1"), "malformed msgpack"),
        (b"\xff\xff\xff\xff", "exceeds the maximum frame size"),
        (encode_frame(codec.encode(Error("x", "y"))[:-1] + b"\x00"), "handshake failed"),
    ],
)
async def test_malformed_input_closes_only_that_connection(
    garbage: bytes, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = transport(max_frame_size=1 << 20)
    client = transport()
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, echo_handler)
        assert isinstance(await client.request(address, echo()), EchoReply)  # pooled, open
        with caplog.at_level(logging.WARNING, logger="p2p.wire.transport"):
            await _raw_exchange(address, garbage)  # returns: the server closed it
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, warnings
        assert warnings[0].startswith("closing connection from 127.0.0.1:")
        assert reason in warnings[0]
        # the server is still up, and the other connection still works
        assert isinstance(await client.request(address, echo()), EchoReply)
        assert server.open_connections == 1
        await server.aclose()


async def test_unknown_message_type_after_handshake_closes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with trio.open_nursery() as nursery:
        net = MemoryNet(nursery)
        net.add("mem:1", transport())
        client = transport(connector=net.connect)
        await client.request("mem:1", Ping(0))
        payload = msgpack.packb({"v": codec.PROTOCOL_VERSION, "t": "zzzz"})
        with caplog.at_level(logging.WARNING, logger="p2p.wire.transport"):
            await net.client_ends[0].send_all(encode_frame(payload))
            await wait_until(lambda: any("unknown message type" in r.getMessage()
                                         for r in caplog.records))
        assert any("unknown message type 'zzzz'" in r.getMessage() for r in caplog.records)
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("client_key", "reason"),
    [(None, "missing swarm key"), (b"w" * 32, "wrong swarm key")],
)
async def test_node_without_swarm_key_cannot_join(
    client_key: bytes | None, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = transport(SWARM)
    outsider = transport(client_key)
    served: list[object] = []

    async def recording_handler(peer: PeerInfo, msg: object) -> object | None:
        served.append(msg)
        return await echo_handler(peer, msg)

    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, recording_handler)
        with caplog.at_level(logging.WARNING, logger="p2p.wire.transport"):
            # the outsider is not told which: its own node names the likely causes
            with pytest.raises(PeerUnreachable, match="the peer closed the handshake") as info:
                await outsider.request(address, echo())
            # the server's log says which
            await wait_until(lambda: any(reason in r.getMessage() for r in caplog.records))
        assert info.value.address == address
        assert served == []  # nothing reached the handler
        await server.aclose()


async def test_identity_mismatch_and_unreachable() -> None:
    server = transport()
    client = transport(connect_timeout=2)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, echo_handler)
        with pytest.raises(PeerUnreachable, match="identity mismatch"):
            await client.request(address, Ping(1), node_id=b"\x01" * 32)
        await server.aclose()
    # nothing listens there any more
    with pytest.raises(PeerUnreachable, match="connect failed"):
        await client.request(address, Ping(1))
    with pytest.raises(PeerUnreachable, match="host:port"):
        await client.request("no-port", Ping(1))


async def test_reply_timeout_raises_and_drops_connection() -> None:
    server = transport()
    client = transport()
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, echo_handler)
        with pytest.raises(PeerUnreachable, match="timed out"):
            await client.request(address, echo("slow"), timeout=0.1)
        assert client.pooled_addresses == []
        await server.aclose()


async def test_connection_limit_refuses_extra_incoming(caplog: pytest.LogCaptureFixture) -> None:
    server = transport(max_connections=1)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, echo_handler)
        host, port = address.rsplit(":", 1)
        # occupies the only handshake slot (max_connections=1 leaves one)
        first = await trio.open_tcp_stream(host, int(port))
        await wait_until(lambda: server.open_connections == 1)
        with caplog.at_level(logging.WARNING, logger="p2p.wire.transport"):
            assert await _raw_exchange(address, b"") == b""  # closed at once
        assert any("handshakes from 127.0.0.1 already in progress (limit 1 per source)"
                   in r.getMessage() for r in caplog.records)
        await first.aclose()
        await server.aclose()


async def test_idle_connections_are_closed_and_stale_ones_retried() -> None:
    server = transport(idle_timeout=0.1)  # closes incoming after 2 x 0.1 s of silence
    client = transport(idle_timeout=30)  # would keep its pooled connection
    reaper = transport(idle_timeout=0.1)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, echo_handler)
        await nursery.start(reaper.serve, echo_handler)
        await client.request(address, Ping(1))
        await reaper.request(address, Ping(1))
        await wait_until(lambda: reaper.pooled_addresses == [])
        # and the server's 2 x 0.1 s of silence on the client's connection
        await wait_until(lambda: server.open_connections == 0)
        # the reaper (running serve) dropped its idle outgoing connection
        assert reaper.pooled_addresses == []
        # the server closed the client's connection; the request retries on a new one
        assert client.pooled_addresses == [address]
        assert await client.request(address, Ping(2)) == Pong(2)
        await reaper.aclose()
        await server.aclose()


async def test_cancelled_request_does_not_leave_a_stale_reply() -> None:
    async with trio.open_nursery() as nursery:
        net = MemoryNet(nursery)
        net.add("mem:1", transport())
        client = transport(connector=net.connect)
        with trio.move_on_after(0.1):
            await client.request("mem:1", echo("slow"))
        # a fresh connection answers the next request with its own reply
        assert await client.request("mem:1", Ping(9)) == Pong(9)
        assert len(net.client_ends) == 2
        nursery.cancel_scope.cancel()


async def test_pooled_connection_is_not_used_for_another_identity() -> None:
    async with trio.open_nursery() as nursery:
        net = MemoryNet(nursery)
        server = transport()
        net.add("mem:1", server)
        client = transport(connector=net.connect)
        await client.request("mem:1", Ping(1), node_id=server.identity.node_id)
        with pytest.raises(PeerUnreachable, match="identity mismatch"):
            await client.request("mem:1", Ping(2), node_id=b"\x02" * 32)
        assert len(net.client_ends) == 2  # the pooled one was not trusted: a fresh handshake
        nursery.cancel_scope.cancel()


# --- the lean hot path: big frames, sealing in place, one cancel scope per exchange ----


@pytest.mark.parametrize(("swarm_key", "cipher"),
                         [(None, "chacha20"), (SWARM, "chacha20"), (SWARM, "aes-gcm")])
async def test_tcp_big_frames_arrive_intact_back_to_back(swarm_key: bytes | None,
                                                         cipher: str) -> None:
    # Over a real socket the payload goes out with one vectored write (clear) or
    # is sealed into the outgoing buffer, and is received into its own buffer.
    server = transport(swarm_key, cipher=cipher)
    client = transport(swarm_key, cipher=cipher)
    values = np.random.default_rng(3).standard_normal(300_000)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, echo_handler)
        for i in range(3):
            reply = await client.request(address, Echo(f"n{i}", MARKER, values * i))
            assert reply == EchoReply(f"n{i}", client.identity.node_id, float((values * i).sum()))
        await client.aclose()
        await server.aclose()


def test_encode_parts_concatenate_to_the_payload_and_reference_the_array() -> None:
    values = np.random.default_rng(0).standard_normal(20_000)  # 160 KB: referenced
    big = Echo("big", MARKER, values)
    parts = codec.encode_parts(big)
    assert b"".join(parts) == codec.encode(big)
    assert any(isinstance(p, memoryview) and np.shares_memory(np.frombuffer(p), values)
               for p in parts)
    small = echo("small", 10)
    assert codec.encode_parts(small) == [codec.encode(small)]


@pytest.mark.parametrize("cipher", ["chacha20", "aes-gcm"])
def test_sealing_in_place_matches_and_refuses_tampering(cipher: str) -> None:
    key = b"s" * 32
    sealer, opener = Sealer(key, cipher), Opener(key, cipher)
    plain = bytes(range(256)) * 400
    out = uninitialized_buffer(len(plain) + TAG_SIZE)
    sealer.seal_into(plain, out)
    assert bytes(out) == Sealer(key, cipher).seal(plain)  # same bytes as the one-shot seal
    frame = bytearray(out)
    assert opener.open_in_place(memoryview(frame)) == plain
    assert bytes(frame[: len(plain)]) == plain  # decrypted over itself
    with pytest.raises(ValueError, match="seal_into needs"):
        sealer.seal_into(plain, uninitialized_buffer(len(plain)))
    second, third = bytearray(sealer.seal(b"two")), bytearray(sealer.seal(b"three"))
    with pytest.raises(SealError, match="frame 1 failed authentication"):
        opener.open_in_place(memoryview(third))  # out of order
    with pytest.raises(SealError, match="must be closed"):
        opener.open_in_place(memoryview(second))  # the channel stays failed


@pytest.mark.parametrize("cipher", ["chacha20", "aes-gcm"])
@pytest.mark.parametrize("size", [1000, 256 * 1024 - 1, 256 * 1024, 700_001])
def test_sealing_parts_gives_the_one_shot_seal(cipher: str, size: int) -> None:
    # Gathered and sealed in place, or (large AES-GCM frames) encrypted from the
    # parts where they lie: the same bytes as sealing their concatenation.
    key = b"p" * 32
    data = np.random.default_rng(size).standard_normal((size - 10) // 4).astype(np.float32)
    head, tail = b"h" * 7, bytearray(b"t" * (size - 7 - data.nbytes))
    parts = [head, memoryview(data), tail]  # a float32 view: sizes are its bytes
    whole = b"".join([head, data.tobytes(), bytes(tail)])
    assert len(whole) == size
    sealer, opener, reference = Sealer(key, cipher), Opener(key, cipher), Sealer(key, cipher)
    for _ in range(2):  # two frames: the counter moves on once per frame
        out = uninitialized_buffer(size + TAG_SIZE)
        sealer.seal_parts_into(parts, out)
        assert bytes(out) == reference.seal(whole)
        assert bytes(opener.open_in_place(out)) == whole
    with pytest.raises(ValueError, match=f"needs {size + TAG_SIZE} bytes"):
        sealer.seal_parts_into(parts, uninitialized_buffer(size))
    third = uninitialized_buffer(size + TAG_SIZE)
    sealer.seal_parts_into(parts, third)  # the refused one used up no counter
    assert bytes(opener.open_in_place(third)) == whole


@pytest.mark.parametrize("cipher", ["chacha20", "aes-gcm"])
def test_a_refused_seal_uses_up_no_counter(cipher: str) -> None:
    key = b"u" * 32
    sealer, opener = Sealer(key, cipher), Opener(key, cipher)
    for wrong in (0, 5 + TAG_SIZE - 1, 5 + TAG_SIZE + 1):
        with pytest.raises(ValueError, match=f"seal_into needs {5 + TAG_SIZE} bytes"):
            sealer.seal_into(b"first", uninitialized_buffer(wrong))
    out = uninitialized_buffer(5 + TAG_SIZE)
    sealer.seal_into(b"first", out)
    assert bytes(opener.open_in_place(out)) == b"first"  # frame 0: still in step
    assert bytes(opener.open_in_place(memoryview(bytearray(sealer.seal(b"next"))))) == b"next"


def test_sealing_in_place_refuses_a_flipped_bit_and_a_short_frame() -> None:
    key = b"t" * 32
    frame = bytearray(Sealer(key).seal(b"payload"))
    frame[3] ^= 1
    with pytest.raises(SealError, match="failed authentication"):
        Opener(key).open_in_place(memoryview(frame))
    with pytest.raises(SealError, match="shorter than the tag"):
        Opener(key).open_in_place(memoryview(bytearray(5)))


@pytest.mark.parametrize("kind", ["memory", "socket"])
async def test_read_timeouts_name_the_step(autojump_clock: trio.testing.MockClock,
                                           kind: str) -> None:
    # the socket path reads the file descriptor directly: the same deadlines apply
    near, far = (trio.testing.memory_stream_pair() if kind == "memory" else socket_streams())
    ms = MessageStream(near)
    with pytest.raises(ConnectionFailure, match="after 7 s waiting for a message") as idle:
        await ms.receive_payload(7, 1)
    assert idle.value.kind == "idle"
    await far.send_all(encode_frame(b"x" * 100)[:30])
    with pytest.raises(ConnectionFailure, match="after 1 s waiting for rest of a frame") as cut:
        await ms.receive_payload(7, 1)
    assert cut.value.kind == "io"


async def test_one_deadline_block_serves_a_whole_exchange(
    autojump_clock: trio.testing.MockClock,
) -> None:
    near, far = trio.testing.memory_stream_pair()
    ms, peer = MessageStream(near, write_timeout=2), MessageStream(far)
    with ms.deadlines():
        await peer.send_payload(b"request")
        assert await ms.receive_payload(5, 5) == b"request"
        await trio.sleep(100)  # a slow handler between steps: no deadline runs
        await ms.send_payload(b"reply")
        assert await peer.receive_payload(5, 5) == b"reply"
        with pytest.raises(RuntimeError, match="do not nest"):
            with ms.deadlines():
                pass
    with pytest.raises(ConnectionFailure, match="after 3 s waiting for a message"):
        with ms.deadlines():
            await ms.receive_payload(3, 3)
    assert trio.current_time() >= 103


async def test_send_timeout_inside_a_deadline_block(autojump_clock: trio.testing.MockClock) -> None:
    near, _far = trio.testing.lockstep_stream_pair()  # send_all waits for a reader: none comes
    ms = MessageStream(near, write_timeout=2)
    with pytest.raises(ConnectionFailure, match="send timed out after 2 s"):
        with ms.deadlines():
            await ms.send_payload(b"nobody reads this")


async def test_a_concurrent_reader_does_not_use_the_writers_block(
    autojump_clock: trio.testing.MockClock,
) -> None:
    near, far = trio.testing.memory_stream_pair()
    ms, peer = MessageStream(near), MessageStream(far)
    received: list[bytes] = []

    async def reader() -> None:
        for _ in range(3):
            received.append(bytes(await ms.receive_payload(50, 50)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        with ms.deadlines():
            for i in range(3):
                await ms.send_payload(b"out%d" % i)
                await peer.send_payload(b"in%d" % i)
                await trio.sleep(10)
        for i in range(3):
            assert await peer.receive_payload(5, 5) == b"out%d" % i
    assert received == [b"in0", b"in1", b"in2"]


# --- the socket path: direct nonblocking reads and writes -------------------------


def socket_streams() -> tuple[trio.SocketStream, trio.SocketStream]:
    """A connected pair of socket streams (the transport reads and writes their
    file descriptors directly)."""
    a, b = trio.socket.socketpair()
    return trio.SocketStream(a), trio.SocketStream(b)


async def test_socket_read_timeout_runs_from_the_last_chunk(
    autojump_clock: trio.testing.MockClock,
) -> None:
    near, far = socket_streams()
    # a floor rate low enough that the whole-frame deadline (10 s + 30 s) is not
    # what this test is about (see test_admission_transport for that one)
    ms = MessageStream(near, min_frame_rate=10_000)
    frame = encode_frame(b"y" * 300_000)
    received: list[bytes] = []

    async def slow_sender() -> None:
        for start in range(0, len(frame), 100_000):
            await far.send_all(frame[start : start + 100_000])
            await trio.sleep(9)  # each pause under read_timeout, all of them over it

    async with trio.open_nursery() as nursery:
        nursery.start_soon(slow_sender)
        received.append(bytes(await ms.receive_payload(10, 10)))
    assert received == [b"y" * 300_000]
    assert trio.current_time() >= 27


async def test_socket_send_timeout_covers_the_whole_frame(
    autojump_clock: trio.testing.MockClock,
) -> None:
    near, _far = socket_streams()  # nobody reads: the socket fills up
    ms = MessageStream(near, write_timeout=2)
    with pytest.raises(ConnectionFailure, match="send timed out after 2 s") as failure:
        await ms.send_payload(b"z" * (8 << 20))
    assert failure.value.kind == "io"
    assert 2 <= trio.current_time() < 3


async def test_socket_steps_are_checkpoints() -> None:
    near, far = socket_streams()
    ms, peer = MessageStream(near), MessageStream(far)
    with trio.testing.assert_checkpoints():  # neither step has to wait
        await peer.send_payload(b"ready")
    with trio.testing.assert_checkpoints():
        assert await ms.receive_payload(5, 5) == b"ready"
    await peer.send_payload(b"still there")
    with trio.CancelScope() as scope:
        scope.cancel()
        await ms.receive_payload(5, 5)  # cancelled before reading anything
    assert scope.cancelled_caught
    assert await ms.receive_payload(5, 5) == b"still there"


async def test_the_wait_for_an_answer_has_the_first_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Without a deadlines() block, the receive after a send with reply_follows
    # makes its cancel scope with the deadline already set: the same timeout,
    # from the same moment (the send did not wait), named the same way.
    near, far = socket_streams()
    ms, peer = MessageStream(near), MessageStream(far)
    start = trio.current_time()
    await ms.send_parts([b"request"], reply_follows=True)
    with trio.fail_after(100), \
            pytest.raises(ConnectionFailure, match="after 3 s waiting for a message") as idle:
        await ms.receive_payload(3, 1)
    assert idle.value.kind == "idle"
    assert trio.current_time() - start == pytest.approx(3)
    assert bytes(await peer.receive_payload(5, 5)) == b"request"
    # answered in time: the reply comes back, and the next wait is armed afresh
    await ms.send_parts([b"again"], reply_follows=True)
    assert bytes(await peer.receive_payload(5, 5)) == b"again"
    await trio.sleep(2)  # within 3 s of the send
    await peer.send_payload(b"reply")
    assert bytes(await ms.receive_payload(3, 1)) == b"reply"
    await trio.sleep(10)  # no deadline left behind between exchanges
    await ms.send_parts([b"third"], reply_follows=True)
    with trio.CancelScope() as scope:
        scope.cancel()
        await ms.receive_payload(3, 1)  # the wait is a checkpoint: cancelled
    assert scope.cancelled_caught


async def test_a_send_followed_by_a_receive_yields_in_the_receive_only() -> None:
    near, far = socket_streams()
    ms, peer = MessageStream(near), MessageStream(far)
    with trio.CancelScope() as scope:
        scope.cancel()
        await ms.send_parts([b"never"], reply_follows=True)  # cancellation still checked
    assert scope.cancelled_caught
    # the socket takes it at once: no yield of the send's own (a cancel point only)
    with pytest.raises(AssertionError, match="did not yield"), \
            trio.testing.assert_checkpoints():
        await ms.send_parts([b"request"], reply_follows=True)
    with trio.testing.assert_checkpoints():  # without reply_follows: a full checkpoint
        await peer.send_payload(b"reply")
    with trio.testing.assert_checkpoints():  # the receive that follows is one
        assert bytes(await ms.receive_payload(5, 5)) == b"reply"
    assert bytes(await peer.receive_payload(5, 5)) == b"request"  # ("never" never went)


async def test_the_answer_to_a_send_is_awaited_and_the_wait_is_cancellable(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # After a frame that went out whole with reply_follows, the receive waits for
    # the socket without trying a read first: it is still the step's checkpoint,
    # its deadline still applies, and a cancelled wait leaves the stream usable.
    near, far = socket_streams()
    ms, peer = MessageStream(near), MessageStream(far)
    reads: list[int] = []
    real_readv = os.readv

    def counting_readv(fd: int, buffers: list[memoryview]) -> int:
        reads.append(fd)
        return real_readv(fd, buffers)

    async def answer() -> None:
        await peer.send_payload(bytes(await peer.receive_payload(5, 5)) + b" back")

    monkeypatch.setattr(os, "readv", counting_readv)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer)
        await trio.testing.wait_all_tasks_blocked()  # the peer waits for the request
        await ms.send_parts([b"ping"], reply_follows=True)
        assert bytes(await ms.receive_payload(5, 5)) == b"ping back"
    assert reads.count(near.socket.fileno()) == 1  # no read bound to fail first
    await ms.send_parts([b"request"], reply_follows=True)
    with pytest.raises(ConnectionFailure, match="after 4 s waiting for a message") as idle:
        await ms.receive_payload(4, 1)
    assert idle.value.kind == "idle"
    assert 4 <= trio.current_time() < 5
    assert bytes(await peer.receive_payload(5, 5)) == b"request"
    await ms.send_parts([b"again"], reply_follows=True)
    with trio.move_on_after(2) as scope:  # the caller gives up while waiting
        await ms.receive_payload(60, 60)
    assert scope.cancelled_caught
    await peer.send_payload(b"late " + bytes(await peer.receive_payload(5, 5)))
    assert bytes(await ms.receive_payload(5, 5)) == b"late again"  # nothing lost or mixed up
    # frames already there: the wait ends at once, and the second frame read
    # with the first comes from those pending, without any wait
    await peer.send_payload(b"one")
    await peer.send_payload(b"two")
    await ms.send_parts([b"ask"], reply_follows=True)
    with trio.testing.assert_checkpoints():
        assert bytes(await ms.receive_payload(5, 5)) == b"one"
    assert bytes(await ms.receive_payload(5, 5)) == b"two"


async def test_cancelled_request_over_tcp_drops_its_connection() -> None:
    # The requester waits for its reply straight after sending (socket path): a
    # request cancelled in that wait must not leave its late reply to the next one.
    server = transport()
    client = transport()
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, echo_handler)
        assert await client.request(address, Ping(1)) == Pong(1)
        with trio.move_on_after(0.2) as scope:
            await client.request(address, echo("slow"))  # the handler sleeps 5 s
        assert scope.cancelled_caught
        assert client.pooled_addresses == []  # dropped, not pooled with a reply pending
        assert await client.request(address, Ping(2)) == Pong(2)
        reply = await client.request(address, echo("after", n=3))
        assert isinstance(reply, EchoReply) and reply.text == "after"
        await client.aclose()
        await server.aclose()


async def test_closing_a_socket_stream_wakes_its_reader() -> None:
    near, _far = socket_streams()
    ms = MessageStream(near)
    failures: list[ConnectionFailure] = []

    async def reader() -> None:
        try:
            await ms.receive_payload(60, 60)
        except ConnectionFailure as exc:
            failures.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        await ms.aclose()
    assert [f.kind for f in failures] == ["broken"]
    with pytest.raises(ConnectionFailure, match="receive failed") as again:
        await ms.receive_payload(1, 1)  # and a closed stream fails at once
    assert again.value.kind == "broken"
    with pytest.raises(ConnectionFailure, match="send failed"):
        await ms.send_payload(b"late")


@pytest.mark.parametrize("swarm_key", [None, SWARM])
async def test_received_arrays_view_their_frame(swarm_key: bytes | None) -> None:
    # The receiver learns where array data lies in frames of a size and receives
    # the next ones so that it starts aligned: decoded arrays view the frame.
    server = transport(swarm_key)
    client = transport(swarm_key)
    seen: list[tuple[bool, bool]] = []

    async def handler(peer: PeerInfo, msg: object) -> object:
        assert isinstance(msg, Echo)
        seen.append((isinstance(msg.values.base, memoryview), msg.values.flags.aligned))
        return await echo_handler(peer, msg)

    values = np.random.default_rng(4).standard_normal(30_000)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, handler)
        for i in range(4):
            reply = await client.request(address, Echo(f"v{i}", MARKER, values))
            assert reply == EchoReply(f"v{i}", client.identity.node_id, float(values.sum()))
        await client.aclose()
        await server.aclose()
    assert all(aligned for _, aligned in seen)
    assert all(viewed for viewed, _ in seen[1:])
