"""Peer-chosen text cannot make the node write (or send back) megabyte lines.

Two holes: a DecodeError listed every unexpected key of a message (~3.2
characters per byte received: a 256 KiB first handshake frame, before the
swarm key is checked, gave a 0.8 MB WARNING line and as long a refusal sent
back), and a remote Error.reason (up to a frame of text) reached the push
and shuffle log lines in full, once per push. Now a DecodeError names at most
a few keys, a RemoteError keeps one short printable line of the peer's text,
and the transport cuts the texts of every line a peer causes.
"""

from __future__ import annotations

import logging

import msgpack
import numpy as np
import pytest
import trio
import trio.testing

from gossip import GossipDriver
from gossip.pushsum import PushSum
from p2p.runtime.protocol import register_node_messages
from p2p.runtime.transport_adapters import PushOverTransport
from p2p.testing import MemoryNetwork
from p2p.wire import codec
from p2p.wire.codec import Message
from p2p.wire.framing import encode_frame
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.messages import Pong
from p2p.wire.peer_text import MAX_PEER_TEXT, printable
from p2p.wire.transport import HANDSHAKE_MAX_FRAME_SIZE, Rejected, RemoteError, Transport

MAX_LINE = 4096  # characters: far above any honest line
register_node_messages()


class _Keep(logging.Handler):
    """The lines of one logger, kept from pytest's capture (it would print megabytes)."""

    def __init__(self, name: str, level: int) -> None:
        super().__init__(level)
        self.log = logging.getLogger(name)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def __enter__(self) -> list[str]:
        self._saved = (self.log.level, self.log.propagate)
        self.log.addHandler(self)
        self.log.setLevel(self.level)
        self.log.propagate = False
        return self.lines

    def __exit__(self, *exc: object) -> None:
        self.log.removeHandler(self)
        self.log.setLevel(self._saved[0])
        self.log.propagate = self._saved[1]


def _hello_with_extra_keys(limit: int) -> bytes:
    body: dict[object, object] = {"v": 3, "t": "noise_hello", "protocol": "x", "noise": b""}
    fixed = len(msgpack.packb(body, use_bin_type=True)) + 5  # + map32 header slack
    for i in range((limit - fixed) // 12):  # 12 bytes per extra field (bin8 of 9 + nil)
        body[i.to_bytes(9, "big")] = None
    payload: bytes = msgpack.packb(body, use_bin_type=True)
    assert len(payload) <= limit
    return payload


@pytest.mark.trio
async def test_a_pre_auth_frame_of_extra_keys_writes_and_sends_back_short_lines() -> None:
    node = Transport(Identity.generate(), "127.0.0.1", 0, swarm_key=b"k" * 32)

    async def handler(peer: object, msg: object) -> Pong:
        return Pong(0)

    payload = _hello_with_extra_keys(HANDSHAKE_MAX_FRAME_SIZE)
    client, server = trio.testing.memory_stream_pair()
    with _Keep("p2p.wire.transport", logging.WARNING) as lines:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(node.serve_stream, server, handler, "198.51.100.9:4000")
            await client.send_all(encode_frame(payload))
            with trio.fail_after(10):
                reply = b""
                while chunk := await client.receive_some(1 << 20):
                    reply += chunk
    longest = max(map(len, lines), default=0)
    assert lines and longest <= MAX_LINE, (
        f"a {len(payload)}-byte unauthenticated frame made the node write a "
        f"{longest}-character WARNING line: {lines[0][:160]}...")
    assert "more]" in lines[0]  # the keys beyond the first few are counted
    assert len(reply) <= MAX_LINE, f"and send a {len(reply)}-byte refusal back"


def test_a_decode_error_names_a_few_unexpected_keys_and_counts_the_rest() -> None:
    body = msgpack.unpackb(codec.encode(Pong(1)), raw=False)
    body.update({f"k{i:03}": None for i in range(100)})
    with pytest.raises(codec.DecodeError) as caught:
        codec.decode(msgpack.packb(body, use_bin_type=True))
    text = str(caught.value)
    listed = text[text.index("unexpected fields [") + 19:text.index(" and 92 more]")]
    assert len(listed.split(", ")) == 8 and all(k.startswith("'k") for k in listed.split(", "))
    body = msgpack.unpackb(codec.encode(Pong(1)), raw=False) | {"x": 1}
    with pytest.raises(codec.DecodeError, match=r"unexpected fields \['x'\]$"):
        codec.decode(msgpack.packb(body, use_bin_type=True))


@pytest.mark.trio
async def test_every_text_of_a_line_a_peer_caused_is_cut() -> None:
    node = Transport(Identity.generate(), "127.0.0.1", 0)
    with _Keep("p2p.wire.transport", logging.WARNING) as lines:
        for _ in range(3):  # the first in full, the others summed up later
            node._offence("198.51.100.9", "closing connection from %s: %s", "198.51.100.9:1",
                          "bad message: \x1b[2J" + "x" * 1_000_000)
        node._offences.flush(float("inf"))
    assert len(lines) == 2 and max(map(len, lines)) <= MAX_LINE, [len(line) for line in lines]
    assert "\x1b" not in lines[0] and "\\x1b[2J" in lines[0]


def test_remote_errors_keep_one_short_printable_line_of_the_peers_text() -> None:
    exc = RemoteError("peer:1", "rejected\n" * 100, "no\n" * 300_000)
    assert exc.reason == printable("no\n" * 300_000) and len(exc.reason) <= MAX_PEER_TEXT + 1
    assert len(exc.code) <= 41 and "\n" not in str(exc) and len(str(exc)) <= MAX_LINE
    honest = RemoteError("peer:1", "busy", "try again later")
    assert (honest.code, honest.reason) == ("busy", "try again later")


@pytest.mark.trio
async def test_a_refusing_peer_cannot_write_a_megabyte_line_per_push() -> None:
    net = MemoryNetwork()
    liar_id = Identity.generate()
    liar = net.transport(liar_id, "liar:1", max_frame_size=1 << 20)
    me = net.transport(Identity.generate(), "me:1", max_frame_size=1 << 20)

    async def refuse(peer: PeerInfo, msg: Message) -> Message:
        raise Rejected("rejected", "no " * 300_000)  # ~900 KB of reason

    core = PushSum(b"m" * 32, np.zeros(16))
    driver = GossipDriver({"global": core},
                          PushOverTransport(me, {liar_id.node_id: "liar:1"}, timeout=5),
                          lambda fp, n: [liar_id.node_id], push_timeout=5)
    with _Keep("gossip.driver", logging.DEBUG) as lines:  # refusals: debug, rate-limited
        async with trio.open_nursery() as nursery:
            await nursery.start(liar.serve, refuse)
            for _ in range(3):  # three rounds
                for peer, push in core.make_pushes([liar_id.node_id], trio.current_time()):
                    await driver._send("global", core, peer, push)
            nursery.cancel_scope.cancel()
    sizes = [len(line) for line in lines]
    assert lines and max(sizes) <= MAX_LINE, (
        f"3 refused pushes wrote lines of {sizes} characters: {lines[0][:120]}...")
