"""The one codec for typed wire messages.

Every message type is a frozen dataclass registered under a wire type name; a
payload is one msgpack map ``{"v": PROTOCOL_VERSION, "t": name, <field>: ...}``,
each field encoded by its annotated type (scalars, unions, tuples, lists, sorted
frozensets, dicts, nested dataclasses, and 1-D numpy arrays of the gossip
encodings' dtypes as ``{"dtype", "n", "data"}``, decoded as read-only views;
converters in :mod:`p2p.wire.codec_fields`). Nothing is ever unpickled. Each
package exports ``(class, wire name)`` pairs (:data:`WireMessage`) for
:func:`register_messages`; :data:`p2p.wire.messages.MESSAGES` registers on
import. Decoding checks every value against its annotation; anything wrong,
too many containers included (:mod:`p2p.wire.container_limit`), is a
:class:`DecodeError` naming the message and the field.

Wire format: docs/design/transport.md ("Wire format", "Messages").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import msgpack

from p2p.wire.codec_fields import (
    _CLASS_CODECS,
    _SCATTER_ABOVE,
    CodecError,
    DecodeError,
    EncodeError,
    Message,
    RegistrationError,
    VersionMismatch,
    WireMessage,
    _class_codec,
    _collecting,
    _decode_fields,
    _encode_fields,
    _Invalid,
    _marker,
)
from p2p.wire.container_limit import unpackb_bounded
from p2p.wire.messages import MESSAGES as _PROTOCOL_MESSAGES
from p2p.wire.msgpack_views import unpack_with_views

__all__ = [
    "PROTOCOL_VERSION",
    "CodecError",
    "DecodeError",
    "EncodeError",
    "Message",
    "RegistrationError",
    "VersionMismatch",
    "WireMessage",
    "decode",
    "encode",
    "encode_parts",
    "is_registered",
    "register",
    "register_messages",
    "registered_types",
    "type_name",
]

logger = logging.getLogger(__name__)

# 2: pushes carry encoded vectors (issue 13): push-pull replies, delta requests
PROTOCOL_VERSION = 3



# ---------------------------------------------------------------------------
# Registry


_BY_NAME: dict[str, type] = {}
_BY_CLASS: dict[type, str] = {}


def register(cls: type, name: str) -> type:
    """Register frozen dataclass ``cls`` under wire type ``name``; returns ``cls``.

    Registering the same class under the same name again is a no-op; reusing a
    name or a class differently raises :class:`RegistrationError`. Field types
    are checked now, so an unsupported annotation fails at start-up.
    """
    if not isinstance(name, str) or not name:
        raise RegistrationError(f"wire type name must be a non-empty str, got {name!r}")
    if _BY_NAME.get(name) is cls and _BY_CLASS.get(cls) == name:
        return cls
    if name in _BY_NAME:
        raise RegistrationError(f"wire type {name!r} is already used by {_BY_NAME[name].__name__}")
    if cls in _BY_CLASS:
        raise RegistrationError(f"{cls.__name__} is already registered as {_BY_CLASS[cls]!r}")
    _class_codec(cls)
    _BY_NAME[name] = cls
    _BY_CLASS[cls] = name
    return cls


def is_registered(cls: type) -> bool:
    """True if ``cls`` is a registered message class."""
    return cls in _BY_CLASS


def type_name(cls: type) -> str:
    """Wire type name of registered class ``cls``."""
    try:
        return _BY_CLASS[cls]
    except KeyError:
        raise CodecError(f"{cls.__name__} is not a registered message type") from None


def registered_types() -> dict[str, type]:
    """A copy of the registry: wire name -> class."""
    return dict(_BY_NAME)


def encode(msg: Message) -> bytes:
    """Encode registered message ``msg`` to a msgpack payload (no framing)."""
    return msgpack.packb(_encode_body(msg), use_bin_type=True)


def encode_parts(msg: Message) -> list[bytes | memoryview]:
    """:func:`encode` as consecutive pieces whose concatenation is the payload.

    Large array data is not copied: its piece is a view of the array, so a
    vectored write (or one copy into a frame buffer) is the only pass over it.
    """
    large: list[memoryview] = []
    _collecting.large = large
    try:
        body = _encode_body(msg)
    finally:
        _collecting.large = None
    # Packed in one call, with a marker where each large array's data belongs.
    packed = msgpack.packb(body, use_bin_type=True)
    if not large:
        return [packed]
    parts: list[bytes | memoryview] = []
    pos = 0
    for index, data in enumerate(large):
        marker = _marker(index)
        at = packed.find(marker, pos)
        if at < 0 or packed.find(marker, at + 1) >= 0:
            # The marker's bytes also occur in the message's own bytes (a chance
            # of 2**-96): the slower walk cannot mistake one for the other.
            return _encode_parts_walking(msg)
        parts += (packed[pos:at] + b"\xc6" + data.nbytes.to_bytes(4, "big"), data)
        pos = at + len(marker)
    parts.append(packed[pos:])
    return parts



def _encode_parts_walking(msg: Message) -> list[bytes | memoryview]:
    parts: list[bytes | memoryview] = []
    small: list[bytes] = []
    _scatter(_encode_body(msg), msgpack.Packer(use_bin_type=True), parts, small)
    parts.append(b"".join(small))
    return parts


def _scatter(value: object, packer: msgpack.Packer, parts: list[bytes | memoryview],
             small: list[bytes]) -> None:
    # Only maps are walked (arrays sit in maps: fields, nested dataclasses); any
    # other value is packed whole, exactly as packb would.
    if type(value) is dict:
        small.append(packer.pack_map_header(len(value)))
        for key, item in value.items():
            small.append(packer.pack(key))
            _scatter(item, packer, parts, small)
    elif type(value) is memoryview and value.nbytes >= _SCATTER_ABOVE:
        small.append(b"\xc6" + value.nbytes.to_bytes(4, "big"))
        parts.append(b"".join(small))
        small.clear()
        parts.append(value)
    else:
        small.append(packer.pack(value))


def _immutable_view(payload: object) -> memoryview | None:
    """A byte view of ``payload`` when decoded values may keep referencing it."""
    if type(payload) is bytes:
        return memoryview(payload)
    if type(payload) is memoryview and payload.readonly and payload.c_contiguous:
        return payload.cast("B") if payload.format != "B" or payload.ndim != 1 else payload
    return None


def _encode_body(msg: Message) -> dict[str, object]:
    cls = type(msg)
    name = _BY_CLASS.get(cls)
    if name is None:
        raise EncodeError(f"{cls.__name__} is not a registered message type")
    codec = _CLASS_CODECS[cls]
    body = codec.fast_encode(msg)
    if body is None:
        large = _collecting.large
        if large is not None:  # arrays the fast path collected before it gave up
            large.clear()
        try:
            body = _encode_fields(codec, msg)
        except _Invalid as exc:
            raise EncodeError(f"cannot encode {name}: {exc.path}: {exc.reason}") from None
    body["v"] = PROTOCOL_VERSION
    body["t"] = name
    return body


def decode(payload: bytes | bytearray | memoryview) -> Message:
    """Decode one payload into its registered dataclass, validating every field.

    Array data of 64 KiB or more is not copied when the payload cannot change
    under the decoded message: ``bytes``, or a read-only memoryview (by passing
    one the caller promises that the bytes behind it stay as they are). The
    arrays then view the payload; any other buffer is copied from.
    """
    view = _immutable_view(payload)
    try:
        # Bounded: a payload of empty maps/arrays would otherwise cost ~70 bytes
        # of heap per byte before the type is even read (container_limit).
        if view is None:
            data = unpackb_bounded(
                payload,
                raw=False,
                use_list=True,
                strict_map_key=False,
                max_ext_len=0,
            )
        else:
            data = unpack_with_views(view, unpack=unpackb_bounded, raw=False, use_list=True,
                                     strict_map_key=False)
    except Exception as exc:
        raise DecodeError(f"malformed msgpack payload: {type(exc).__name__}: {exc}") from None
    if type(data) is not dict:
        raise DecodeError(f"payload is a {type(data).__name__}, expected a map")
    version = data.pop("v", None)
    name = data.pop("t", None)
    if version != PROTOCOL_VERSION or type(version) is not int:
        label = f" (type {name!r:.60})" if isinstance(name, str) else ""
        raise VersionMismatch(
            f"protocol version {version!r:.40}{label}, expected {PROTOCOL_VERSION}", version
        )
    if type(name) is not str:
        raise DecodeError(f"message type 't' must be a str, got {type(name).__name__}")
    cls = _BY_NAME.get(name)
    if cls is None:
        raise DecodeError(f"unknown message type {name!r:.60}")
    codec = _CLASS_CODECS[cls]
    msg = codec.fast_decode(data)
    if msg is not None:
        return msg
    try:
        return _decode_fields(codec, data)
    except _Invalid as exc:
        raise DecodeError(f"invalid {name} message: {exc.path}: {exc.reason}") from None


# ---------------------------------------------------------------------------
# Wire surfaces


def register_messages(messages: Iterable[WireMessage]) -> list[str]:
    """Register every ``(class, wire name)`` pair of a wire surface; returns the names.

    Idempotent like :func:`register`. A malformed entry raises
    :class:`RegistrationError` naming it.
    """
    names = []
    for entry in messages:
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], type)):
            raise RegistrationError(
                f"a wire surface entry must be a (class, wire name) pair, got {entry!r:.80}"
            )
        cls, name = entry
        register(cls, name)
        names.append(name)
    return names


register_messages(_PROTOCOL_MESSAGES)
