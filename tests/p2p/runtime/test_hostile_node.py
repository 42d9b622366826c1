"""A hostile client against a running node on loopback TCP.

Each offence goes to a real :class:`p2p.runtime.node.Node` (TCP transport, admin
socket, trainer finished so its model only changes through merges). For every
offence the node must: keep running, merge nothing (weight and values exactly
unchanged), log exactly one WARNING line naming the problem, and keep
answering its admin socket and well-behaved peers.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import msgpack
import numpy as np
import pytest
import trio

from gossip import INT8_BLOCK, PushAck, encode
from p2p.config import LimitsConfig
from p2p.runtime.node import Node
from p2p.testing import (
    admin_request,
    ask,
    encoded_vector_fields,
    fast_spec,
    open_session,
    push_payload,
    raw_exchange,
    tcp_node,
    valid_push,
    wait_until,
    write_swarm_key,
)
from p2p.wire import codec
from p2p.wire.framing import encode_frame
from p2p.wire.messages import Error, Ping, Pong
from p2p.wire.transport import HANDSHAKE_MAX_FRAME_SIZE, ConnectionFailure, parse_address
from peersampling import Descriptor, ShuffleReply, ShuffleRequest

SWARM_KEY = b"s" * 32
LIMITS = LimitsConfig(max_connections=8, max_frame_size=1 << 20, max_messages_per_second=1000.0,
                      connect_timeout=1.0, read_timeout=1.0)
WATCHED = ("p2p", "gossip", "peersampling")


@dataclass
class Running:
    node: Node
    address: str
    model: bytes
    length: int

    def state(self) -> tuple[float, bytes]:
        core = self.node.cores["global"]
        return core.weight, core.values.tobytes()

    def counters(self) -> dict[str, int]:
        return self.node.model_counters("global")

    def estimate(self) -> np.ndarray:
        """The model's estimate: a push near it passes the merge guard."""
        return self.node.cores["global"].estimate


async def _start(tmp_path: Path, nursery: trio.Nursery, **kwargs: object) -> Running:
    node = tcp_node(tmp_path / "victim", fast_spec(), limits=LIMITS, **kwargs)  # type: ignore[arg-type]
    address = await nursery.start(node.run)
    await wait_until(lambda: node.progress.finished)
    core = node.cores["global"]
    return Running(node, address, core.fingerprint, core.values.size)


@pytest.fixture
async def victim(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[Running]:
    running = await _start(tmp_path, nursery)
    yield running
    running.node.request_stop()


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records
            if r.levelno >= logging.WARNING and r.name.startswith(WATCHED)]


async def still_healthy(v: Running) -> None:
    """Admin socket answers, a well-behaved peer gets its push merged, no leaked connection."""
    status = await admin_request(v.node.data_dir, "status")
    assert status["round"] == v.node.progress.round
    before = v.counters()["pushes_received"]
    ms, _ = await open_session(v.address)
    reply = await ask(ms, codec.encode(valid_push(v.model, v.length, push_id=77, near=v.estimate())))
    assert isinstance(reply, PushAck) and reply.push_id == 77
    await ms.aclose()
    assert v.counters()["pushes_received"] == before + 1
    await wait_until(lambda: v.node.transport.open_connections == 0)


# --------------------------------------------------------------------------- before the handshake

PRE_HANDSHAKE = {
    "random bytes": (bytes(np.random.default_rng(1).integers(0, 256, 3000, dtype=np.uint8)),
                     "handshake failed"),
    "huge length prefix": (b"\xff\xff\xff\xff" + b"x" * 100, "exceeds the maximum frame size"),
    "frame over the pre-handshake limit": (
        struct.pack(">I", HANDSHAKE_MAX_FRAME_SIZE + 1) + b"x" * 1000,
        f"maximum frame size of {HANDSHAKE_MAX_FRAME_SIZE} bytes"),
    "truncated frame": (struct.pack(">I", 500) + b"x" * 20, "in the middle of a frame"),
    "bad msgpack": (encode_frame(b"\xc1\xc1\xc1"), "malformed msgpack"),
    "request before handshake": (encode_frame(codec.encode(Ping(5))), "handshake failed"),
    "wrong protocol version": (
        encode_frame(msgpack.packb({"v": 99, "t": "hello"})), "protocol version"),
}


@pytest.mark.parametrize("offence", list(PRE_HANDSHAKE))
async def test_garbage_before_the_handshake(victim: Running, offence: str,
                                            caplog: pytest.LogCaptureFixture) -> None:
    data, reason = PRE_HANDSHAKE[offence]
    state = victim.state()
    with caplog.at_level(logging.WARNING):
        await raw_exchange(victim.address, data, close_write=offence == "truncated frame")
        await wait_until(lambda: warnings(caplog))
        # the node logs once per closed connection: once it is closed, every
        # line it will write about this one has been written
        await wait_until(lambda: victim.node.transport.open_connections == 0)
    lines = warnings(caplog)
    assert len(lines) == 1, lines
    assert "closing connection from 127.0.0.1:" in lines[0] and reason in lines[0], lines
    assert victim.state() == state
    await still_healthy(victim)


async def test_silent_connection_is_closed_after_connect_timeout(
        victim: Running, caplog: pytest.LogCaptureFixture) -> None:
    stream = await trio.open_tcp_stream(*parse_address(victim.address))
    with caplog.at_level(logging.WARNING), trio.fail_after(60):  # a hang guard
        assert await stream.receive_some(100) == b""  # the node hung up: slowloris bounded
    await stream.aclose()
    lines = warnings(caplog)
    assert len(lines) == 1 and "timed out" in lines[0], lines
    await still_healthy(victim)


# --------------------------------------------------------------------------- invalid pushes


def _bad_push(v: Running, kind: str) -> bytes:
    good = np.random.default_rng(2).normal(size=v.length)
    values: np.ndarray | dict[str, object] = good.copy()
    encoding, scales = "f64", None
    if kind == "nan":
        values[3] = np.nan
    elif kind == "inf":
        values[-1] = np.inf
    elif kind == "-inf":
        values[0] = -np.inf
    elif kind == "huge values":  # finite, but beyond float32: would crash the trainer
        values[5] = 1e300
    model = v.model
    weight = 0.25
    if kind == "wrong fingerprint":
        model = bytes(32)
    elif kind == "short vector":
        values = good[:-1]
    elif kind == "long vector":
        values = np.concatenate([good, good[:5]])
    elif kind == "data shorter than its length":
        values = encoded_vector_fields(good[:-1], "f64", length=v.length)
    elif kind == "float32 data declared f64":
        values = good.astype(np.float32)
    elif kind == "unknown encoding":
        encoding = "f8"
    elif kind == "bf16 infinity":
        values, encoding = np.full(v.length, 0x7F80, dtype="<u2"), "bf16"
    elif kind == "f16 nan":
        values, encoding = np.full(v.length, np.nan, dtype="<f2"), "f16"
    elif kind == "scales on a float vector":
        encoding, scales = "f64", np.ones(1, dtype=np.float32)
    elif kind.startswith("int8 "):
        values, encoding = np.ones(v.length, dtype=np.int8), "int8"
        blocks = -(-v.length // INT8_BLOCK)
        scales = np.full(blocks, 0.5, dtype=np.float32)
        if kind == "int8 negative scale":
            scales[-1] = -0.5
        elif kind == "int8 nan scale":
            scales[0] = np.nan
        elif kind == "int8 missing scale":
            scales = scales[:-1]
    elif kind.startswith("weight "):
        weight = float(kind.split()[1])
    push_id = -4 if kind == "negative push_id" else 9
    return push_payload(model, values, weight, push_id=push_id, encoding=encoding, scales=scales)


BAD_PUSHES = {
    "nan": "is not finite", "inf": "is not finite", "-inf": "is not finite",
    "huge values": "exceeds the bound",
    "wrong fingerprint": "does not hold",
    "short vector": "declares length", "long vector": "declares length",
    "data shorter than its length": "f64 data has",
    "float32 data declared f64": "must have dtype <f8, got <f4",
    "unknown encoding": "unknown encoding 'f8'",
    "bf16 infinity": "bf16 value inf at index 0 is not finite",
    "f16 nan": "f16 value nan at index 0 is not finite",
    "scales on a float vector": "f64 scales has 1 items, expected 0",
    "int8 negative scale": "is negative",
    "int8 nan scale": "of block 0 is not finite",
    "int8 missing scale": "int8 scales has",
    "weight 0": "weight", "weight -1": "weight", "weight inf": "weight",
    "weight nan": "weight", "weight 1e300": "weight",
    "negative push_id": "push_id",
}


@pytest.mark.parametrize("kind", list(BAD_PUSHES))
async def test_invalid_push_is_refused_and_never_merged(
        victim: Running, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    state, counters = victim.state(), victim.counters()
    ms, _ = await open_session(victim.address)
    with caplog.at_level(logging.WARNING):
        reply = await ask(ms, _bad_push(victim, kind))
    assert isinstance(reply, Error) and reply.code == "rejected"
    assert BAD_PUSHES[kind] in reply.reason
    lines = warnings(caplog)
    assert len(lines) == 1 and BAD_PUSHES[kind] in lines[0], lines
    assert victim.state() == state
    assert victim.counters()["pushes_received"] == counters["pushes_received"]
    # an application-level refusal keeps the connection: a valid push on it is merged
    assert isinstance(await ask(ms, codec.encode(valid_push(victim.model, victim.length, near=victim.estimate()))),
                      PushAck)
    assert victim.counters()["pushes_received"] == counters["pushes_received"] + 1
    await ms.aclose()
    await still_healthy(victim)


# --------------------------------------------------------------------------- wrong types / fields


def _descriptor(port: int) -> Descriptor:
    return Descriptor(bytes([port % 256]) * 32, f"127.0.0.1:{port}", 0, frozenset())


def _raw(t: str, **fields: object) -> bytes:
    return msgpack.packb({"v": codec.PROTOCOL_VERSION, "t": t, **fields}, use_bin_type=True)


WRONG = {
    # valid frames of types that are not requests: an Error reply, connection kept
    "pong as request": (lambda v: codec.encode(Pong(1)), "reply:bad_request"),
    "error as request": (lambda v: codec.encode(Error("x", "y")), "reply:bad_request"),
    "ack as request": (lambda v: codec.encode(PushAck(v.model, 3)), "reply:bad_request"),
    "shuffle reply as request": (lambda v: codec.encode(ShuffleReply((), None)),
                                 "reply:bad_request"),
    # malformed messages: the connection is closed
    "unknown type": (lambda v: _raw("reboot"), "close:unknown message type"),
    "extra field": (lambda v: push_payload(v.model, np.zeros(v.length), 0.1, admin=True),
                    "close:invalid push message"),
    "missing field": (lambda v: _raw("push", model=v.model, push_id=1),
                      "close:invalid push message"),
    "wrong field type": (lambda v: push_payload(v.model, np.zeros(v.length), "0.5"),
                         "close:invalid push message"),
    "array length lies": (
        lambda v: push_payload(v.model, {**encoded_vector_fields(np.zeros(v.length)), "data": {
            "dtype": "<f8", "n": v.length, "data": b"\0" * 8}}, 0.1),
        "close:array data"),
    "array dtype off the list": (
        lambda v: push_payload(v.model, np.zeros(v.length, dtype=np.int64), 0.1),
        "close:not allowed"),
    "values not an encoded vector": (
        lambda v: _raw("push", model=v.model, push_id=1, values=[1.0], weight=0.1, masked=False,
                       noisy=False, noise_age=0, want_reply=False, base=0,
                       base_by_sender=False),
        "close:expected a map for EncodedVector"),
    "not a map": (lambda v: msgpack.packb([1, 2, 3]), "close:expected a map"),
}


@pytest.mark.parametrize("offence", list(WRONG))
async def test_wrong_types_and_fields(victim: Running, offence: str,
                                      caplog: pytest.LogCaptureFixture) -> None:
    make, expected = WRONG[offence]
    outcome, text = expected.split(":", 1)
    state = victim.state()
    ms, _ = await open_session(victim.address)
    with caplog.at_level(logging.WARNING):
        if outcome == "reply":
            reply = await ask(ms, make(victim))
            assert isinstance(reply, Error) and reply.code == text
            assert isinstance(await ask(ms, codec.encode(Ping(8))), Pong)  # still open
        else:
            with pytest.raises(ConnectionFailure):
                await ask(ms, make(victim))
            await wait_until(lambda: warnings(caplog))
    await ms.aclose()
    lines = warnings(caplog)
    if outcome == "close":
        assert len(lines) == 1 and text in lines[0], lines
    else:
        assert len(lines) <= 1, lines  # the node's own "unexpected ..." line, if any
    assert victim.state() == state
    await still_healthy(victim)


async def test_shuffle_poisoning_is_dropped(victim: Running,
                                            caplog: pytest.LogCaptureFixture) -> None:
    sampler = victim.node.sampler
    ms, me = await open_session(victim.address)
    myself = Descriptor(me.node_id, "127.0.0.1:999", 0, frozenset())
    flood = tuple(_descriptor(1000 + i) for i in range(500))
    with caplog.at_level(logging.WARNING):
        reply = await ask(ms, codec.encode(ShuffleRequest(myself, flood, None)))
    assert isinstance(reply, ShuffleReply) and reply.entries == ()
    lines = warnings(caplog)
    assert len(lines) == 1 and "exceed the limit" in lines[0], lines
    assert sampler.view() == []
    # a shuffle claiming to come from another node is refused outright
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        reply = await ask(ms, codec.encode(ShuffleRequest(_descriptor(7), (), None)))
    assert isinstance(reply, Error) and reply.code == "bad_request"
    lines = warnings(caplog)
    assert len(lines) == 1 and "claims to come from" in lines[0], lines
    assert sampler.view() == []
    await ms.aclose()
    await still_healthy(victim)


# --------------------------------------------------------------------------- replays


async def test_replayed_push_is_acknowledged_but_merged_once(victim: Running) -> None:
    ms, me = await open_session(victim.address)
    payload = codec.encode(valid_push(victim.model, victim.length, weight=0.5, push_id=41,
                                      near=victim.estimate()))
    w0 = victim.node.cores["global"].weight
    assert isinstance(await ask(ms, payload), PushAck)
    after_first = victim.state()
    assert after_first[0] == pytest.approx(w0 + 0.5)
    for _ in range(3):
        assert isinstance(await ask(ms, payload), PushAck)  # a retransmission is re-acked
    assert victim.state() == after_first
    c = victim.counters()
    assert c["duplicates"] == 3
    # the same frame replayed over a new connection by the same identity: still not merged
    ms2, _ = await open_session(victim.address, identity=me)
    assert isinstance(await ask(ms2, payload), PushAck)
    assert victim.state() == after_first
    await ms.aclose()
    await ms2.aclose()


async def test_replayed_sealed_frame_closes_the_connection(
        tmp_path: Path, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture) -> None:
    key_file = write_swarm_key(tmp_path, SWARM_KEY)
    v = await _start(tmp_path, nursery, swarm_key_file=key_file)
    ms, _ = await open_session(v.address, swarm_key=SWARM_KEY)
    push = valid_push(v.model, v.length, weight=0.5, near=v.estimate())
    sealed = ms._sealer.seal(codec.encode(push))  # type: ignore[union-attr]
    frame = encode_frame(sealed)
    await ms.stream.send_all(frame)
    assert isinstance(codec.decode(await ms.receive_payload(5, 5)), PushAck)
    state = v.state()
    with caplog.at_level(logging.WARNING):
        await ms.stream.send_all(frame)  # byte-for-byte replay on the same connection
        with pytest.raises(ConnectionFailure):
            await ms.receive_payload(5, 5)
    lines = warnings(caplog)
    assert len(lines) == 1 and "decrypt failure" in lines[0], lines
    assert v.state() == state
    v.node.request_stop()


# --------------------------------------------------------------------------- floods


async def test_connection_flood_is_bounded_and_node_stays_responsive(
        victim: Running, caplog: pytest.LogCaptureFixture) -> None:
    limit = LIMITS.max_connections
    admission = victim.node.transport.admission  # type: ignore[attr-defined]
    streams = []
    with caplog.at_level(logging.WARNING):
        for _ in range(4 * limit):
            streams.append(await trio.open_tcp_stream(*parse_address(victim.address)))
        # max_connections = 8 leaves 2 handshake slots: most of the 32 are refused at once
        await wait_until(lambda: sum(admission.refused.values()) >= 3 * limit)
        assert victim.node.transport.open_connections <= limit
        # during the flood the admin socket answers
        status = await admin_request(victim.node.data_dir, "status")
        assert status["connections"] <= limit
    refused = [w for w in warnings(caplog) if "handshakes from 127.0.0.1 already in progress" in w]
    # one full line for the source; the rest are summed up after the log interval
    assert len(refused) == 1, warnings(caplog)
    assert len(warnings(caplog)) == 1, warnings(caplog)
    for s in streams:
        await s.aclose()
    await wait_until(lambda: victim.node.transport.open_connections == 0)
    await still_healthy(victim)


async def test_flood_of_invalid_pushes_keeps_memory_of_senders_bounded(victim: Running) -> None:
    # 4 identities x 80 pushes with distinct ids: the duplicate filter keeps a
    # window of at most `span` bits per sender (senders capped at 4096 by the core)
    rng = np.random.default_rng(3)
    for _ in range(4):
        ms, _ = await open_session(victim.address)
        for push_id in range(80):
            push = valid_push(victim.model, victim.length, weight=1e-6, push_id=push_id)
            near = victim.estimate() + 1e-3 * rng.normal(size=victim.length)  # merge guard
            push = type(push)(push.model, push.push_id, encode(near, "f32"), 1e-6)
            assert isinstance(await ask(ms, codec.encode(push)), PushAck)
        await ms.aclose()
    seen = victim.node.cores["global"]._seen
    rows = seen.export()
    assert len(seen) == 4 and all(merged.bit_length() <= seen.span
                                  and replied.bit_length() <= seen.span
                                  for _, _, merged, replied in rows)
    assert all(bin(merged).count("1") == 80 for _, _, merged, _ in rows)
    await still_healthy(victim)
