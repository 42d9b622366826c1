"""Property-based fuzzing of everything a peer's bytes reach before a model does.

Layers, outermost first: frame decoder, AEAD opener, handshake, message codec,
then the message validators (push-sum core, peer sampler). Each property states
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

from gossip import Push, PushSum, RejectedPush
from p2p.runtime.protocol import register_node_messages
from p2p.wire import codec
from p2p.wire.codec import DecodeError
from p2p.wire.framing import FrameDecoder, FramingError, encode_frame
from p2p.wire.handshake import Handshake, HandshakeError
from p2p.wire.identity import Identity
from p2p.wire.messages import Error, Hello, Ping
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
        Push(FP, 3, values, 0.5),
        Push(FP, 4, values, 0.25, True, True, 0),
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


def check_message_reaches_validators_safely(msg: object) -> None:
    """A decoded message handed to the node's validators: refused cleanly or applied sanely."""
    if isinstance(msg, Push):
        core = _fresh_core()
        before = _core_state(core)
        try:
            core.on_push(b"\x01" * 32, msg, 0.0)
        except RejectedPush:
            assert _core_state(core) == before  # refusal changes nothing
        else:
            assert np.all(np.isfinite(core.values))
            assert 0 < core.weight <= core.max_weight
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
           ["model", "push_id", "values", "weight", "masked", "noisy", "noise_age", "sender",
            "entries", "view", "nonce", "v", "t"]), msgpack_values, max_size=4),
       drop=st.lists(st.text(max_size=10), max_size=2))
def prop_wrong_fields(index: int, changes: dict[str, Any], drop: list[str]) -> None:
    """Valid messages with fields replaced by any msgpack value, removed or added."""
    fields = dict(VALID_FIELDS[index])
    fields.update(changes)
    for key in drop:
        fields.pop(key, None)
    check_decode(msgpack.packb(fields, use_bin_type=True))


@given(values=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64),
                       min_size=0, max_size=2 * LENGTH),
       weight=st.floats(allow_nan=True, allow_infinity=True) | st.integers(-5, 5),
       dtype=st.sampled_from(["<f8", "<f4", ">f8", "<i8", "|u1", "f8", "<c16"]),
       model=st.sampled_from([FP, bytes(32), FP[:31], b""]),
       push_id=st.integers(-2**63, 2**64 - 1),
       flags=st.tuples(st.booleans(), st.booleans(), st.integers(-3, 2**40)))
def prop_push_vectors(values: list[float], weight: float, dtype: str, model: bytes,
                      push_id: int, flags: tuple[bool, bool, int]) -> None:
    """NaN/inf vectors, wrong lengths, dtypes, fingerprints and weights never get merged."""
    arr = np.array(values, dtype=np.float64)
    with np.errstate(all="ignore"):  # casting NaN/inf to ints is the point here
        data = arr.astype(np.dtype(dtype)).tobytes() if dtype[-2:] != "16" else arr.tobytes()
    raw = {"v": codec.PROTOCOL_VERSION, "t": "push", "model": model, "push_id": push_id,
           "values": {"dtype": dtype, "n": len(values), "data": data}, "weight": weight,
           "masked": flags[0], "noisy": flags[1], "noise_age": flags[2]}
    check_decode(msgpack.packb(raw, use_bin_type=True))
    # the core itself, fed directly (no codec in front)
    core = _fresh_core()
    before = _core_state(core)
    push = Push(model, push_id, arr, weight, flags[0], flags[1], flags[2])  # type: ignore[arg-type]
    try:
        core.on_push(b"\x02" * 32, push, 0.0)
    except RejectedPush:
        assert _core_state(core) == before
    else:
        assert len(values) == LENGTH and np.all(np.isfinite(arr)) and model == FP
        assert np.all(np.isfinite(core.values))


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
           ["version", "node_id", "listen_address", "tags", "nonce", "cipher", "swarm_proof",
            "x"]), msgpack_values, max_size=3),
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
              prop_sealed_frames, prop_handshake]


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
    assert Hello in codec.registered_types().values()
