"""The Noise handshake as an outsider sees it on a real socket: a wrong swarm
key gets nothing back, a replayed first message gets nothing readable."""

from __future__ import annotations

import logging

import pytest
import trio

from p2p.testing import raw_exchange, wait_until
from p2p.wire import codec
from p2p.wire.framing import FrameDecoder, encode_frame
from p2p.wire.handshake import Handshake, PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.messages import NoiseMessage, Ping
from p2p.wire.transport import PeerUnreachable, Transport

SWARM = b"s" * 32
TAG = b"t" * 32


async def _serve(nursery: trio.Nursery, swarm_key: bytes | None) -> tuple[Transport, str]:
    async def handler(peer: PeerInfo, msg: object) -> None:
        return None

    server = Transport(Identity.generate(), "127.0.0.1", 0, tags=frozenset({TAG}),
                       swarm_key=swarm_key, read_timeout=1.0, connect_timeout=2.0)
    address = await nursery.start(server.serve, handler)
    return server, address


def _hello(swarm_key: bytes | None) -> bytes:
    hs = Handshake(Identity.generate(), initiator=True, listen_address="10.9.9.9:9",
                   swarm_key=swarm_key)
    return encode_frame(hs.start()[0])


async def test_wrong_swarm_key_gets_not_one_byte_back(
        nursery: trio.Nursery, caplog: pytest.LogCaptureFixture) -> None:
    server, address = await _serve(nursery, SWARM)
    with caplog.at_level(logging.WARNING, logger="p2p.wire.transport"):
        assert await raw_exchange(address, _hello(b"w" * 32)) == b""  # closed, silent
        await wait_until(lambda: server.open_connections == 0)
    assert any("wrong swarm key: the peer's first handshake message does not authenticate"
               in r.getMessage() for r in caplog.records)
    # a node with the wrong key is told what the silent close most likely means
    client = Transport(Identity.generate(), "127.0.0.1", 0, swarm_key=b"w" * 32)
    with pytest.raises(PeerUnreachable, match=r"connection closed by peer before answering "
                                              r"the first handshake message: the peer closed "
                                              r"the handshake: a different swarm key"):
        await client.request(address, Ping(1))
    await server.aclose()


@pytest.mark.parametrize("swarm_key", [SWARM, None])
async def test_replayed_first_message_gets_nothing_readable(
        nursery: trio.Nursery, swarm_key: bytes | None) -> None:
    server, address = await _serve(nursery, swarm_key)
    hello = _hello(swarm_key)  # recorded from a member's connection
    answers = []
    for _ in range(2):  # replayed twice: two different answers, neither readable
        received = await raw_exchange(address, hello, close_write=True)
        (frame,) = FrameDecoder(1 << 20).feed(received)
        msg = codec.decode(bytes(frame))
        assert isinstance(msg, NoiseMessage)  # Noise message 2, nothing in clear
        for secret in (server.identity.node_id, TAG, address.encode()):
            assert secret not in received
        answers.append(msg.noise)
    assert answers[0] != answers[1]  # fresh ephemeral keys: no session is replayed
    await server.aclose()
