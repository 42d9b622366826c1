"""Field codecs of :mod:`p2p.wire.codec`: one converter pair per annotated type.

Each registered class gets its fields' converters (checking what they are
given both ways) and two straight-line fast paths generated from its
annotations. The rules are described in :mod:`p2p.wire.codec`, which holds
the registry and the public functions; this module is its inner part.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
import types
import typing
from collections.abc import Callable, Collection
from typing import Any, ClassVar, Protocol

import msgpack
import numpy as np

from p2p.wire.msgpack_views import LARGE_BIN


class Message(Protocol):
    """A wire message: an instance of a frozen dataclass (registered to be sent or received)."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


#: One entry of a package's wire surface: a frozen dataclass and its wire type name.
WireMessage = tuple[type, str]
_RESERVED_KEYS = frozenset({"v", "t"})
# dtype name on the wire -> numpy dtype; little-endian only. The float formats and
# the integer carriers of gossip's compact encodings (bfloat16 bits, int8).
_ARRAY_DTYPES: dict[str, np.dtype] = {
    name: np.dtype(name) for name in ("<f8", "<f4", "<f2", "<u2", "|i1")
}
# Wire name of each allowed dtype in either byte order (the encoder's lookup).
_WIRE_NAMES: dict[np.dtype, str] = {
    **{dtype.newbyteorder("<"): name for name, dtype in _ARRAY_DTYPES.items()},
    **{dtype.newbyteorder(">"): name for name, dtype in _ARRAY_DTYPES.items()},
}
_ARRAY_KEYS = frozenset({"dtype", "n", "data"})
# Unexpected keys a DecodeError names (the rest are counted).
_EXTRA_KEYS_LISTED = 8


class CodecError(Exception):
    """Base class of codec errors."""


class RegistrationError(CodecError):
    """A class that cannot be registered as a wire message."""


class EncodeError(CodecError):
    """A message whose field values do not match its annotations."""


class DecodeError(CodecError):
    """A payload that is not a valid message."""


class VersionMismatch(DecodeError):
    """A payload written by another protocol version."""

    def __init__(self, message: str, remote_version: object) -> None:
        super().__init__(message)
        self.remote_version = remote_version


# ---------------------------------------------------------------------------
# Field type descriptions: compiled once per registered class.


class _Invalid(Exception):
    """Internal: a value that does not match its type; carries the path inside a field."""

    def __init__(self, reason: str, path: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.path = path

    def prefixed(self, part: str) -> _Invalid:
        return _Invalid(self.reason, part + self.path)


# A field's converters between its Python value and its msgpack value; both check
# what they are given, which may be anything (a caller's message, a peer's payload).
_Encoder = Callable[[object], object]
_Decoder = Callable[[object], object]
# Types a sequence field accepts (tuple/list, frozenset/set).
_Accepted = tuple[type[Collection[object]], ...]


@dataclasses.dataclass(frozen=True)
class _FieldCodec:
    describe: str
    encode: _Encoder
    decode: _Decoder


def _scalar(tp: type, describe: str) -> _FieldCodec:
    def check(value: object) -> object:
        # Exact type: subclasses (bool for int, str enums) are not silently accepted.
        if type(value) is not tp:
            raise _Invalid(f"expected {describe}, got {type(value).__name__}")
        return value

    return _FieldCodec(describe, check, check)


def _float_codec() -> _FieldCodec:
    def enc(value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float | np.floating):
            raise _Invalid(f"expected float, got {type(value).__name__}")
        return float(value)

    def dec(value: object) -> float:
        if type(value) is not float:
            raise _Invalid(f"expected float, got {type(value).__name__}")
        return value

    return _FieldCodec("float", enc, dec)


def _int_codec() -> _FieldCodec:
    def enc(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise _Invalid(f"expected int, got {type(value).__name__}")
        return int(value)

    def dec(value: object) -> int:
        if type(value) is not int:
            raise _Invalid(f"expected int, got {type(value).__name__}")
        return value

    return _FieldCodec("int", enc, dec)


def _bytes_codec() -> _FieldCodec:
    def enc(value: object) -> bytes:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise _Invalid(f"expected bytes, got {type(value).__name__}")
        return bytes(value)

    def dec(value: object) -> bytes:
        if type(value) is memoryview:  # a large value viewed in the payload (see decode)
            return bytes(value)
        if type(value) is not bytes:
            raise _Invalid(f"expected bytes, got {type(value).__name__}")
        return value

    return _FieldCodec("bytes", enc, dec)


def _none_codec() -> _FieldCodec:
    def check(value: object) -> None:
        if value is not None:
            raise _Invalid(f"expected None, got {type(value).__name__}")
        return None

    return _FieldCodec("None", check, check)


def _array_codec(dtypes: tuple[str, ...]) -> _FieldCodec:
    allowed = {name: _ARRAY_DTYPES[name] for name in dtypes}
    describe = "1-D numpy array of " + "/".join(str(d) for d in allowed.values())

    def enc(value: object) -> dict[str, object]:
        if not isinstance(value, np.ndarray):
            raise _Invalid(f"expected {describe}, got {type(value).__name__}")
        if value.ndim != 1:
            raise _Invalid(f"expected a 1-D array, got shape {value.shape}")
        name = _WIRE_NAMES.get(value.dtype)
        if name is None:
            wire = value.dtype.newbyteorder("<") if value.dtype.byteorder != "|" else value.dtype
            name = wire.str
        if name not in allowed:
            raise _Invalid(f"expected {describe}, got dtype {value.dtype}")
        # A byte view, not a copy: msgpack copies it once into the payload.
        data = np.ascontiguousarray(value, dtype=allowed[name]).data.cast("B")
        return {"dtype": name, "n": int(value.shape[0]), "data": _array_data(data)}

    def dec(value: object) -> np.ndarray:
        if type(value) is not dict or value.keys() != _ARRAY_KEYS:
            raise _Invalid(f"expected an array map with keys dtype, n, data for {describe}")
        name, n, data = value["dtype"], value["n"], value["data"]
        if type(name) is not str or name not in allowed:
            raise _Invalid(f"array dtype {name!r} not allowed (expected one of {sorted(allowed)})")
        if type(n) is not int or n < 0:
            raise _Invalid(f"array length must be a non-negative int, got {n!r}")
        # A memoryview: large data viewed in the payload, not copied (see decode).
        if type(data) is not bytes and type(data) is not memoryview:
            raise _Invalid(f"array data must be bytes, got {type(data).__name__}")
        dtype = allowed[name]
        if len(data) != n * dtype.itemsize:
            raise _Invalid(
                f"array data has {len(data)} bytes, expected {n} x {dtype.itemsize} = "
                f"{n * dtype.itemsize}"
            )
        # A read-only view of the received bytes (no copy), like the frozen message
        # holding it; converted only on a big-endian host.
        array = np.frombuffer(data, dtype=dtype)
        if not array.flags.aligned:
            # Viewed in a payload at an odd offset: numpy works more slowly (and
            # sums in another order) on misaligned arrays, so copy it aligned.
            array = np.frombuffer(bytes(data), dtype=dtype)
        return array if dtype.isnative else array.astype(dtype.newbyteorder("="))

    return _FieldCodec(describe, enc, dec)


def _sequence_codec(item: _FieldCodec, build: Callable[[list[object]], Collection[object]],
                    kind: str) -> _FieldCodec:
    describe = f"{kind}[{item.describe}, ...]" if kind == "tuple" else f"{kind}[{item.describe}]"
    accepted: _Accepted = (tuple, list) if kind in ("tuple", "list") else (frozenset, set)

    def enc(value: object) -> list[object]:
        if not isinstance(value, accepted):
            raise _Invalid(f"expected {describe}, got {type(value).__name__}")
        out: list[object] = []
        for i, element in enumerate(value):
            try:
                out.append(item.encode(element))
            except _Invalid as exc:
                raise exc.prefixed(f"[{i}]") from None
        if kind == "frozenset":
            try:
                out.sort()
            except TypeError as exc:
                raise _Invalid(f"frozenset items must be mutually orderable: {exc}") from None
        return out

    def dec(value: object) -> Collection[object]:
        if type(value) is not list:
            raise _Invalid(f"expected {describe}, got {type(value).__name__}")
        out: list[object] = []
        for i, element in enumerate(value):
            try:
                out.append(item.decode(element))
            except _Invalid as exc:
                raise exc.prefixed(f"[{i}]") from None
        result = build(out)
        if kind == "frozenset" and len(result) != len(out):
            raise _Invalid(f"{describe} contains duplicates")
        return result

    return _FieldCodec(describe, enc, dec)


def _fixed_tuple_codec(items: list[_FieldCodec]) -> _FieldCodec:
    describe = "tuple[" + ", ".join(i.describe for i in items) + "]"

    def run(value: object, accepted: _Accepted, encoding: bool) -> object:
        if not isinstance(value, accepted):
            raise _Invalid(f"expected {describe}, got {type(value).__name__}")
        if len(value) != len(items):
            raise _Invalid(f"expected {describe}, got {len(value)} items")
        out: list[object] = []
        for i, (codec, element) in enumerate(zip(items, value, strict=True)):
            try:
                out.append(codec.encode(element) if encoding else codec.decode(element))
            except _Invalid as exc:
                raise exc.prefixed(f"[{i}]") from None
        return out if encoding else tuple(out)

    return _FieldCodec(
        describe,
        lambda v: run(v, (tuple, list), True),
        lambda v: run(v, (list,), False),
    )


def _dict_codec(key: _FieldCodec, val: _FieldCodec) -> _FieldCodec:
    describe = f"dict[{key.describe}, {val.describe}]"

    def run(value: object, encoding: bool) -> dict[object, object]:
        if not isinstance(value, dict):
            raise _Invalid(f"expected {describe}, got {type(value).__name__}")
        out: dict[object, object] = {}
        for k, v in value.items():
            try:
                kk = key.encode(k) if encoding else key.decode(k)
            except _Invalid as exc:
                raise exc.prefixed(f"[key {k!r:.40}]") from None
            try:
                out[kk] = val.encode(v) if encoding else val.decode(v)
            except _Invalid as exc:
                raise exc.prefixed(f"[{k!r:.40}]") from None
        return out

    return _FieldCodec(describe, lambda v: run(v, True), lambda v: run(v, False))


def _union_codec(options: list[_FieldCodec]) -> _FieldCodec:
    describe = " | ".join(o.describe for o in options)
    # None matches only the None option: take it without trying the others
    # (an optional field is often None, and a failed try raises).
    none_allowed = any(o.describe == "None" for o in options)

    def run(value: object, encoding: bool) -> object:
        if value is None and none_allowed:
            return None
        reasons = []
        large = _collecting.large
        collected = 0 if large is None else len(large)
        for option in options:
            try:
                return option.encode(value) if encoding else option.decode(value)
            except _Invalid as exc:
                reasons.append(exc.path + ": " + exc.reason if exc.path else exc.reason)
                if large is not None:
                    del large[collected:]  # arrays of an option that did not fit
        raise _Invalid(f"expected {describe}; " + "; ".join(reasons))

    return _FieldCodec(describe, lambda v: run(v, True), lambda v: run(v, False))


@dataclasses.dataclass(frozen=True)
class _ClassCodec:
    cls: type[Message]
    fields: tuple[tuple[str, _FieldCodec], ...]
    names: frozenset[str]
    # Straight-line versions of _encode_fields / _decode_fields for values of
    # the exact annotated types (see _compile_fast); None: use the generic path.
    fast_encode: Callable[[object], dict[str, object] | None]
    fast_decode: Callable[[dict[object, object]], Message | None]


_CLASS_CODECS: dict[type, _ClassCodec] = {}


def _dataclass_codec(cls: type) -> _FieldCodec:
    codec = _class_codec(cls)
    label = cls.__name__

    def nested(exc: _Invalid) -> _Invalid:
        # Errors inside are located as "Label.field"; nested, they read "Outer.field.field".
        path = exc.path[len(label):] if exc.path.startswith(label) else exc.path
        return _Invalid(exc.reason, path)

    def enc(value: object) -> dict[str, object]:
        if type(value) is not cls:
            raise _Invalid(f"expected {label}, got {type(value).__name__}")
        try:
            return _encode_fields(codec, value)
        except _Invalid as exc:
            raise nested(exc) from None

    def dec(value: object) -> object:
        if type(value) is not dict:
            raise _Invalid(f"expected a map for {label}, got {type(value).__name__}")
        try:
            return _decode_fields(codec, value)
        except _Invalid as exc:
            raise nested(exc) from None

    return _FieldCodec(label, enc, dec)


def _field_codec(tp: object, where: str) -> _FieldCodec:
    """Build the codec for annotation ``tp``; ``where`` names it in errors."""
    if tp is int:
        return _int_codec()
    if tp is float:
        return _float_codec()
    if tp is bytes:
        return _bytes_codec()
    if tp is str:
        return _scalar(str, "str")
    if tp is bool:
        return _scalar(bool, "bool")
    if tp is None or tp is type(None):
        return _none_codec()
    if tp is np.ndarray:
        return _array_codec(tuple(_ARRAY_DTYPES))
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is np.ndarray:
        # numpy.typing.NDArray[np.float64] is ndarray[Any, dtype[float64]]
        dtype_args = typing.get_args(args[1]) if len(args) == 2 else ()
        if dtype_args and dtype_args[0] is not Any:
            try:
                name = np.dtype(dtype_args[0]).newbyteorder("<").str
            except TypeError:
                name = ""
            if name not in _ARRAY_DTYPES:
                raise RegistrationError(f"{where}: array dtype {dtype_args[0]} is not allowed")
            return _array_codec((name,))
        return _array_codec(tuple(_ARRAY_DTYPES))
    if origin in (typing.Union, types.UnionType):
        return _union_codec([_field_codec(a, where) for a in args])
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _sequence_codec(_field_codec(args[0], where), tuple, "tuple")
        if not args:
            raise RegistrationError(f"{where}: bare tuple needs item types")
        return _fixed_tuple_codec([_field_codec(a, where) for a in args])
    if origin is list:
        return _sequence_codec(_field_codec(args[0], where), list, "list")
    if origin is frozenset:
        return _sequence_codec(_field_codec(args[0], where), frozenset, "frozenset")
    if origin is dict:
        return _dict_codec(_field_codec(args[0], where), _field_codec(args[1], where))
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_codec(tp)
    raise RegistrationError(f"{where}: unsupported field type {tp!r}")


def _class_codec(cls: type) -> _ClassCodec:
    cached = _CLASS_CODECS.get(cls)
    if cached is not None:
        return cached
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise RegistrationError(f"{cls!r} is not a dataclass")
    # No public API tells whether a dataclass is frozen; @dataclass sets this
    # attribute at run time but the stubs do not declare it.
    if not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise RegistrationError(f"{cls.__name__} must be a frozen dataclass")
    try:
        hints = typing.get_type_hints(cls)
    except Exception as exc:  # unresolvable forward references
        raise RegistrationError(f"cannot resolve annotations of {cls.__name__}: {exc}") from exc
    fields = []
    for f in dataclasses.fields(cls):
        if not f.init:
            raise RegistrationError(f"{cls.__name__}.{f.name}: init=False fields are not supported")
        if f.name in _RESERVED_KEYS:
            raise RegistrationError(f"{cls.__name__}.{f.name}: field name is reserved")
        fields.append((f.name, _field_codec(hints[f.name], f"{cls.__name__}.{f.name}")))
    fast_encode, fast_decode = _compile_fast(cls, [(name, hints[name], fc) for name, fc in fields])
    codec = _ClassCodec(cls, tuple(fields), frozenset(name for name, _ in fields),
                        fast_encode, fast_decode)
    _CLASS_CODECS[cls] = codec
    return codec


# ---------------------------------------------------------------------------
# Fast paths: one straight-line function per class and direction.
#
# The generic codec calls a converter per field (and per nested value): for a
# push that is ~50 Python calls per encode or decode, a large share of a 1 MB
# exchange's CPU time. Each class also gets two functions generated from its
# annotations that do the common case inline: every value already has exactly
# its annotated type (an ``int`` for ``int``, a dict of the right keys for a
# nested dataclass...). Anything else (a numpy integer to convert, a wrong
# type, a union of several types, a failing __post_init__) makes them return
# None and the generic path runs instead, converting or raising the error it
# always raised: the fast path decides nothing on its own.

_FAST_SCALARS = (int, float, bytes, str, bool)


def _fast_kind(tp: object) -> tuple[str, object]:
    """How the fast path handles annotation ``tp``: ``("exact", type)``, an
    exact scalar type (``"exact?"``: or None); ``("nested", class)`` a nested
    dataclass (``"nested?"``: or None); ``("generic", None)`` its field codec."""
    optional = False
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1 or len(typing.get_args(tp)) != 2:
            return "generic", None
        tp, optional = args[0], True
    suffix = "?" if optional else ""
    if tp in _FAST_SCALARS:
        return "exact" + suffix, tp
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return "nested" + suffix, tp
    return "generic", None


def _compile_fast(cls: type, fields: list[tuple[str, object, _FieldCodec]]) -> tuple[
        Callable[[object], dict[str, object] | None],
        Callable[[dict[object, object]], Message | None]]:
    """Generate ``cls``'s fast encoder (message -> dict of wire values, or
    None) and decoder (dict of wire values without ``v``/``t`` -> message, or
    None); see the comment above."""
    env: dict[str, object] = {"_Invalid": _Invalid, "CLS": cls, "NAMES": frozenset(
        name for name, _, _ in fields)}
    # "pass": a message without fields (Observe) still has a body in each try
    enc = ["def fast_encode(msg):", " try:", "  pass"]
    dec = ["def fast_decode(data):", " if data.keys() != NAMES:", "  return None", " try:",
           "  pass"]
    for i, (name, tp, field) in enumerate(fields):
        kind, what = _fast_kind(tp)
        v = f"v{i}"
        enc.append(f"  {v} = msg.{name}")
        dec.append(f"  {v} = data[{name!r}]")
        if kind.startswith("exact"):
            env[f"T{i}"] = what
            test = f"type({v}) is not T{i}"
            if kind.endswith("?"):
                test = f"{v} is not None and {test}"
            enc += [f"  if {test}:", "   return None"]
            dec += [f"  if {test}:", "   return None"]
        elif kind.startswith("nested"):
            env[f"T{i}"] = what
            nested = _class_codec(typing.cast(type, what))
            env[f"E{i}"], env[f"D{i}"] = nested.fast_encode, nested.fast_decode
            pad = "  "
            if kind.endswith("?"):
                enc.append(f"  if {v} is not None:")
                dec.append(f"  if {v} is not None:")
                pad = "   "
            enc += [f"{pad}if type({v}) is not T{i}:", f"{pad} return None",
                    f"{pad}{v} = E{i}({v})", f"{pad}if {v} is None:", f"{pad} return None"]
            dec += [f"{pad}if type({v}) is not dict:", f"{pad} return None",
                    f"{pad}{v} = D{i}({v})", f"{pad}if {v} is None:", f"{pad} return None"]
        else:  # the field's own converter; its _Invalid sends the caller to the generic path
            env[f"E{i}"], env[f"D{i}"] = field.encode, field.decode
            enc.append(f"  {v} = E{i}({v})")
            dec.append(f"  {v} = D{i}({v})")
    enc += [" except _Invalid:", "  return None",
            " return {" + ", ".join(f"{name!r}: v{i}" for i, (name, _, _) in
                                    enumerate(fields)) + "}"]
    dec += [" except _Invalid:", "  return None",
            " try:",
            "  return CLS(" + ", ".join(f"{name}=v{i}" for i, (name, _, _) in
                                        enumerate(fields)) + ")",
            " except Exception:",  # __post_init__: the generic path words the error
            "  return None"]
    exec("\n".join(enc) + "\n" + "\n".join(dec), env)  # noqa: S102  (source built above)
    return (typing.cast(Callable[[object], dict[str, object] | None], env["fast_encode"]),
            typing.cast(Callable[[dict[object, object]], Message | None], env["fast_decode"]))


def _encode_fields(codec: _ClassCodec, msg: object) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, field in codec.fields:
        try:
            out[name] = field.encode(getattr(msg, name))
        except _Invalid as exc:
            raise exc.prefixed(f"{codec.cls.__name__}.{name}") from None
    return out


def _decode_fields(codec: _ClassCodec, data: dict[object, object]) -> Message:
    if data.keys() != codec.names:
        keys = set(data)
        missing = sorted(codec.names - keys)
        # A few of the peer's keys (any few: formatting all would cost ~1 us a
        # key), not all: the text ends up in log lines and replies.
        unexpected = keys - codec.names
        extra = ", ".join(sorted(f"{k!r:.40}" for k in
                                 itertools.islice(unexpected, _EXTRA_KEYS_LISTED)))
        if len(unexpected) > _EXTRA_KEYS_LISTED:
            extra += f" and {len(unexpected) - _EXTRA_KEYS_LISTED} more"
        parts = []
        if missing:
            parts.append(f"missing fields {missing}")
        if extra:
            parts.append(f"unexpected fields [{extra}]")
        raise _Invalid("; ".join(parts), codec.cls.__name__)
    kwargs: dict[str, object] = {}
    for name, field in codec.fields:
        try:
            kwargs[name] = field.decode(data[name])
        except _Invalid as exc:
            raise exc.prefixed(f"{codec.cls.__name__}.{name}") from None
    try:
        return codec.cls(**kwargs)
    except Exception as exc:  # __post_init__ validation of the dataclass itself
        raise _Invalid(f"rejected by {codec.cls.__name__}: {exc}", codec.cls.__name__) from exc


# Binary values at least this large (array data) are referenced by encode_parts,
# not copied; msgpack writes them as bin32 (its format for >= 64 KiB). decode
# views them in the same way.
_SCATTER_ABOVE = LARGE_BIN


class _Collecting(threading.local):
    """The large array data of the message :func:`encode_parts` is encoding
    (None otherwise): the array codec puts a marker in their place."""

    large: list[memoryview] | None = None


_collecting = _Collecting()
# Marker of the i-th large array: an ext value (never in an encoded message: no
# field type produces one) holding a random token and i.
_MARKER_TOKEN = os.urandom(12)


def _marker(index: int) -> bytes:
    return b"\xd8\x00" + _MARKER_TOKEN + index.to_bytes(4, "big")


def _array_data(data: memoryview) -> object:
    """What the array codec encodes as an array's data: the data itself, or
    the marker of its place when :func:`encode_parts` takes it apart."""
    large = _collecting.large
    if large is None or data.nbytes < _SCATTER_ABOVE:
        return data
    large.append(data)
    return msgpack.ExtType(0, _marker(len(large) - 1)[2:])
