"""What a config value may be: kinds that parse a TOML value and write it back.

A key is declared once, with :func:`setting` (its default, its kind and its
help text). Everything else (reading a table, writing it back, command-line
overrides, the list of known keys) is derived from those declarations by
:func:`settings_of`, :func:`parse_table` and :func:`dump_table`.

Kinds check the *form* of a value (type, notation, and the bounds of keys only
the node uses). Settings the learner consumes are checked by the learner's own
value objects (:mod:`p2p.config.schema`), so the two can never disagree.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from learner.data_errors import DataError
from learner.module_spec import ModuleModelSpec
from learner.permutations import Cycles, format_cycles, parse_cycles
from learner.spec import NetworkSpec, SpecError, parse_counts, parse_sizes
from learner.user_code import FactoryError, FactoryRef
from p2p.config.errors import ConfigError, did_you_mean, show
from peersampling.address import AddressError, HostPort, parse_host_port

__all__ = [
    "Address",
    "AddressList",
    "Boolean",
    "Choice",
    "Context",
    "COUNTS",
    "Factory",
    "FilePath",
    "Integer",
    "IntegerList",
    "IntegerOrWord",
    "Kind",
    "LAYERS",
    "LayerSizes",
    "NetworkLayers",
    "Notation",
    "Number",
    "Permutation",
    "Setting",
    "StringList",
    "Text",
    "Units",
    "dump_table",
    "layer_sizes",
    "parse_table",
    "setting",
    "settings_of",
]

#: A value as TOML writes it.
TomlValue = bool | int | float | str | list[Any] | dict[str, Any]

_T = TypeVar("_T")


@dataclass(frozen=True)
class Context:
    """What parsing needs besides the value.

    ``base_dir``: relative paths resolve against it (the config file's
    directory; the current directory for command-line values; None keeps them
    relative). ``num_classes``: the output layer's size, for label permutations.
    ``command_line``: the value comes from an option (lists may be written
    comma-separated, and errors name the option without an index).
    """

    base_dir: Path | None = None
    num_classes: int | None = None
    command_line: bool = False


class Kind(Protocol):
    """Parses one TOML value (``key`` names it in errors) and writes it back."""

    def parse(self, value: object, key: str, ctx: Context) -> Any: ...

    def dump(self, value: Any) -> TomlValue: ...


@dataclass(frozen=True)
class Setting:
    """One key: its kind, help text and the attribute holding it (usually its name)."""

    kind: Kind
    help: str
    attr: str = ""


_SETTING = "p2p.config.setting"


def setting(default: _T, kind: Kind, help: str) -> _T:
    """Declare a section field: its default, kind and help, in one place."""
    field: _T = dataclasses.field(default=default, metadata={_SETTING: Setting(kind, help)})
    return field


def settings_of(cls: type) -> dict[str, Setting]:
    """The keys of a section dataclass, in declaration order (a section composed of
    plug-ins' keys, :mod:`p2p.config.plugins`, says them with ``composed_settings``)."""
    composed = getattr(cls, "composed_settings", None)
    if composed is not None:
        return dict(composed())
    out: dict[str, Setting] = {}
    for f in dataclasses.fields(cls):
        s = f.metadata.get(_SETTING)
        if isinstance(s, Setting):
            out[f.name] = dataclasses.replace(s, attr=s.attr or f.name)
    return out


def parse_table(settings: Mapping[str, Setting], table: Mapping[str, object], prefix: str,
                ctx: Context) -> dict[str, Any]:
    """Parse the keys present in ``table``; returns ``{attr: value}``."""
    return {s.attr: s.kind.parse(table[key], f"{prefix}.{key}", ctx)
            for key, s in settings.items() if key in table}


def dump_table(settings: Mapping[str, Setting], obj: object) -> dict[str, TomlValue]:
    """``obj``'s settings as TOML values (``None``, TOML's "absent", left out)."""
    values = {key: getattr(obj, s.attr) for key, s in settings.items()}
    return {key: settings[key].kind.dump(v) for key, v in values.items() if v is not None}


# --------------------------------------------------------------------------- scalars


def _bound(minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f" between {minimum:g} and {maximum:g}"
    if minimum is not None:
        return f" >= {minimum:g}"
    if maximum is not None:
        return f" <= {maximum:g}"
    return ""


@dataclass(frozen=True)
class Integer:
    """A whole number (not a bool), optionally bounded (inclusive)."""

    minimum: int | None = None
    maximum: int | None = None

    def parse(self, value: object, key: str, ctx: Context) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {show(value)}", key=key)
        if (self.minimum is not None and value < self.minimum) or (
                self.maximum is not None and value > self.maximum):
            raise ConfigError(f"{key}: expected an integer{_bound(self.minimum, self.maximum)}, "
                              f"got {value!r}", key=key)
        return value

    def dump(self, value: int) -> int:
        return value


@dataclass(frozen=True)
class Number:
    """A finite number (ints are widened to float), optionally bounded.

    ``above``/``below`` are exclusive bounds, ``minimum``/``maximum`` inclusive.
    """

    minimum: float | None = None
    above: float | None = None
    maximum: float | None = None
    below: float | None = None

    def parse(self, value: object, key: str, ctx: Context) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}: expected a number, got {show(value)}", key=key)
        number = float(value)
        if not math.isfinite(number):
            raise ConfigError(f"{key}: expected a finite number, got {value!r}", key=key)
        checks = ((self.minimum, ">=", operator.ge), (self.above, ">", operator.gt),
                  (self.maximum, "<=", operator.le), (self.below, "<", operator.lt))
        for bound, relation, holds in checks:
            if bound is not None and not holds(number, bound):
                raise ConfigError(f"{key}: expected a number {relation} {bound:g}, got "
                                  f"{value!r}", key=key)
        return number

    def dump(self, value: float) -> float:
        return value


@dataclass(frozen=True)
class Boolean:
    def parse(self, value: object, key: str, ctx: Context) -> bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {show(value)}", key=key)
        return value

    def dump(self, value: bool) -> bool:
        return value


@dataclass(frozen=True)
class Text:
    nonempty: bool = False

    def parse(self, value: object, key: str, ctx: Context) -> str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {show(value)}", key=key)
        if self.nonempty and not value.strip():
            raise ConfigError(f"{key}: expected a non-empty string", key=key)
        return value

    def dump(self, value: str) -> str:
        return value


@dataclass(frozen=True)
class Choice:
    """One of ``options`` (``fold_case``: compared in lower case, stored lower-case)."""

    options: tuple[str, ...]
    fold_case: bool = False

    def parse(self, value: object, key: str, ctx: Context) -> str:
        listed = " | ".join(f'"{c}"' for c in self.options)
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected one of {listed}, got {show(value)}", key=key)
        text = value.lower() if self.fold_case else value
        if text not in self.options:
            hint = did_you_mean(text, self.options)
            raise ConfigError(f"{key}: expected one of {listed}, got {value!r}{hint}", key=key)
        return text

    def dump(self, value: str) -> str:
        return value


@dataclass(frozen=True)
class IntegerOrWord:
    """An :class:`Integer` within bounds, or the word ``word`` (e.g. ``"auto"``)."""

    word: str
    minimum: int | None = None
    maximum: int | None = None

    def parse(self, value: object, key: str, ctx: Context) -> int | str:
        if isinstance(value, str):
            # the command line gives every value as text: "3" is the integer 3
            text = value.strip()
            if text.lower() == self.word:
                return self.word
            if text.lstrip("+-").isdigit():
                value = int(text)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f'{key}: expected "{self.word}" or an integer'
                              f"{_bound(self.minimum, self.maximum)}, got {show(value)}",
                              key=key)
        return Integer(self.minimum, self.maximum).parse(value, key, ctx)

    def dump(self, value: int | str) -> int | str:
        return value


@dataclass(frozen=True)
class StringList:
    def parse(self, value: object, key: str, ctx: Context) -> tuple[str, ...]:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key}: expected a list of strings, got {show(value)}", key=key)
        return tuple(value)

    def dump(self, value: Sequence[str]) -> list[str]:
        return list(value)


@dataclass(frozen=True)
class IntegerList:
    """Distinct whole numbers >= ``minimum``: a list, or a comma-separated string
    (``"0,5,6,9"``, as an option gives it)."""

    minimum: int = 0

    def parse(self, value: object, key: str, ctx: Context) -> tuple[int, ...]:
        items: object = value
        if isinstance(value, str):
            try:
                items = [int(part) for part in value.split(",") if part.strip()]
            except ValueError:
                raise ConfigError(f"{key}: expected integers separated by commas, got "
                                  f"{show(value)}", key=key) from None
        if (not isinstance(items, list | tuple) or not items
                or any(isinstance(v, bool) or not isinstance(v, int) for v in items)):
            raise ConfigError(f"{key}: expected a non-empty list of integers, got {show(value)}",
                              key=key)
        if any(v < self.minimum for v in items) or len(set(items)) != len(items):
            raise ConfigError(f"{key}: expected distinct integers >= {self.minimum}, got "
                              f"{show(value)}", key=key)
        return tuple(items)

    def dump(self, value: Sequence[int]) -> list[int]:
        return list(value)


@dataclass(frozen=True)
class FilePath:
    """A path; relative ones resolve against :attr:`Context.base_dir`."""

    def parse(self, value: object, key: str, ctx: Context) -> Path:
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        text = Text(nonempty=True).parse(value, key, ctx)
        path = Path(text).expanduser()
        if not path.is_absolute() and ctx.base_dir is not None:
            path = ctx.base_dir / path
        return path

    def dump(self, value: Path) -> str:
        return str(value)


# --------------------------------------------------------------------------- addresses


@dataclass(frozen=True)
class Address:
    """``"host:port"`` or ``"[v6]:port"`` (:mod:`peersampling.address`'s rule)."""

    allow_port_zero: bool = False

    def parse(self, value: object, key: str, ctx: Context) -> HostPort:
        if isinstance(value, HostPort):
            return value
        try:
            return parse_host_port(value, allow_port_zero=self.allow_port_zero)
        except AddressError as exc:
            raise ConfigError(f"{key}: {exc}", key=key) from None

    def dump(self, value: HostPort) -> str:
        return str(value)


@dataclass(frozen=True)
class AddressList:
    """A list of addresses; a comma-separated string too (the command line's form)."""

    def parse(self, value: object, key: str, ctx: Context) -> tuple[HostPort, ...]:
        if isinstance(value, str) and ctx.command_line:
            value = [p for p in (s.strip() for s in value.split(",")) if p]
        if not isinstance(value, list | tuple):
            raise ConfigError(f'{key}: expected a list of "host:port" strings, got '
                              f"{show(value)}", key=key)
        return tuple(Address().parse(v, key if ctx.command_line else f"{key}[{i}]", ctx)
                     for i, v in enumerate(value))

    def dump(self, value: Sequence[HostPort]) -> list[str]:
        return [str(v) for v in value]


# --------------------------------------------------------------------------- notations


@dataclass(frozen=True)
class Notation:
    """Integers joined by ``sep`` (``"64=48=32=10"``), read by the learner's own parser."""

    read: Callable[[str], tuple[int, ...]]
    sep: str

    def parse(self, value: object, key: str, ctx: Context) -> tuple[int, ...]:
        try:
            return self.read(value)  # type: ignore[arg-type]  # the reader checks the type
        except SpecError as exc:
            raise ConfigError(f"{key}: {exc}", key=key) from None

    def dump(self, value: Sequence[int]) -> str:
        return self.sep.join(map(str, value))


class LayerSizes(tuple[int, ...]):
    """The sizes of a convolutional network (channels, then neurons) that remember the
    whole network: image shape and convolutions, which the sizes alone do not say.

    Only convolutional networks are read into one; an MLP's layers stay a plain
    tuple. Equal to another LayerSizes of the same network, never to a plain tuple.
    """

    network: NetworkSpec

    def __new__(cls, network: NetworkSpec) -> LayerSizes:
        sizes = super().__new__(cls, network.sizes)
        sizes.network = network
        return sizes

    def __getnewargs__(self) -> tuple[NetworkSpec]:  # copy and pickle rebuild from the network
        return (self.network,)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LayerSizes):
            return self.network.notation() == other.network.notation()
        return False

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self.network.notation())

    def __repr__(self) -> str:
        return f"LayerSizes({self.network.notation()!r})"


def layer_sizes(network: NetworkSpec) -> tuple[int, ...]:
    """``network.layers`` for ``network``: its sizes, remembering convolutions if it has any."""
    return network.sizes if network.image_size is None else LayerSizes(network)


@dataclass(frozen=True)
class NetworkLayers:
    """The network notation: ``"64=48=32=10"`` or ``"1x28x28=c16k5=pool2=c32k5=pool2=100=10"``
    (:class:`learner.NetworkSpec`'s parser), read into :func:`layer_sizes`."""

    def parse(self, value: object, key: str, ctx: Context) -> tuple[int, ...]:
        try:
            if isinstance(value, str):
                return layer_sizes(NetworkSpec.parse(value))
            return parse_sizes(value)  # type: ignore[arg-type]  # the reader checks the type
        except SpecError as exc:
            raise ConfigError(f"{key}: {exc}", key=key) from None

    def dump(self, value: Sequence[int]) -> str:
        if isinstance(value, LayerSizes):
            return value.network.notation()
        return "=".join(map(str, value))


#: The network's layers ``"64=48=32=10"`` or a convolutional notation (see NetworkLayers).
LAYERS = NetworkLayers()
#: A partial model's neurons per layer ``"64-40-24-10"`` (:class:`learner.PartialModelSpec`'s).
COUNTS = Notation(parse_counts, "-")


@dataclass(frozen=True)
class Permutation:
    """Label cycles ``"8:9,6:7"`` (:mod:`learner.permutations`: one notation, one parser)."""

    def parse(self, value: object, key: str, ctx: Context) -> Cycles:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string of label cycles such as \"8:9\", got "
                              f"{show(value)}", key=key)
        try:
            return parse_cycles(value, ctx.num_classes)
        except DataError as exc:
            raise ConfigError(f"{key}: {exc}", key=key) from None

    def dump(self, value: Cycles) -> str:
        return format_cycles(value)


# --------------------------------------------------------------------------- user code


@dataclass(frozen=True)
class Factory:
    """The user's code: ``"package.module:function"`` or ``"path/to/file.py:function"``
    (relative to the config file), or, from Python, the callable itself. Only the form
    is checked here; ``p2p config`` and ``p2p run`` import it (``learner.user_code``)."""

    def parse(self, value: object, key: str, ctx: Context) -> FactoryRef:
        try:
            return FactoryRef.parse(value, key, ctx.base_dir)
        except FactoryError as exc:
            raise ConfigError(f"{key}: {exc.detail}", key=key) from None

    def dump(self, value: FactoryRef) -> str:
        return value.text if value.path is None else f"{value.path}:{value.attribute}"


@dataclass(frozen=True)
class Units:
    """A share of each layer's output units: a fraction in (0, 1], a count, or a table
    ``{"layer glob" = amount}`` (:class:`learner.module_spec.ModuleModelSpec`'s check)."""

    def parse(self, value: object, key: str, ctx: Context) -> object:
        if isinstance(value, dict):
            value = tuple(value.items())
        try:
            return ModuleModelSpec("x", units=value).units  # type: ignore[arg-type]
        except SpecError as exc:
            detail = exc.detail.removeprefix("partial model 'x': ")
            raise ConfigError(f"{key}: {detail}", key=key) from None

    def dump(self, value: object) -> TomlValue:
        if isinstance(value, tuple):
            return {glob: amount for glob, amount in value}
        assert isinstance(value, int | float)
        return value
