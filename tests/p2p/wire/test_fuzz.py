"""Property-based fuzzing of everything a peer's bytes reach before a model does.

Layers, outermost first: frame decoder, AEAD opener, handshake, message codec,
then the message validators (push-sum core with its encoded vectors, peer
sampler). Each property states
what hostile input may cause: only the layer's own error class, never another
exception, never a state change on refusal, never more memory than one frame.

``make test`` runs each property with a few hundred cases; the slow run
(``pytest -m slow tests/test_fuzz_wire.py``) runs each with 10,000.
"""

from __future__ import annotations

import random
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gossip import (
    ENCODINGS,
    INT8_BLOCK,
    EncodedVector,
    InvalidValues,
    Push,
    PushAck,
    PushSum,
    RejectedAck,
    RejectedPush,
    RejectedReply,
    decode,
    encode,
)
from p2p.runtime.protocol import register_node_messages
from p2p.wire import codec
from p2p.wire.codec import DecodeError
from p2p.wire.framing import FrameDecoder, FramingError, encode_frame
from p2p.wire.handshake import Handshake, HandshakeError
from p2p.wire.identity import Identity
from p2p.wire.messages import Error, NoiseHello, Ping
from p2p.wire.sealing import Opener, Sealer, SealError
from peersampling import Descriptor, PeerSampler, ShuffleReply, ShuffleRequest

register_node_messages()

FAST = 100
SLOW = 10_000
MAX_FRAME = 4096
LENGTH = 16
FP = bytes(range(32))

_scalars = (st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1)
            | st.floats(allow_nan=True, allow_infinity=True) | st.binary(max_size=48)
            | st.text(max_size=12))
msgpack_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=6) | st.binary(
        max_size=4), inner, max_size=5),
    max_leaves=10,
)


def _descriptor(i: int, tags: frozenset[bytes] = frozenset()) -> Descriptor:
    return Descriptor(bytes([i]) * 32, f"127.0.0.1:{7000 + i}", i % 5, tags)


def _valid_messages() -> list[object]:
    values = np.linspace(-1, 1, LENGTH)
    return [
        Push(FP, 3, encode(values, "f64"), 0.5),
        Push(FP, 4, encode(values, "f32"), 0.25, True, True, 0),
        Push(FP, 5, encode(values, "f16"), 0.25, want_reply=True),
        Push(FP, 6, encode(values, "bf16"), 0.25, want_reply=True),
        Push(FP, 7, encode(values, "int8"), 0.25, want_reply=True),
        PushAck(FP, 8),
        PushAck(FP, 9, encode(values / 10, "int8"), 0.25),
        ShuffleRequest(_descriptor(1, frozenset({FP})), (_descriptor(2), _descriptor(3)), None),
        ShuffleRequest(_descriptor(4), (), FP),
        ShuffleReply((_descriptor(5),), None),
        Ping(7),
        Error("rejected", "no"),
    ]


VALID = [codec.encode(m) for m in _valid_messages()]
VALID_FIELDS = [msgpack.unpackb(p, raw=False) for p in VALID]


def _fresh_core() -> PushSum:
    return PushSum(FP, np.zeros(LENGTH), fanout=1)


def _fresh_sampler() -> PeerSampler:
    me = Descriptor(b"\xee" * 32, "127.0.0.1:6999", 0, frozenset({FP}))
    return PeerSampler(me, c=6, l=3, rng=random.Random(0))


def _core_state(core: PushSum) -> tuple[float, bytes]:
    return core.weight, core.values.tobytes()


PEER = b"\x03" * 32


def check_ack_reaches_the_core_safely(ack: PushAck) -> None:
    """An ack (reply included) for a push-pull request the core really sent."""
    core = _fresh_core()
    ((peer, push),) = core.make_pushes([PEER], 0.0)
    assert push.want_reply
    answer = PushAck(ack.model, push.push_id, ack.reply, ack.reply_weight)
    before = _core_state(core)
    try:
        core.on_ack(peer, answer, 0.0)
    except RejectedReply:
        pass  # the ack was applied, the reply dropped: a plain ack's outcome
    except RejectedAck:
        assert _core_state(core) == before  # refusal changes nothing
    assert np.all(np.isfinite(core.values))
    assert 0 < core.weight <= core.max_weight


def check_message_reaches_validators_safely(msg: object) -> None:
    """A decoded message handed to the node's validators: refused cleanly or applied sanely."""
    if isinstance(msg, Push):
        core = _fresh_core()
        before = _core_state(core)
        try:
            ack = core.on_push(b"\x01" * 32, msg, 0.0)
        except RejectedPush:
            assert _core_state(core) == before  # refusal changes nothing
        else:
            assert np.all(np.isfinite(core.values))
            assert 0 < core.weight <= core.max_weight
            assert isinstance(ack, PushAck) and ack.push_id == msg.push_id
    elif isinstance(msg, PushAck):
        check_ack_reaches_the_core_safely(msg)
    elif isinstance(msg, ShuffleRequest):
        sampler = _fresh_sampler()
        reply = sampler.on_request(msg, 0.0)
        assert isinstance(reply, ShuffleReply)
        assert len(sampler.view()) <= sampler.c
        assert len(reply.entries) <= max(sampler.l, 1)


def check_decode(payload: bytes) -> None:
    try:
        msg = codec.decode(payload)
    except DecodeError:
        return
    assert type(msg) in codec.registered_types().values()
    check_message_reaches_validators_safely(msg)


# --------------------------------------------------------------------------- properties


@given(data=st.binary(max_size=3 * MAX_FRAME), cuts=st.lists(st.integers(1, 600), max_size=30))
def prop_frame_decoder(data: bytes, cuts: list[int]) -> None:
    """Any byte stream, any chunking: whole frames or FramingError; memory <= one frame."""
    decoder = FrameDecoder(MAX_FRAME)
    frames: list[bytes] = []
    pos = 0
    chunks = []
    for cut in [*cuts, len(data)]:
        chunks.append(data[pos:pos + cut])
        pos += cut
    try:
        for chunk in chunks:
            frames += decoder.feed(chunk)
            assert decoder.buffered <= MAX_FRAME + 4
    except FramingError:
        return
    assert all(len(f) <= MAX_FRAME for f in frames)
    assert b"".join(encode_frame(f) for f in frames) == data[: len(data) - decoder.buffered]


@given(index=st.integers(0, len(VALID) - 1),
       flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1,
                      max_size=6),
       cut=st.none() | st.integers(0, 10**6), junk=st.binary(max_size=16))
def prop_mutated_payloads(index: int, flips: list[tuple[int, int]], cut: int | None,
                          junk: bytes) -> None:
    """Bit flips, truncation and appended junk on valid messages: DecodeError or safe."""
    payload = bytearray(VALID[index])
    for where, xor in flips:
        payload[where % len(payload)] ^= xor
    if cut is not None:
        del payload[cut % (len(payload) + 1):]
    check_decode(bytes(payload))
    check_decode(bytes(payload) + junk)


@given(index=st.integers(0, len(VALID) - 1),
       changes=st.dictionaries(st.text(max_size=10) | st.sampled_from(
           ["model", "push_id", "values", "weight", "masked", "noisy", "noise_age", "want_reply",
            "reply", "reply_weight", "sender", "entries", "view", "nonce", "v", "t"]),
           msgpack_values, max_size=4),
       drop=st.lists(st.text(max_size=10), max_size=2))
def prop_wrong_fields(index: int, changes: dict[str, Any], drop: list[str]) -> None:
    """Valid messages with fields replaced by any msgpack value, removed or added."""
    fields = dict(VALID_FIELDS[index])
    fields.update(changes)
    for key in drop:
        fields.pop(key, None)
    check_decode(msgpack.packb(fields, use_bin_type=True))


# Data dtypes: those the codec allows, and some it must refuse.
_WIRE_DTYPES = ["<f8", "<f4", "<f2", "<u2", "|i1"]
_OFF_LIST_DTYPES = [">f8", "<i8", "|u1", "f8", "<c16", "|b1"]


def _as_bytes(values: np.ndarray, dtype: str) -> bytes:
    if dtype in ("<c16", "f8"):
        return values.tobytes()
    with np.errstate(all="ignore"):  # casting NaN/inf to ints is the point here
        return values.astype(np.dtype(dtype)).tobytes()


_DTYPE_OF = {"f64": "<f8", "f32": "<f4", "f16": "<f2", "bf16": "<u2", "int8": "|i1"}


@st.composite
def encoded_vectors(draw: st.DrawFn) -> tuple[dict[str, Any], EncodedVector | None]:
    """A hostile encoded vector: its wire map and, if numpy can hold it, the object.

    Mostly well-formed with a few faults, so that the deep checks (non-finite
    values and scales, counts) are reached as well as the shallow ones.
    """
    faults = draw(st.sets(st.sampled_from(
        ["encoding", "length", "n", "dtype", "scale count", "scale dtype"]), max_size=2))
    encoding = draw(st.sampled_from(ENCODINGS))
    if "encoding" in faults:
        encoding = draw(st.sampled_from([*ENCODINGS, "f8", "", "int4"]))
    n = draw(st.integers(0, 2 * LENGTH)) if "n" in faults else LENGTH
    length = draw(st.sampled_from([n, LENGTH - 1, -1, 2**40])) if "length" in faults else n
    dtype = _DTYPE_OF.get(encoding, "<f8")
    if "dtype" in faults:
        dtype = draw(st.sampled_from(_WIRE_DTYPES + _OFF_LIST_DTYPES))
    finite = st.floats(-1e4, 1e4) | st.integers(-300, 300).map(float)
    anything = st.floats(allow_nan=True, allow_infinity=True, width=64)
    raw = np.array(draw(st.lists(finite | anything if draw(st.booleans()) else finite,
                                 min_size=n, max_size=n)), dtype=np.float64)
    if dtype == "<u2":  # bfloat16 bits: any pattern, NaN and infinity ones included
        raw = np.array(draw(st.lists(st.integers(0, 0xFFFF), min_size=n, max_size=n)),
                       dtype=np.float64)
    blocks = -(-n // INT8_BLOCK) if encoding == "int8" else 0
    if "scale count" in faults:
        blocks = draw(st.integers(0, 3))
    good_scale = st.floats(0, 1e6, width=32)
    scale = good_scale | st.floats(allow_nan=True, allow_infinity=True, width=32) \
        if draw(st.booleans()) else good_scale
    scales = np.array(draw(st.lists(scale, min_size=blocks, max_size=blocks)), dtype=np.float32)
    scale_dtype = draw(st.sampled_from(["<f8", "|i1", "<f2"])) if "scale dtype" in faults \
        else "<f4"
    data_bytes = _as_bytes(raw, dtype)
    scale_bytes = _as_bytes(scales, scale_dtype)
    item = np.dtype(dtype).itemsize if dtype != "f8" else 8
    wire = {
        "encoding": encoding, "length": length,
        "data": {"dtype": dtype, "n": len(data_bytes) // item, "data": data_bytes},
        "scales": {"dtype": scale_dtype, "n": len(scales), "data": scale_bytes},
    }
    vector = None
    if dtype in _WIRE_DTYPES and length >= 0:
        vector = EncodedVector(encoding, length, np.frombuffer(data_bytes, np.dtype(dtype)),
                               np.frombuffer(scale_bytes, np.dtype(scale_dtype)))
    return wire, vector


@given(vector=encoded_vectors(),
       weight=st.floats(allow_nan=True, allow_infinity=True) | st.integers(-5, 5),
       model=st.sampled_from([FP, bytes(32), FP[:31], b""]),
       push_id=st.integers(-2**63, 2**64 - 1),
       flags=st.tuples(st.booleans(), st.booleans(), st.integers(-3, 2**40), st.booleans()))
def prop_push_vectors(vector: tuple[dict[str, Any], EncodedVector | None], weight: float,
                      model: bytes, push_id: int, flags: tuple[bool, bool, int, bool]) -> None:
    """Malformed encoded vectors, NaN/inf, lengths, dtypes, scales, fingerprints, weights:
    refused (CodecError at the wire, InvalidValues/RejectedPush past it), never merged."""
    wire, encoded = vector
    raw = {"v": codec.PROTOCOL_VERSION, "t": "push", "model": model, "push_id": push_id,
           "values": wire, "weight": weight, "masked": flags[0], "noisy": flags[1],
           "noise_age": flags[2], "want_reply": flags[3]}
    check_decode(msgpack.packb(raw, use_bin_type=True))
    ack = {"v": codec.PROTOCOL_VERSION, "t": "push_ack", "model": model, "push_id": push_id,
           "reply": wire, "reply_weight": weight}
    check_decode(msgpack.packb(ack, use_bin_type=True))
    if encoded is None:
        return
    # decode itself, fed directly (no codec in front): InvalidValues or a finite copy
    try:
        out = decode(encoded, LENGTH)
    except InvalidValues:
        pass
    else:
        assert out.shape == (LENGTH,) and np.all(np.isfinite(out)) and out.flags.writeable
        assert encoded.encoding in ENCODINGS and encoded.length == LENGTH
    # the core itself, fed directly
    core = _fresh_core()
    before = _core_state(core)
    push = Push(model, push_id, encoded, weight, flags[0], flags[1], flags[2], flags[3])  # type: ignore[arg-type]
    try:
        core.on_push(b"\x02" * 32, push, 0.0)
    except RejectedPush:
        assert _core_state(core) == before
    else:
        assert encoded.length == LENGTH and model == FP
        assert np.all(np.isfinite(core.values))
    if isinstance(weight, float):
        check_ack_reaches_the_core_safely(PushAck(FP, 0, encoded, weight))


@given(index=st.sampled_from([i for i, p in enumerate(VALID_FIELDS) if p["t"] in
                              ("push", "push_ack") and p.get("values", p.get("reply"))]),
       where=st.sampled_from(["", "data", "scales"]),
       changes=st.dictionaries(st.sampled_from(["encoding", "length", "data", "scales", "dtype",
                                                "n", "x"]), msgpack_values, max_size=3),
       drop=st.lists(st.sampled_from(["encoding", "length", "data", "scales", "dtype", "n"]),
                     max_size=2))
def prop_encoded_vector_fields(index: int, where: str, changes: dict[str, Any],
                               drop: list[str]) -> None:
    """Fields inside a valid push's or reply's encoded vector replaced, removed or added."""
    fields = msgpack.unpackb(VALID[index], raw=False)
    key = "values" if fields["t"] == "push" else "reply"
    target = fields[key] if not where else fields[key][where]
    target.update(changes)
    for name in drop:
        target.pop(name, None)
    check_decode(msgpack.packb(fields, use_bin_type=True))


_SEALER_KEY = b"k" * 32
_SEALED = [Sealer(_SEALER_KEY).seal(p) for p in VALID[:3]]


@given(flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1,
                      max_size=4),
       cut=st.none() | st.integers(0, 10**6), replay=st.booleans(), junk=st.binary(max_size=64))
def prop_sealed_frames(flips: list[tuple[int, int]], cut: int | None, replay: bool,
                       junk: bytes) -> None:
    """Tampered, truncated, replayed or forged sealed frames fail authentication."""
    opener = Opener(_SEALER_KEY)
    assert opener.open(_SEALED[0]) == VALID[0]
    frame = bytearray(_SEALED[1])
    for where, xor in flips:
        frame[where % len(frame)] ^= xor
    if cut is not None:
        del frame[cut % len(frame):]
    candidates = [bytes(frame), junk]
    if replay:
        candidates.append(_SEALED[0])
    for candidate in candidates:
        fresh = Opener(_SEALER_KEY)
        fresh.open(_SEALED[0])
        with pytest.raises(SealError):
            fresh.open(candidate)


_ALICE = Identity.from_seed(b"a" * 32)
_BOB = Identity.from_seed(b"b" * 32)


@given(payloads=st.lists(st.binary(max_size=300) | st.sampled_from(VALID), min_size=1,
                         max_size=3),
       hello_changes=st.dictionaries(st.sampled_from(
           ["protocol", "noise", "x"]), msgpack_values, max_size=3),
       keyed=st.booleans())
def prop_handshake(payloads: list[bytes], hello_changes: dict[str, Any], keyed: bool) -> None:
    """A responder fed junk, other messages or mangled HELLOs raises only HandshakeError."""
    key = b"w" * 32 if keyed else None
    initiator = Handshake(_ALICE, initiator=True, listen_address="127.0.0.1:1", tags=frozenset(),
                          swarm_key=key)
    hello = msgpack.unpackb(initiator.start()[0], raw=False)
    hello.update(hello_changes)
    for first in [msgpack.packb(hello, use_bin_type=True), *payloads]:
        responder = Handshake(_BOB, initiator=False, listen_address="127.0.0.1:2",
                              tags=frozenset(), swarm_key=key)
        try:
            responder.start()
            responder.receive(first)
            for p in payloads:
                responder.receive(p)
        except HandshakeError:
            continue
        assert not responder.done  # nothing completes a handshake without a valid AUTH


PROPERTIES = [prop_frame_decoder, prop_mutated_payloads, prop_wrong_fields, prop_push_vectors,
              prop_encoded_vector_fields, prop_sealed_frames, prop_handshake]


def _run(prop: Any, examples: int) -> None:
    settings(max_examples=examples, deadline=None, database=None,
             suppress_health_check=list(HealthCheck))(prop)()


@pytest.mark.parametrize("prop", PROPERTIES, ids=lambda p: p.__name__)
def test_fuzz(prop: Any) -> None:
    _run(prop, FAST)


@pytest.mark.slow
@pytest.mark.parametrize("prop", PROPERTIES, ids=lambda p: p.__name__)
def test_fuzz_10k(prop: Any, request: pytest.FixtureRequest) -> None:
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("10,000 cases per property: run with -m slow")
    _run(prop, SLOW)


def test_hello_is_a_registered_type() -> None:
    # guards the handshake fuzzing: it mutates real HELLOs
    assert NoiseHello in codec.registered_types().values()
