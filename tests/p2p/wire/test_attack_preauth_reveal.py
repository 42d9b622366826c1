"""Attack: fingerprint a node before proving membership.

DESIGN.md section 7: nothing about the node is revealed before the peer
proved membership. A scanner without the swarm key connects to a keyed node
and sends whatever it likes first (a hello under a wrong key, a keyless
hello, a hello of another protocol version, another handshake protocol, a
message of the wrong type, junk, an HTTP request). Whatever it sends, it gets
the same answer back: no byte at all, then the close. So it learns neither
the node's protocol version nor that (or how) it is keyed from the answer; the
node's own log says why it refused.

An open swarm (no swarm key) has no membership to prove: anyone completes
the handshake and learns the node's id, version and address anyway. There
the node keeps explaining a refusal (another protocol version, a swarm key
it does not have) in clear, which helps an operator more than it tells a
scanner.

The keyed node holds to this in both roles: as initiator it does not answer
an unauthenticated reply with a refusal in clear either (its hello, which
names its handshake protocol and wire version, is the one thing it must
send first).
"""

from __future__ import annotations

import dataclasses
import functools
import logging

import msgpack
import pytest
import trio

from p2p.testing import raw_exchange, wait_until
from p2p.wire import codec
from p2p.wire.framing import FrameDecoder, encode_frame
from p2p.wire.handshake import PROTOCOL_KEYED, PROTOCOL_PLAIN, Handshake, PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.messages import Error, NoiseHello, Ping
from p2p.wire.transport import PeerUnreachable, Transport

SWARM = b"s" * 32
OTHER = b"o" * 32

#: Connect and handshake timeout of the initiators here: the tests wait on a close
#: that comes at once, so no load on the machine may turn it into a timeout.
PATIENT = 30.0

#: What the initiator's operator reads when a node closes the handshake unanswered.
CLOSED = ("the peer closed the handshake: a different swarm key, no swarm key where one is "
          "needed, or another protocol version")


async def _handler(peer: PeerInfo, msg: object) -> None:
    return None


async def _serve(nursery: trio.Nursery, swarm_key: bytes | None) -> tuple[Transport, str]:
    server = Transport(Identity.generate(), "127.0.0.1", 0, swarm_key=swarm_key,
                       read_timeout=30.0, connect_timeout=30.0)
    address = await nursery.start(server.serve, _handler)
    return server, address


async def _probe(address: str, data: bytes) -> bytes:
    """Send ``data``, half-close (a node waiting for more sees the end at once, no
    timeout), and return what came back before the node closed."""
    return await raw_exchange(address, data, close_write=True, timeout=PATIENT)


def _hello(swarm_key: bytes | None) -> bytes:
    hs = Handshake(Identity.generate(), initiator=True, listen_address="10.9.9.9:9",
                   swarm_key=swarm_key)
    return hs.start()[0]


def _other_version(payload: bytes) -> bytes:
    body = msgpack.unpackb(payload, raw=False)
    body["v"] = codec.PROTOCOL_VERSION + 1
    return bytes(msgpack.packb(body, use_bin_type=True))


def _other_protocol() -> bytes:
    hello = codec.decode(_hello(OTHER))
    assert isinstance(hello, NoiseHello)
    return codec.encode(dataclasses.replace(hello, protocol="Noise_IK_25519_AESGCM_SHA256"))


#: What a non-member may send first, and a word of what the keyed node logs for it.
PROBES: dict[str, tuple[bytes, str]] = {
    "wrong swarm key": (encode_frame(_hello(OTHER)), "wrong swarm key"),
    "no swarm key": (encode_frame(_hello(None)), "missing swarm key"),
    "other version, keyed": (encode_frame(_other_version(_hello(OTHER))),
                             "protocol version mismatch"),
    "other version, keyless": (encode_frame(_other_version(_hello(None))),
                               "protocol version mismatch"),
    "other handshake protocol": (encode_frame(_other_protocol()),
                                 "unsupported handshake protocol"),
    "wrong message type": (encode_frame(codec.encode(Ping(1))), "expected NoiseHello"),
    "junk frame": (encode_frame(b"\xc1junk"), "malformed handshake message"),
    "msgpack without a version": (encode_frame(msgpack.packb({"x": 1})),
                                  "protocol version mismatch"),
    "HTTP request": (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP request"),
}


async def test_a_keyed_node_answers_every_non_member_with_silence(
        nursery: trio.Nursery, caplog: pytest.LogCaptureFixture) -> None:
    server, address = await _serve(nursery, SWARM)
    answers: dict[str, bytes] = {}
    with caplog.at_level(logging.WARNING, logger="p2p.wire.transport"):
        for name, (probe, _) in PROBES.items():
            # half-closed: a node waiting for more sees the end at once, no timeout
            answers[name] = await _probe(address, probe)
        await wait_until(lambda: server.open_connections == 0)
    # the same answer whatever was sent: nothing at all (so no version, no key hint)
    assert answers == dict.fromkeys(PROBES, b""), answers
    # this node's operator still reads why each was refused (one line per source
    # and interval: the probes share a source, so look for any of them)
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "closing connection from 127.0.0.1:" in logged
    assert any(word in logged for _, word in PROBES.values())
    await server.aclose()


@pytest.mark.parametrize("name", list(PROBES))
async def test_the_keyed_node_logs_each_refusal_in_its_own_words(
        nursery: trio.Nursery, caplog: pytest.LogCaptureFixture, name: str) -> None:
    server, address = await _serve(nursery, SWARM)
    probe, word = PROBES[name]
    with caplog.at_level(logging.WARNING, logger="p2p.wire.transport"):
        assert await _probe(address, probe) == b""
        await wait_until(lambda: any(word in r.getMessage() for r in caplog.records))
    await server.aclose()


@pytest.mark.parametrize("client_key", [None, OTHER])
async def test_the_initiator_is_told_the_likely_causes_by_its_own_node(
        nursery: trio.Nursery, client_key: bytes | None) -> None:
    _, address = await _serve(nursery, SWARM)
    client = Transport(Identity.generate(), "127.0.0.1", 0, swarm_key=client_key,
                       connect_timeout=PATIENT)
    with pytest.raises(PeerUnreachable) as info:
        await client.request(address, Ping(1))
    assert CLOSED in info.value.reason
    assert "--swarm-key-file" in info.value.reason  # what to check
    # its own version, to compare with the other node's log
    assert f"this node speaks wire protocol version {codec.PROTOCOL_VERSION};" \
        in info.value.reason
    await client.aclose()


async def test_keyed_members_of_two_versions_can_compare_them_from_their_logs(
        nursery: trio.Nursery, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Same swarm key, another wire version: the listener closes without a word
    (no membership proven: the version is not told), and each operator reads
    the version of their own node; the listener's line names both."""
    server, address = await _serve(nursery, SWARM)
    ours, newer = codec.PROTOCOL_VERSION, codec.PROTOCOL_VERSION + 1
    with monkeypatch.context() as m:  # a member running the next release
        m.setattr(codec, "PROTOCOL_VERSION", newer)
        member = Handshake(Identity.generate(), initiator=True, listen_address="10.9.9.9:9",
                           swarm_key=SWARM)
        hello = member.start()[0]
    with caplog.at_level(logging.WARNING, logger="p2p.wire.transport"):
        assert await _probe(address, encode_frame(hello)) == b""
        mismatch = f"protocol version mismatch: peer speaks version {newer}, this node " \
                   f"speaks version {ours}"
        await wait_until(lambda: any(mismatch in r.getMessage() for r in caplog.records))
    with monkeypatch.context() as m:
        m.setattr(codec, "PROTOCOL_VERSION", newer)
        told = member.explain_close("connection closed by peer")
    assert CLOSED in told
    assert f"this node speaks wire protocol version {newer};" in told
    await server.aclose()


def _decode_all(data: bytes) -> list[object]:
    decoder = FrameDecoder()
    return [codec.decode(p) for p in decoder.feed(data)]


async def test_an_open_node_explains_a_refusal_in_clear(nursery: trio.Nursery) -> None:
    # No swarm key, no membership to prove: the refusal says what to fix.
    server, address = await _serve(nursery, None)
    answer = await _probe(address, encode_frame(_hello(SWARM)))
    (refusal,) = _decode_all(answer)
    assert isinstance(refusal, Error)
    assert "swarm key" in refusal.reason and "--swarm-key-file" in refusal.reason
    answer = await _probe(address, encode_frame(_other_version(_hello(None))))
    (refusal,) = _decode_all(answer)
    assert isinstance(refusal, Error)
    assert f"version {codec.PROTOCOL_VERSION}" in refusal.reason
    # and its identity stays out of a refusal: it is for completed handshakes
    assert server.identity.node_id not in answer
    await server.aclose()


@pytest.mark.parametrize("reply", [
    pytest.param(lambda: _other_version(_hello(None)), id="other version"),
    pytest.param(lambda: codec.encode(Ping(1)), id="wrong message type"),
    pytest.param(lambda: b"\xc1junk", id="junk"),
])
async def test_a_keyed_initiator_does_not_explain_itself_to_a_non_member(
        nursery: trio.Nursery, reply: object) -> None:
    """A listener without the key answers the keyed node's hello with something
    that does not authenticate: the node closes without a refusal in clear."""
    assert callable(reply)
    received = bytearray()
    done = trio.Event()

    async def fake_node(stream: trio.SocketStream) -> None:
        try:
            decoder = FrameDecoder()
            while not decoder.feed(await stream.receive_some(65536)):
                pass
            await stream.send_all(encode_frame(reply()))
            while chunk := await stream.receive_some(65536):
                received.extend(chunk)
        except trio.BrokenResourceError:
            pass
        finally:
            done.set()

    listeners = await nursery.start(functools.partial(trio.serve_tcp, fake_node, 0,
                                                        host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    client = Transport(Identity.generate(), "127.0.0.1", 0, swarm_key=SWARM,
                       connect_timeout=PATIENT)
    with pytest.raises(PeerUnreachable, match="handshake failed"):
        await client.request(f"127.0.0.1:{port}", Ping(1))
    await done.wait()
    assert bytes(received) == b""  # after its hello, not one byte more
    await client.aclose()


def test_protocol_names_are_what_the_probes_assume() -> None:
    hello = codec.decode(_hello(None))
    assert isinstance(hello, NoiseHello) and hello.protocol == PROTOCOL_PLAIN
    hello = codec.decode(_hello(SWARM))
    assert isinstance(hello, NoiseHello) and hello.protocol == PROTOCOL_KEYED
