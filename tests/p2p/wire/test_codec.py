"""The typed-message codec: round-trips and strict validation."""

from __future__ import annotations

from dataclasses import dataclass

import msgpack
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gossip
import peersampling
from gossip.compression import ENCODINGS, EncodedVector, encode
from gossip.masking.epochs import PairAccept, PairOffer
from gossip.messages import Push, PushAck
from p2p.runtime.connectivity import DIALBACK_MESSAGES
from p2p.runtime.connectivity.punch import PUNCH_MESSAGES
from p2p.runtime.grouping.messages import GROUPING_MESSAGES
from p2p.runtime.protocol import node_messages, register_node_messages
from p2p.strategies.fedlinked.messages import FEDLINKED_MESSAGES
from p2p.strategies.graph.messages import GRAPH_MESSAGES
from p2p.wire import codec
from p2p.wire.circuit import CIRCUIT_MESSAGES
from p2p.wire.codec import DecodeError, EncodeError, RegistrationError, VersionMismatch
from p2p.wire.messages import MESSAGES, Error, HandshakePayload, NoiseHello, Ping, Pong
from peersampling.descriptor import Descriptor
from peersampling.messages import ShuffleReply, ShuffleRequest


@dataclass(frozen=True)
class Inner:
    name: str
    tag: bytes


@dataclass(frozen=True, eq=False)
class Sample:
    count: int
    ratio: float
    label: str
    blob: bytes
    flag: bool
    nothing: None
    maybe: int | None
    numbers: tuple[int, ...]
    pair: tuple[str, float]
    items: list[Inner]
    tags: frozenset[bytes]
    vector: np.ndarray
    small: npt.NDArray[np.float32]
    table: dict[str, int]


codec.register(Sample, "test_sample")


def _sample(**changes: object) -> Sample:
    fields = dict(
        count=-3,
        ratio=0.25,
        label="é",
        blob=b"\x00\xff",
        flag=True,
        nothing=None,
        maybe=None,
        numbers=(1, 2, 3),
        pair=("a", 1.5),
        items=[Inner("x", b"1"), Inner("y", b"")],
        tags=frozenset({b"b" * 32, b"a" * 32}),
        vector=np.linspace(0, 1, 7),
        small=np.arange(3, dtype=np.float32),
        table={"k": 1},
    )
    fields.update(changes)
    return Sample(**fields)  # type: ignore[arg-type]


def _same(a: Sample, b: Sample) -> bool:
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            if not (isinstance(y, np.ndarray) and x.dtype == y.dtype and np.array_equal(x, y)):
                return False
        elif x != y or type(x) is not type(y):
            return False
    return True


def _raw(**fields: object) -> bytes:
    return msgpack.packb({"v": codec.PROTOCOL_VERSION, **fields}, use_bin_type=True)


def _fields_of(msg: object) -> dict:
    data = msgpack.unpackb(codec.encode(msg), raw=False)
    del data["v"], data["t"]
    return data


def test_round_trip_all_supported_types() -> None:
    msg = _sample()
    out = codec.decode(codec.encode(msg))
    assert isinstance(out, Sample) and _same(msg, out)
    assert out.vector.dtype == np.float64 and out.small.dtype == np.float32
    assert not out.vector.flags.writeable  # a read-only view, like the frozen message


def test_encoding_is_deterministic_for_sets() -> None:
    a = _sample(tags=frozenset([b"a" * 32, b"b" * 32, b"c" * 32]))
    b = _sample(tags=frozenset([b"c" * 32, b"b" * 32, b"a" * 32]))
    assert codec.encode(a) == codec.encode(b)


@given(
    count=st.integers(min_value=-(2**63), max_value=2**64 - 1),
    ratio=st.floats(allow_nan=False),
    label=st.text(max_size=20),
    blob=st.binary(max_size=50),
    maybe=st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1),
    numbers=st.lists(st.integers(min_value=0, max_value=2**32), max_size=5).map(tuple),
    tags=st.frozensets(st.binary(min_size=32, max_size=32), max_size=4),
    vector=st.lists(st.floats(allow_nan=False, width=64), max_size=20),
)
def test_round_trip_property(
    count: int,
    ratio: float,
    label: str,
    blob: bytes,
    maybe: int | None,
    numbers: tuple[int, ...],
    tags: frozenset[bytes],
    vector: list[float],
) -> None:
    msg = _sample(
        count=count,
        ratio=ratio,
        label=label,
        blob=blob,
        maybe=maybe,
        numbers=numbers,
        tags=tags,
        vector=np.array(vector, dtype=np.float64),
    )
    assert _same(msg, codec.decode(codec.encode(msg)))


def test_nan_and_inf_survive_the_wire() -> None:
    v = np.array([np.nan, np.inf, -np.inf, -0.0])
    out = codec.decode(codec.encode(_sample(vector=v)))
    assert np.array_equal(out.vector, v, equal_nan=True) and np.signbit(out.vector[3])


def test_array_is_raw_little_endian_bytes() -> None:
    v = np.array([1.0, 2.0], dtype=">f8")  # big-endian input is converted
    data = _fields_of(_sample(vector=v))["vector"]
    assert data == {"dtype": "<f8", "n": 2, "data": np.array([1.0, 2.0], "<f8").tobytes()}


def test_p2p_messages_round_trip() -> None:
    hello = NoiseHello("Noise_XX_25519_ChaChaPoly_SHA256", b"e" * 32)
    payload = HandshakePayload(b"n" * 32, "127.0.0.1:1", frozenset({b"t" * 32}), "chacha20",
                               b"s" * 64)
    for msg in (hello, payload, Ping(7), Pong(7), Error("rejected", "no")):
        assert codec.decode(codec.encode(msg)) == msg


# --- encoded vectors (gossip.compression) -------------------------------------


@dataclass(frozen=True, eq=False)
class Carrier:
    vec: EncodedVector
    maybe: EncodedVector | None


codec.register(Carrier, "test_carrier")
_VEC_X = np.random.default_rng(0).normal(size=300)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_encoded_vectors_round_trip(encoding: str) -> None:
    for maybe in (None, encode(_VEC_X[:7], "int8")):
        msg = Carrier(encode(_VEC_X, encoding), maybe)
        out = codec.decode(codec.encode(msg))
        assert isinstance(out, Carrier) and out.vec == msg.vec and out.maybe == maybe
        assert out.vec.data.dtype == msg.vec.data.dtype and out.vec.scales.dtype == np.float32
        assert not out.vec.data.flags.writeable  # a read-only view of the received bytes
        # the payload is the raw encoded bytes plus a small fixed overhead
        vectors = 1 if maybe is None else 2
        overhead = len(codec.encode(msg)) - msg.vec.nbytes - (maybe.nbytes if maybe else 0)
        assert overhead < 100 * vectors + 30


def test_encoded_vector_wire_layout() -> None:
    fields = _fields_of(Carrier(encode(np.array([1.0, -2.0]), "bf16"), None))
    assert fields == {
        "vec": {"encoding": "bf16", "length": 2,
                "data": {"dtype": "<u2", "n": 2, "data": bytes.fromhex("803f00c0")},
                "scales": {"dtype": "<f4", "n": 0, "data": b""}},
        "maybe": None,
    }


_WIRE_DTYPES = {"<f8": 8, "<f4": 4, "<f2": 2, "<u2": 2, "|i1": 1}


@pytest.mark.parametrize(
    "dtype", [*_WIRE_DTYPES, "<i8", "<u4", "<i2", "|u1", "|b1", ">f8", ">f2", "<c8", "|O", "f8",
              "<i1", "<u1", "<f16", "<M8[s]"])
def test_encoded_vector_data_accepts_exactly_the_encodings_dtypes(dtype: str) -> None:
    fields = _fields_of(Carrier(encode(np.zeros(2), "f64"), None))
    fields["vec"]["data"] = {"dtype": dtype, "n": 2, "data": b"\x00" * 2 * _WIRE_DTYPES.get(dtype, 8)}
    payload = _raw(t="test_carrier", **fields)
    if dtype in _WIRE_DTYPES:
        out = codec.decode(payload)
        assert isinstance(out, Carrier) and out.vec.data.dtype == np.dtype(dtype)
    else:
        with pytest.raises(DecodeError, match=r"Carrier.vec.data: array dtype .* not allowed"):
            codec.decode(payload)


@pytest.mark.parametrize("dtype", ["<f8", "<f2", "<u2", "|i1", ">f4"])
def test_encoded_vector_scales_are_float32_only(dtype: str) -> None:
    fields = _fields_of(Carrier(encode(np.zeros(2), "int8"), None))
    fields["vec"]["scales"] = {"dtype": dtype, "n": 1, "data": b"\x00" * np.dtype(dtype).itemsize}
    with pytest.raises(DecodeError, match=r"Carrier.vec.scales: array dtype .* not allowed"):
        codec.decode(_raw(t="test_carrier", **fields))
    with pytest.raises(EncodeError, match=r"Carrier.vec.scales: .*float32"):
        codec.encode(Carrier(EncodedVector("int8", 2, np.zeros(2, np.int8),
                                           np.zeros(1, np.float64)), None))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"length": 2.0}, r"Carrier.vec.length: expected int, got float"),
        ({"encoding": b"f64"}, r"Carrier.vec.encoding: expected str, got bytes"),
        ({"data": {"dtype": "<f8", "n": 3, "data": b"\x00" * 16}},
         "Carrier.vec.data: array data has 16 bytes, expected 3 x 8"),
        ({"data": {"dtype": "<f8", "n": 2, "data": b"\x00" * 17}},
         "Carrier.vec.data: array data has 17 bytes, expected 2 x 8"),
        ({"data": [0.0, 0.0]}, r"Carrier.vec.data: expected an array map"),
        ({"scales": None}, r"Carrier.vec.scales: expected an array map"),
        ({"extra": 1}, r"Carrier.vec: unexpected fields \['extra'\]"),
    ],
)
def test_malformed_encoded_vectors_are_decode_errors(change: dict, expected: str) -> None:
    fields = _fields_of(Carrier(encode(np.zeros(2), "f64"), None))
    fields["vec"].update(change)
    with pytest.raises(DecodeError, match=r"invalid test_carrier message: " + expected):
        codec.decode(_raw(t="test_carrier", **fields))
    del fields["vec"]["encoding"]
    with pytest.raises(DecodeError, match=r"Carrier.vec: missing fields \['encoding'\]"):
        codec.decode(_raw(t="test_carrier", **fields))


def test_optional_encoded_vector_names_both_alternatives() -> None:
    fields = _fields_of(Carrier(encode(np.zeros(2), "f64"), None))
    fields["maybe"] = {"encoding": "f64"}
    with pytest.raises(DecodeError, match=r"Carrier.maybe: expected EncodedVector \| None; "
                                          r"missing fields .*; expected None, got dict"):
        codec.decode(_raw(t="test_carrier", **fields))


def test_encode_names_a_wrong_array_inside_an_encoded_vector() -> None:
    bad = EncodedVector("f64", 2, np.zeros(2, dtype=np.int64), np.zeros(0, np.float32))
    with pytest.raises(EncodeError, match=r"Carrier.vec.data: expected 1-D numpy array of "
                                          r"float64/float32/float16/uint16/int8, got dtype int64"):
        codec.encode(Carrier(bad, None))
    with pytest.raises(EncodeError, match=r"Carrier.vec: expected EncodedVector, got ndarray"):
        codec.encode(Carrier(np.zeros(2), None))  # type: ignore[arg-type]


# --- decode errors ----------------------------------------------------------


def test_malformed_msgpack() -> None:
    with pytest.raises(DecodeError, match="malformed msgpack"):
        codec.decode(b"\xc1")
    with pytest.raises(DecodeError, match="malformed msgpack"):
        codec.decode(codec.encode(Ping(1)) + b"\x00")  # trailing bytes


def test_payload_not_a_map() -> None:
    with pytest.raises(DecodeError, match="expected a map"):
        codec.decode(msgpack.packb([1, 2]))


def test_unknown_type() -> None:
    with pytest.raises(DecodeError, match="unknown message type 'nope'"):
        codec.decode(_raw(t="nope"))


def test_wrong_or_missing_version() -> None:
    newer = codec.PROTOCOL_VERSION + 1
    with pytest.raises(VersionMismatch, match=f"protocol version {newer}"):
        codec.decode(msgpack.packb({"v": newer, "t": "ping", "nonce": 1}))
    with pytest.raises(VersionMismatch, match="protocol version 1"):  # before encoded pushes
        codec.decode(msgpack.packb({"v": 1, "t": "ping", "nonce": 1}))
    with pytest.raises(VersionMismatch):
        codec.decode(msgpack.packb({"t": "ping", "nonce": 1}))
    with pytest.raises(VersionMismatch):  # True == 1 in Python, but not on our wire
        codec.decode(msgpack.packb({"v": True, "t": "ping", "nonce": 1}))


def test_extra_and_missing_fields() -> None:
    with pytest.raises(DecodeError, match=r"ping.*unexpected fields \['x'\]"):
        codec.decode(_raw(t="ping", nonce=1, x=2))
    with pytest.raises(DecodeError, match=r"error.*missing fields \['reason'\]"):
        codec.decode(_raw(t="error", code="x"))


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("count", True, "Sample.count: expected int, got bool"),
        ("count", 1.0, "Sample.count: expected int, got float"),
        ("ratio", 1, "Sample.ratio: expected float, got int"),
        ("label", b"x", "Sample.label: expected str, got bytes"),
        ("blob", "x", "Sample.blob: expected bytes, got str"),
        ("flag", 1, "Sample.flag: expected bool, got int"),
        ("nothing", 0, "Sample.nothing: expected None"),
        ("numbers", [1, "2"], r"Sample.numbers\[1\]: expected int, got str"),
        ("pair", ["a"], "Sample.pair: expected tuple"),
        ("items", [{"name": "x"}], r"Sample.items\[0\]: missing fields \['tag'\]"),
        ("items", [{"name": 1, "tag": b""}], r"Sample.items\[0\].name: expected str, got int"),
        ("tags", [b"a", b"a"], "contains duplicates"),
        ("table", {"k": "v"}, "expected int"),
    ],
)
def test_wrong_field_types_name_message_and_field(field: str, value: object, expected: str) -> None:
    data = _fields_of(_sample())
    data[field] = value
    with pytest.raises(DecodeError, match=r"invalid test_sample message: .*" + expected):
        codec.decode(_raw(t="test_sample", **data))


@pytest.mark.parametrize(
    ("array", "expected"),
    [
        ({"dtype": "<f8", "n": 3, "data": b"\x00" * 16}, "has 16 bytes, expected 3 x 8"),
        ({"dtype": "|O", "n": 1, "data": b"\x00" * 8}, "dtype '\\|O' not allowed"),
        ({"dtype": "<i8", "n": 1, "data": b"\x00" * 8}, "dtype '<i8' not allowed"),
        ({"dtype": "<f8", "n": -1, "data": b""}, "non-negative int"),
        ({"dtype": "<f8", "n": 0, "data": "text"}, "data must be bytes"),
        ({"dtype": "<f8", "n": 0}, "keys dtype, n, data"),
        (b"\x00" * 8, "keys dtype, n, data"),
    ],
)
def test_array_validation(array: object, expected: str) -> None:
    data = _fields_of(_sample())
    data["vector"] = array
    with pytest.raises(DecodeError, match=r"Sample\.vector: .*" + expected):
        codec.decode(_raw(t="test_sample", **data))


def test_typed_array_annotation_restricts_dtype() -> None:
    data = _fields_of(_sample())
    data["small"] = {"dtype": "<f8", "n": 1, "data": b"\x00" * 8}
    with pytest.raises(DecodeError, match="Sample.small"):
        codec.decode(_raw(t="test_sample", **data))


def test_ext_types_are_refused() -> None:
    data = _fields_of(_sample())
    data["blob"] = msgpack.ExtType(1, b"x")
    with pytest.raises(DecodeError):
        codec.decode(_raw(t="test_sample", **data))


def test_post_init_validation_becomes_decode_error() -> None:
    with pytest.raises(DecodeError,
                       match="invalid handshake_payload message: .*node_id must be 32 bytes"):
        codec.decode(
            _raw(
                t="handshake_payload",
                node_id=b"x",
                listen_address="",
                tags=[],
                cipher="chacha20",
                signature=b"s" * 64,
            )
        )


# --- encode and registration errors -------------------------------------------


def test_encode_checks_values() -> None:
    with pytest.raises(EncodeError, match="Sample.count: expected int, got str"):
        codec.encode(_sample(count="3"))
    with pytest.raises(EncodeError, match="1-D"):
        codec.encode(_sample(vector=np.zeros((2, 2))))
    with pytest.raises(EncodeError, match="dtype int64"):
        codec.encode(_sample(vector=np.zeros(2, dtype=np.int64)))
    with pytest.raises(EncodeError, match="not a registered"):
        codec.encode(Inner("a", b""))


def test_int_for_float_is_widened_on_encode() -> None:
    out = codec.decode(codec.encode(_sample(ratio=2)))
    assert out.ratio == 2.0 and type(out.ratio) is float


def test_registration_rules() -> None:
    @dataclass
    class Mutable:
        x: int

    @dataclass(frozen=True)
    class Weird:
        x: set[int]

    @dataclass(frozen=True)
    class Reserved:
        t: int

    @dataclass(frozen=True)
    class Ints:
        x: npt.NDArray[np.int64]

    with pytest.raises(RegistrationError, match="frozen"):
        codec.register(Mutable, "m")
    with pytest.raises(RegistrationError, match="unsupported field type"):
        codec.register(Weird, "w")
    with pytest.raises(RegistrationError, match="reserved"):
        codec.register(Reserved, "r")
    with pytest.raises(RegistrationError, match="not allowed"):
        codec.register(Ints, "i")
    with pytest.raises(RegistrationError, match="already used"):
        codec.register(Inner, "ping")
    codec.register(Sample, "test_sample")  # same pair again: no-op
    with pytest.raises(RegistrationError, match="already registered"):
        codec.register(Sample, "other_name")


def test_node_messages_round_trip_push_and_shuffle() -> None:
    names = register_node_messages()
    assert {"push", "push_ack", "shuffle_request", "shuffle_reply", "noise_hello"} <= set(names)
    assert register_node_messages() == names  # idempotent
    push = Push(b"m" * 32, 5, encode(np.arange(10, dtype=np.float64), "f64"), 0.5, masked=True)
    assert codec.decode(codec.encode(push)) == push
    assert codec.decode(codec.encode(PushAck(b"m" * 32, 5))) == PushAck(b"m" * 32, 5)
    reply = encode(np.linspace(-1, 1, 10), "int8")
    ack = PushAck(b"m" * 32, 5, reply, 0.25)
    assert codec.decode(codec.encode(ack)) == ack != PushAck(b"m" * 32, 5)
    d = Descriptor(b"n" * 32, "10.0.0.1:4000", 3, frozenset({b"t" * 32}))
    for msg in (ShuffleRequest(d, (d,), b"v" * 32), ShuffleReply((d, d), None)):
        assert codec.decode(codec.encode(msg)) == msg


def test_each_package_brings_its_wire_surface() -> None:
    assert gossip.WIRE_MESSAGES == ((Push, "push"), (PushAck, "push_ack"),
                                    (PairOffer, "pair_offer"), (PairAccept, "pair_accept"))
    assert peersampling.WIRE_MESSAGES == (
        (ShuffleRequest, "shuffle_request"), (ShuffleReply, "shuffle_reply"))
    # plus the runtime's own surface: automatic grouping's record exchange (issue 16),
    # the strategies' pulls (issue 18), which their plug-ins declare, dial-backs and relay
    # circuits and hole punching (issue 34)
    assert set(node_messages()) == {*MESSAGES, *gossip.WIRE_MESSAGES, *peersampling.WIRE_MESSAGES,
                                    *GROUPING_MESSAGES, *FEDLINKED_MESSAGES, *GRAPH_MESSAGES,
                                    *DIALBACK_MESSAGES, *CIRCUIT_MESSAGES, *PUNCH_MESSAGES}
    # the wire's own messages need no registration: the handshake relies on them
    assert all(codec.is_registered(cls) for cls, _ in MESSAGES)


# Payloads as the codec writes them: the format on the wire must not change by
# accident. (Issue 13 changed it on purpose: pushes carry an EncodedVector and
# may ask for a reply; acks may carry one. Issue 11's Noise handshake bumped the
# protocol version, "v", from 2 to 3.)
_GOLDEN = {
    "push": "8ca56d6f64656cc4046d6d6d6da7707573685f696401a676616c75657384a8656e636f64696e67a3"
            "663634a66c656e67746802a46461746183a56474797065a33c6638a16e02a464617461c410000000"
            "000000f03f00000000000000c0a67363616c657383a56474797065a33c6634a16e00a464617461c4"
            "00a6776569676874cb3fe0000000000000a66d61736b6564c2a56e6f697379c2a96e6f6973655f61"
            "676500aa77616e745f7265706c79c2a46261736500ae626173655f62795f73656e646572c2a17603"
            "a174a470757368",
    "push_int8": "8ca56d6f64656cc4046d6d6d6da7707573685f696401a676616c75657384a8656e636f64696e"
                 "67a4696e7438a66c656e67746802a46461746183a56474797065a37c6931a16e02a464617461"
                 "c4023f81a67363616c657383a56474797065a33c6634a16e01a464617461c4040502813ca677"
                 "6569676874cb3fe0000000000000a66d61736b6564c2a56e6f697379c2a96e6f6973655f6167"
                 "6500aa77616e745f7265706c79c3a46261736500ae626173655f62795f73656e646572c2a176"
                 "03a174a470757368",
    "push_ack": "86a56d6f64656cc4046d6d6d6da7707573685f696405a57265706c79c0ac7265706c795f776569"
                "676874cb0000000000000000a17603a174a8707573685f61636b",
    "push_ack_reply": "86a56d6f64656cc4046d6d6d6da7707573685f696405a57265706c7984a8656e636f6469"
                      "6e67a462663136a66c656e67746802a46461746183a56474797065a33c7532a16e02a464"
                      "617461c404003f80bea67363616c657383a56474797065a33c6634a16e00a464617461c4"
                      "00ac7265706c795f776569676874cb3fd0000000000000a17603a174a8707573685f6163"
                      "6b",
    # Issue 11 (same protocol version 3): descriptors carry a signed epoch and
    # their signature (peersampling/signed.py); issue 34: and their alternate
    # addresses (a second relay, a LAN address tried last).
    "shuffle_request": "85a673656e64657287a76e6f64655f6964c4046e6e6e6ea761646472657373a3683a31a3"
                       "61676502a47461677392c40161c40162a565706f636800a97369676e6174757265c400aa"
                       "616c7465726e6174657390a7656e747269657390a476696577c40176a17603a174af7368"
                       "7566666c655f72657175657374",
}


def test_wire_format_of_subsystem_messages_is_unchanged() -> None:
    register_node_messages()
    two = np.array([1.0, -2.0])
    samples = {
        "push": Push(b"m" * 4, 1, encode(two, "f64"), 0.5),
        "push_int8": Push(b"m" * 4, 1, encode(two, "int8"), 0.5, want_reply=True),
        "push_ack": PushAck(b"m" * 4, 5),
        "push_ack_reply": PushAck(b"m" * 4, 5, encode(np.array([0.5, -0.25]), "bf16"), 0.25),
        "shuffle_request": ShuffleRequest(
            Descriptor(b"n" * 4, "h:1", 2, frozenset({b"b", b"a"})), (), b"v"),
    }
    for name, msg in samples.items():
        assert codec.encode(msg).hex() == _GOLDEN[name], name
        assert codec.decode(bytes.fromhex(_GOLDEN[name])) == msg


def test_register_messages_names_a_malformed_entry() -> None:
    register_node_messages()
    with pytest.raises(RegistrationError, match="pair"):
        codec.register_messages([(Inner,)])  # type: ignore[list-item]
    with pytest.raises(RegistrationError, match="pair"):
        codec.register_messages([("push", Push)])  # type: ignore[list-item]
    with pytest.raises(RegistrationError, match="already used"):
        codec.register_messages([(Inner, "push")])
    assert codec.register_messages([]) == []


_msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=16),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


_VALID_FIELDS = _fields_of(_sample())


@settings(max_examples=150, deadline=None)
@given(
    t=st.sampled_from(["test_sample", "test_carrier", "hello", "ping", "error", "push",
                       "push_ack", "shuffle_request"]),
    fields=st.dictionaries(
        st.sampled_from(["count", "tags", "vector", "items", "nonce", "x"]) | st.text(max_size=6),
        _msgpack_values,
        max_size=6,
    ),
    junk=st.binary(max_size=40),
)
def test_decode_only_ever_raises_decode_error(t: str, fields: dict, junk: bytes) -> None:
    fields = {k: v for k, v in fields.items() if k not in ("v", "t")}
    # a valid message with some fields replaced, random maps, and raw junk
    mutated = {**_VALID_FIELDS, **{k: v for k, v in fields.items() if k in _VALID_FIELDS}}
    for payload in (_raw(t="test_sample", **mutated), _raw(t=t, **fields), junk):
        try:
            codec.decode(payload)
        except DecodeError:
            pass
