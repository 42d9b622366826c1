"""Node configuration: a TOML file loaded into frozen dataclasses.

``load_config(path)`` reads a TOML file (stdlib :mod:`tomllib`), checks every key
(type, range, notation) and returns a :class:`NodeConfig`. Every problem raises
:class:`ConfigError` whose message names the dotted key (``training.lr``), the
value found and the expected form. Unknown sections and keys are errors too,
with a "did you mean" suggestion, because a misspelt key silently falling back
to its default is the worst kind of configuration bug.

Command-line values override the file through :meth:`NodeConfig.with_overrides`.
:func:`render_config_toml` writes a config back as TOML (used by the swarm
script to generate per-node files); ``load_config(render_config_toml(c))``
gives back ``c``.

Relative paths in a file (``node.data_dir``, ``data.path``,
``security.swarm_key_file``) are resolved against the directory holding the
file, so a config keeps working whatever the current directory is.

The swarm key helpers (:func:`generate_swarm_key`, :func:`load_swarm_key`)
live here too: the key file is configuration the operator provides.
"""

from __future__ import annotations

import base64
import dataclasses
import difflib
import ipaddress
import json
import logging
import math
import os
import re
import secrets
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

__all__ = [
    "ACTIVATIONS",
    "CIPHERS",
    "CheckpointConfig",
    "ConfigError",
    "DATA_TASKS",
    "DataConfig",
    "GossipConfig",
    "HostPort",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "LimitsConfig",
    "ModelSpec",
    "MODEL_KINDS",
    "NetworkConfig",
    "NodeConfig",
    "NodeSection",
    "OPTIMIZERS",
    "PRIVACY_MODES",
    "PeerSamplingConfig",
    "SWARM_KEY_BYTES",
    "SecurityConfig",
    "SwarmKeyError",
    "TrainingConfig",
    "config_from_dict",
    "config_to_dict",
    "encode_swarm_key",
    "generate_swarm_key",
    "load_config",
    "load_swarm_key",
    "parse_config_text",
    "parse_host_port",
    "parse_layers",
    "parse_neurons",
    "parse_permutation",
    "render_config_toml",
]

ACTIVATIONS = ("relu", "sigmoid", "tanh")
OPTIMIZERS = ("sgd", "momentum", "adam")
PRIVACY_MODES = ("none", "masked")
DATA_TASKS = ("digits", "synthetic", "npz", "idx")
CIPHERS = ("chacha20", "aes-gcm")
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")
MODEL_KINDS = ("global", "semi-local")
SWARM_KEY_BYTES = 32

# Name reserved for the implicit local model (the neurons no declared model covers).
LOCAL_MODEL_NAME = "local"
_MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


class ConfigError(ValueError):
    """A configuration value is missing, of the wrong type, or out of range.

    ``key`` is the dotted key (``training.lr``) or command-line option at fault
    (empty when the whole file is unreadable); the message says what was
    expected.
    """

    def __init__(self, message: str, *, key: str = "", source: str | None = None) -> None:
        self.key = key
        self.source = source
        prefix = f"{source}: " if source else ""
        super().__init__(prefix + message)


class SwarmKeyError(ConfigError):
    """The swarm key file is missing, unreadable, or not 32 bytes of base64."""


# --------------------------------------------------------------------------- addresses


@dataclass(frozen=True, order=True)
class HostPort:
    """A TCP address ``host:port`` (IPv6 hosts are written ``[::1]:7400``)."""

    host: str
    port: int

    def __str__(self) -> str:
        if ":" in self.host:
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"


def parse_host_port(text: object, key: str, *, allow_port_zero: bool = False) -> HostPort:
    """Parse ``"host:port"`` (or ``"[v6]:port"``); ``key`` names the setting in errors."""
    expected = '"host:port" such as "127.0.0.1:7400" or "[::1]:7400"'
    if not isinstance(text, str):
        raise ConfigError(f"{key}: expected a string {expected}, got {_show(text)}", key=key)
    raw = text.strip()
    if raw.startswith("["):
        end = raw.find("]")
        if end < 0 or raw[end + 1 : end + 2] != ":":
            raise ConfigError(f"{key}: cannot parse {text!r}; expected {expected}", key=key)
        host, port_text = raw[1:end], raw[end + 2 :]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigError(
                f"{key}: {host!r} in {text!r} is not an IPv6 address; expected {expected}",
                key=key,
            ) from None
    else:
        host, sep, port_text = raw.rpartition(":")
        if not sep or ":" in host:
            raise ConfigError(f"{key}: cannot parse {text!r}; expected {expected}", key=key)
    if not host or any(c.isspace() for c in host):
        raise ConfigError(f"{key}: missing or invalid host in {text!r}; expected {expected}", key=key)
    if not port_text.isdigit():
        raise ConfigError(f"{key}: port in {text!r} is not a number; expected {expected}", key=key)
    port = int(port_text)
    low = 0 if allow_port_zero else 1
    if not low <= port <= 65535:
        raise ConfigError(
            f"{key}: port {port} in {text!r} is out of range; expected {low}..65535"
            + (" (0 = pick a free port)" if allow_port_zero else ""),
            key=key,
        )
    return HostPort(host, port)


# --------------------------------------------------------------------------- notations


def parse_layers(text: object, key: str = "network.layers") -> tuple[int, ...]:
    """Parse the layer notation ``"64=48=32=10"`` (at least input and output)."""
    expected = 'layer sizes joined by "=", e.g. "64=48=32=10" (at least 2 layers, each >= 1)'
    if not isinstance(text, str):
        raise ConfigError(f"{key}: expected a string of {expected}, got {_show(text)}", key=key)
    parts = text.strip().split("=")
    if len(parts) < 2 or not all(p.strip().isdigit() for p in parts):
        raise ConfigError(f"{key}: cannot parse {text!r}; expected {expected}", key=key)
    sizes = tuple(int(p) for p in parts)
    if any(s < 1 for s in sizes):
        raise ConfigError(f"{key}: every layer of {text!r} needs >= 1 neuron; expected {expected}",
                          key=key)
    return sizes


def parse_neurons(text: object, key: str) -> tuple[int, ...]:
    """Parse a partial model's neuron counts ``"64-40-24-10"`` (zeros allowed)."""
    expected = 'neuron counts per layer joined by "-", e.g. "64-40-24-10" or "0-8-6-0"'
    if not isinstance(text, str):
        raise ConfigError(f"{key}: expected a string of {expected}, got {_show(text)}", key=key)
    parts = text.strip().split("-")
    if len(parts) < 2 or not all(p.strip().isdigit() for p in parts):
        raise ConfigError(f"{key}: cannot parse {text!r}; expected {expected}", key=key)
    return tuple(int(p) for p in parts)


def parse_permutation(text: object, key: str = "data.permutation") -> tuple[tuple[int, ...], ...]:
    """Parse label cycles: ``"8:9"`` swaps 8 and 9, ``"7:8:9"`` maps 7->8->9->7,
    ``"8:9,6:7"`` applies two disjoint cycles, ``""`` is the identity."""
    expected = 'label cycles such as "8:9", "7:8:9" or "8:9,6:7" ("" = no permutation)'
    if not isinstance(text, str):
        raise ConfigError(f"{key}: expected a string of {expected}, got {_show(text)}", key=key)
    if not text.strip():
        return ()
    cycles: list[tuple[int, ...]] = []
    seen: set[int] = set()
    for chunk in text.split(","):
        items = [p.strip() for p in chunk.split(":")]
        if len(items) < 2 or not all(p.isdigit() for p in items):
            raise ConfigError(f"{key}: cannot parse {text!r}; expected {expected}", key=key)
        cycle = tuple(int(p) for p in items)
        if seen.intersection(cycle) or len(set(cycle)) != len(cycle):
            raise ConfigError(
                f"{key}: label repeated in {text!r}; cycles must be disjoint ({expected})", key=key
            )
        seen.update(cycle)
        cycles.append(cycle)
    return tuple(cycles)


def _format_permutation(cycles: tuple[tuple[int, ...], ...]) -> str:
    return ",".join(":".join(str(x) for x in c) for c in cycles)


# --------------------------------------------------------------------------- sections


@dataclass(frozen=True)
class NodeSection:
    """``[node]``: identity-independent settings of this daemon."""

    name: str = "node"
    listen: HostPort = HostPort("127.0.0.1", 0)
    advertise: HostPort | None = None
    bootstrap: tuple[HostPort, ...] = ()
    data_dir: Path | None = None
    seed: int = 0
    log_format: str = "text"
    log_level: str = "info"


@dataclass(frozen=True)
class ModelSpec:
    """One ``[[models]]`` entry: a declared (shared) partial model."""

    name: str
    neurons: tuple[int, ...]
    depends_on: tuple[str, ...] = ()
    kind: str | None = None

    @property
    def neurons_text(self) -> str:
        """The neuron counts in the papers' notation, e.g. ``"64-40-24-10"``."""
        return "-".join(str(n) for n in self.neurons)


@dataclass(frozen=True)
class NetworkConfig:
    """``[network]``: the node's MLP and how partial models combine."""

    layers: tuple[int, ...] = (64, 48, 32, 10)
    activation: str = "relu"
    cross_models: bool = False

    @property
    def layers_text(self) -> str:
        """The layer sizes in the papers' notation, e.g. ``"64=48=32=10"``."""
        return "=".join(str(n) for n in self.layers)


@dataclass(frozen=True)
class TrainingConfig:
    """``[training]``: local SGD."""

    lr: float = 0.05
    batch_size: int = 32
    steps_per_round: int = 10
    optimizer: str = "sgd"
    momentum: float = 0.9
    rounds: int = 0
    eval_every: int = 10
    round_interval: float = 0.0
    min_peers: int = 0
    peer_wait: float = 60.0


@dataclass(frozen=True)
class GossipConfig:
    """``[gossip]``: push-sum averaging of the shared models."""

    fanout: int = 1
    pushes_per_round: int = 1
    privacy: str = "none"
    masked_pushes: int = 4
    mask_std: float = 10.0
    unmask_after: int = 40
    push_timeout: float = 5.0


@dataclass(frozen=True)
class PeerSamplingConfig:
    """``[peer_sampling]``: Cyclon-style views."""

    view_size: int = 20
    shuffle_length: int = 5
    period: float = 1.0


@dataclass(frozen=True)
class DataConfig:
    """``[data]``: where this node's training and test data come from."""

    task: str = "digits"
    path: Path | None = None
    node_index: int = 0
    num_nodes: int = 1
    permutation: tuple[tuple[int, ...], ...] = ()
    test_fraction: float = 0.2
    seed: int = 0

    @property
    def permutation_text(self) -> str:
        """The permutation in config notation (``"8:9"``; ``""`` for none)."""
        return _format_permutation(self.permutation)

    @property
    def learner_permutation(self) -> str | None:
        """The permutation in the data loader's cycle notation (``"(7 8 9)"``; None: none)."""
        if not self.permutation:
            return None
        return " ".join("(" + " ".join(map(str, cycle)) + ")" for cycle in self.permutation)

    def label_map(self, num_classes: int) -> tuple[int, ...]:
        """``label_map[y]`` is the label this node trains on for true label ``y``."""
        # the data loader's parser, so that the config can never disagree with it
        # (imported here: the admin CLI loads this module and must not pull in torch)
        from learner.permutations import parse_permutation as parse_labels

        return tuple(int(y) for y in parse_labels(self.learner_permutation, num_classes))


@dataclass(frozen=True)
class SecurityConfig:
    """``[security]``: swarm key (optional) and the AEAD used with it."""

    swarm_key_file: Path | None = None
    cipher: str = "chacha20"


@dataclass(frozen=True)
class LimitsConfig:
    """``[limits]``: resource bounds that protect the daemon from peers."""

    max_connections: int = 64
    max_frame_size: int = 16 * 1024 * 1024
    max_messages_per_second: float = 50.0
    connect_timeout: float = 5.0
    read_timeout: float = 30.0


@dataclass(frozen=True)
class CheckpointConfig:
    """``[checkpoint]``: periodic state snapshots (also written on shutdown)."""

    interval: float = 60.0


@dataclass(frozen=True)
class NodeConfig:
    """The whole, validated configuration of one node."""

    node: NodeSection = field(default_factory=NodeSection)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    models: tuple[ModelSpec, ...] = ()
    training: TrainingConfig = field(default_factory=TrainingConfig)
    gossip: GossipConfig = field(default_factory=GossipConfig)
    peer_sampling: PeerSamplingConfig = field(default_factory=PeerSamplingConfig)
    data: DataConfig = field(default_factory=DataConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    source: Path | None = field(default=None, compare=False)

    def model(self, name: str) -> ModelSpec:
        """The declared model called ``name`` (``KeyError`` if none)."""
        for spec in self.models:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def with_overrides(
        self,
        *,
        listen: str | HostPort | None = None,
        bootstrap: str | list[str] | tuple[str, ...] | tuple[HostPort, ...] | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        swarm_key_file: str | os.PathLike[str] | None = None,
        log_format: str | None = None,
        log_level: str | None = None,
        name: str | None = None,
        seed: int | None = None,
    ) -> NodeConfig:
        """Return a copy with command-line values replacing the file's.

        ``None`` keeps the file's value. ``bootstrap`` accepts a comma-separated
        string or a list; relative paths are resolved against the current
        directory. Errors name the option (``--listen``) and the key.
        """
        node = self.node
        changes: dict[str, Any] = {}
        if listen is not None:
            changes["listen"] = (
                listen if isinstance(listen, HostPort)
                else parse_host_port(listen, "--listen (node.listen)", allow_port_zero=True)
            )
        if bootstrap is not None:
            changes["bootstrap"] = _parse_bootstrap_override(bootstrap)
        if data_dir is not None:
            changes["data_dir"] = Path(data_dir).expanduser().absolute()
        if log_format is not None:
            changes["log_format"] = _choice(log_format, "--log-format (node.log_format)",
                                            LOG_FORMATS)
        if log_level is not None:
            changes["log_level"] = _choice(log_level.lower(), "--log-level (node.log_level)",
                                           LOG_LEVELS)
        if name is not None:
            changes["name"] = _string(name, "--name (node.name)", nonempty=True)
        if seed is not None:
            changes["seed"] = _integer(seed, "--seed (node.seed)", minimum=0)
        security = self.security
        if swarm_key_file is not None:
            security = dataclasses.replace(
                security, swarm_key_file=Path(swarm_key_file).expanduser().absolute()
            )
        return dataclasses.replace(
            self, node=dataclasses.replace(node, **changes), security=security
        )


def _parse_bootstrap_override(value: object) -> tuple[HostPort, ...]:
    key = "--bootstrap (node.bootstrap)"
    if isinstance(value, str):
        items: list[object] = [p for p in (s.strip() for s in value.split(",")) if p]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise ConfigError(f"{key}: expected host:port,host:port..., got {_show(value)}", key=key)
    return tuple(
        v if isinstance(v, HostPort) else parse_host_port(v, key) for v in items
    )


# --------------------------------------------------------------------------- checkers


def _show(value: object) -> str:
    """Describe a bad value for an error message (type and a short repr)."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _integer(value: object, key: str, *, minimum: int | None = None,
             maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}: expected an integer, got {_show(value)}", key=key)
    _check_range(value, key, minimum, maximum, "an integer")
    return value


def _number(value: object, key: str, *, minimum: float | None = None,
            maximum: float | None = None, exclusive_min: bool = False,
            exclusive_max: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{key}: expected a number, got {_show(value)}", key=key)
    number = float(value)
    if not math.isfinite(number):
        raise ConfigError(f"{key}: expected a finite number, got {value!r}", key=key)
    if minimum is not None and (number <= minimum if exclusive_min else number < minimum):
        rel = ">" if exclusive_min else ">="
        raise ConfigError(f"{key}: expected a number {rel} {minimum:g}, got {value!r}", key=key)
    if maximum is not None and (number >= maximum if exclusive_max else number > maximum):
        rel = "<" if exclusive_max else "<="
        raise ConfigError(f"{key}: expected a number {rel} {maximum:g}, got {value!r}", key=key)
    return number


def _check_range(value: int, key: str, minimum: int | None, maximum: int | None,
                 what: str) -> None:
    if minimum is not None and value < minimum:
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise ConfigError(f"{key}: expected {what} {bound}, got {value!r}", key=key)
    if maximum is not None and value > maximum:
        bound = f"between {minimum} and {maximum}" if minimum is not None else f"<= {maximum}"
        raise ConfigError(f"{key}: expected {what} {bound}, got {value!r}", key=key)


def _string(value: object, key: str, *, nonempty: bool = False) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{key}: expected a string, got {_show(value)}", key=key)
    if nonempty and not value.strip():
        raise ConfigError(f"{key}: expected a non-empty string", key=key)
    return value


def _boolean(value: object, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key}: expected true or false, got {_show(value)}", key=key)
    return value


def _choice(value: object, key: str, choices: tuple[str, ...]) -> str:
    options = " | ".join(f'"{c}"' for c in choices)
    if not isinstance(value, str):
        raise ConfigError(f"{key}: expected one of {options}, got {_show(value)}", key=key)
    if value not in choices:
        hint = _did_you_mean(value, choices)
        raise ConfigError(f"{key}: expected one of {options}, got {value!r}{hint}", key=key)
    return value


def _string_list(value: object, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{key}: expected a list of strings, got {_show(value)}", key=key)
    return tuple(value)


def _path(value: object, key: str, base: Path | None) -> Path:
    text = _string(value, key, nonempty=True)
    path = Path(text).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    return path


def _did_you_mean(word: str, options: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _other_section_hint(key: str, section: str) -> str:
    """Point at the section a misplaced key belongs to."""
    for name, keys in _SECTION_KEYS.items():
        if key in keys and name != section and not section.startswith(name + "["):
            where = "[[models]]" if name == "models" else f"[{name}]"
            return f" (it belongs in {where})"
    return ""


_T = TypeVar("_T")


def _table(raw: Mapping[str, Any], section: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    """Check ``raw`` is a table with only ``allowed`` keys; return it as a dict."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{section}: expected a table [{section}], got {_show(raw)}",
                          key=section)
    for key in raw:
        if key not in allowed:
            hint = _did_you_mean(key, allowed) or _other_section_hint(key, section)
            known = ", ".join(allowed)
            raise ConfigError(
                f"{section}.{key}: unknown key{hint}; known keys of [{section}]: {known}",
                key=f"{section}.{key}",
            )
    return dict(raw)


def _get(table: dict[str, Any], section: str, key: str, default: _T,
         check: Callable[[object, str], _T]) -> _T:
    if key not in table:
        return default
    return check(table[key], f"{section}.{key}")


# --------------------------------------------------------------------------- sections parsing

_SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "node": ("name", "listen", "advertise", "bootstrap", "data_dir", "seed", "log_format", "log_level"),
    "network": ("layers", "activation", "cross_models"),
    "models": ("name", "neurons", "depends_on", "kind"),
    "training": ("lr", "batch_size", "steps_per_round", "optimizer", "momentum", "rounds",
                 "eval_every", "round_interval", "min_peers", "peer_wait"),
    "gossip": ("fanout", "pushes_per_round", "privacy", "masked_pushes", "mask_std", "unmask_after", "push_timeout"),
    "peer_sampling": ("view_size", "shuffle_length", "period"),
    "data": ("task", "path", "node_index", "num_nodes", "permutation", "test_fraction", "seed"),
    "security": ("swarm_key_file", "cipher"),
    "limits": ("max_connections", "max_frame_size", "max_messages_per_second",
               "connect_timeout", "read_timeout"),
    "checkpoint": ("interval",),
}


def _parse_node(raw: object, base: Path | None) -> NodeSection:
    t = _table(raw, "node", _SECTION_KEYS["node"])  # type: ignore[arg-type]
    d = NodeSection()
    s = "node"
    bootstrap = d.bootstrap
    if "bootstrap" in t:
        items = t["bootstrap"]
        if not isinstance(items, list):
            raise ConfigError(
                f'node.bootstrap: expected a list of "host:port" strings, got {_show(items)}',
                key="node.bootstrap",
            )
        bootstrap = tuple(
            parse_host_port(item, f"node.bootstrap[{i}]") for i, item in enumerate(items)
        )
    return NodeSection(
        name=_get(t, s, "name", d.name, lambda v, k: _string(v, k, nonempty=True)),
        listen=_get(t, s, "listen", d.listen,
                    lambda v, k: parse_host_port(v, k, allow_port_zero=True)),
        advertise=_get(t, s, "advertise", d.advertise, parse_host_port),
        bootstrap=bootstrap,
        data_dir=_get(t, s, "data_dir", d.data_dir, lambda v, k: _path(v, k, base)),
        seed=_get(t, s, "seed", d.seed, lambda v, k: _integer(v, k, minimum=0)),
        log_format=_get(t, s, "log_format", d.log_format,
                        lambda v, k: _choice(v, k, LOG_FORMATS)),
        log_level=_get(t, s, "log_level", d.log_level, lambda v, k: _choice(v, k, LOG_LEVELS)),
    )


def _parse_network(raw: object) -> NetworkConfig:
    t = _table(raw, "network", _SECTION_KEYS["network"])  # type: ignore[arg-type]
    d = NetworkConfig()
    s = "network"
    return NetworkConfig(
        layers=_get(t, s, "layers", d.layers, parse_layers),
        activation=_get(t, s, "activation", d.activation,
                        lambda v, k: _choice(v, k, ACTIVATIONS)),
        cross_models=_get(t, s, "cross_models", d.cross_models, _boolean),
    )


def _parse_models(raw: object, layers: tuple[int, ...]) -> tuple[ModelSpec, ...]:
    if not isinstance(raw, list):
        raise ConfigError(
            f"models: expected an array of tables written [[models]], got {_show(raw)}",
            key="models",
        )
    specs: list[ModelSpec] = []
    for i, entry in enumerate(raw):
        s = f"models[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{s}: expected a table written [[models]], got {_show(entry)}",
                              key=s)
        t = _table(entry, s, _SECTION_KEYS["models"])
        for required in ("name", "neurons"):
            if required not in t:
                raise ConfigError(f"{s}.{required}: missing; every [[models]] entry needs "
                                  f'name (e.g. "global") and neurons (e.g. "64-40-24-10")',
                                  key=f"{s}.{required}")
        name = _string(t["name"], f"{s}.name")
        if not _MODEL_NAME_RE.match(name):
            raise ConfigError(
                f"{s}.name: {name!r} is not a valid model name; expected 1-64 characters "
                "from letters, digits, '_', '.', '-' starting with a letter or digit",
                key=f"{s}.name",
            )
        if name == LOCAL_MODEL_NAME:
            raise ConfigError(
                f"{s}.name: {name!r} is reserved for the implicit local model (the neurons no "
                "declared model covers); choose another name",
                key=f"{s}.name",
            )
        neurons = parse_neurons(t["neurons"], f"{s}.neurons")
        if len(neurons) != len(layers):
            raise ConfigError(
                f"{s}.neurons: {t['neurons']!r} has {len(neurons)} layers but network.layers "
                f"has {len(layers)} ({'='.join(map(str, layers))}); expected one count per layer",
                key=f"{s}.neurons",
            )
        for j, (n, size) in enumerate(zip(neurons, layers, strict=True)):
            if n > size:
                raise ConfigError(
                    f"{s}.neurons: layer {j} asks for {n} neurons but network.layers has only "
                    f"{size} there; expected <= {size}",
                    key=f"{s}.neurons",
                )
        if sum(neurons[1:]) == 0:
            raise ConfigError(
                f"{s}.neurons: {t['neurons']!r} owns no parameters (only input neurons); "
                "expected at least one non-input neuron",
                key=f"{s}.neurons",
            )
        depends = _get(t, s, "depends_on", (), _string_list)
        kind = _get(t, s, "kind", None, lambda v, k: _choice(v, k, MODEL_KINDS))
        specs.append(ModelSpec(name=name, neurons=neurons, depends_on=depends, kind=kind))

    names = [m.name for m in specs]
    for i, spec in enumerate(specs):
        if names.index(spec.name) != i:
            raise ConfigError(f"models[{i}].name: duplicate model name {spec.name!r}",
                              key=f"models[{i}].name")
    for i, spec in enumerate(specs):
        for dep in spec.depends_on:
            if dep == spec.name:
                raise ConfigError(f"models[{i}].depends_on: model {spec.name!r} depends on "
                                  "itself", key=f"models[{i}].depends_on")
            if dep not in names:
                hint = _did_you_mean(dep, names)
                raise ConfigError(
                    f"models[{i}].depends_on: unknown model {dep!r}{hint}; a node must declare "
                    f"every dependency of its models (declared: {', '.join(names)})",
                    key=f"models[{i}].depends_on",
                )
    _check_acyclic(specs)
    for j, size in enumerate(layers):
        used = sum(m.neurons[j] for m in specs)
        if used > size:
            raise ConfigError(
                f"models: layer {j} has {size} neurons but the declared models use {used} "
                f"together; expected the models' counts per layer to sum to <= {size}",
                key="models",
            )
    return tuple(specs)


def _check_acyclic(specs: list[ModelSpec]) -> None:
    deps = {m.name: m.depends_on for m in specs}
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = path[path.index(name):] + [name]
            index = [m.name for m in specs].index(name)
            raise ConfigError(
                f"models[{index}].depends_on: dependency cycle {' -> '.join(cycle)}; "
                "expected acyclic dependencies",
                key=f"models[{index}].depends_on",
            )
        state[name] = 1
        for dep in deps[name]:
            visit(dep, path + [name])
        state[name] = 2

    for spec in specs:
        visit(spec.name, [])


def _parse_training(raw: object) -> TrainingConfig:
    t = _table(raw, "training", _SECTION_KEYS["training"])  # type: ignore[arg-type]
    d = TrainingConfig()
    s = "training"
    return TrainingConfig(
        lr=_get(t, s, "lr", d.lr, lambda v, k: _number(v, k, minimum=0, exclusive_min=True)),
        batch_size=_get(t, s, "batch_size", d.batch_size, lambda v, k: _integer(v, k, minimum=1)),
        steps_per_round=_get(t, s, "steps_per_round", d.steps_per_round,
                             lambda v, k: _integer(v, k, minimum=1)),
        optimizer=_get(t, s, "optimizer", d.optimizer, lambda v, k: _choice(v, k, OPTIMIZERS)),
        momentum=_get(t, s, "momentum", d.momentum,
                      lambda v, k: _number(v, k, minimum=0, maximum=1, exclusive_max=True)),
        rounds=_get(t, s, "rounds", d.rounds, lambda v, k: _integer(v, k, minimum=0)),
        eval_every=_get(t, s, "eval_every", d.eval_every, lambda v, k: _integer(v, k, minimum=1)),
        round_interval=_get(t, s, "round_interval", d.round_interval,
                            lambda v, k: _number(v, k, minimum=0)),
        min_peers=_get(t, s, "min_peers", d.min_peers, lambda v, k: _integer(v, k, minimum=0)),
        peer_wait=_get(t, s, "peer_wait", d.peer_wait, lambda v, k: _number(v, k, minimum=0)),
    )


def _parse_gossip(raw: object) -> GossipConfig:
    t = _table(raw, "gossip", _SECTION_KEYS["gossip"])  # type: ignore[arg-type]
    d = GossipConfig()
    s = "gossip"
    return GossipConfig(
        fanout=_get(t, s, "fanout", d.fanout, lambda v, k: _integer(v, k, minimum=1, maximum=64)),
        pushes_per_round=_get(t, s, "pushes_per_round", d.pushes_per_round,
                              lambda v, k: _integer(v, k, minimum=1, maximum=64)),
        privacy=_get(t, s, "privacy", d.privacy, lambda v, k: _choice(v, k, PRIVACY_MODES)),
        masked_pushes=_get(t, s, "masked_pushes", d.masked_pushes,
                           lambda v, k: _integer(v, k, minimum=1)),
        mask_std=_get(t, s, "mask_std", d.mask_std,
                      lambda v, k: _number(v, k, minimum=0, exclusive_min=True)),
        unmask_after=_get(t, s, "unmask_after", d.unmask_after,
                          lambda v, k: _integer(v, k, minimum=1)),
        push_timeout=_get(t, s, "push_timeout", d.push_timeout,
                          lambda v, k: _number(v, k, minimum=0, exclusive_min=True)),
    )


def _parse_peer_sampling(raw: object) -> PeerSamplingConfig:
    t = _table(raw, "peer_sampling", _SECTION_KEYS["peer_sampling"])  # type: ignore[arg-type]
    d = PeerSamplingConfig()
    s = "peer_sampling"
    view_size = _get(t, s, "view_size", d.view_size, lambda v, k: _integer(v, k, minimum=1))
    shuffle_length = _get(t, s, "shuffle_length", d.shuffle_length,
                          lambda v, k: _integer(v, k, minimum=1))
    if shuffle_length > view_size:
        raise ConfigError(
            f"peer_sampling.shuffle_length: {shuffle_length} exceeds peer_sampling.view_size "
            f"{view_size}; expected 1 <= shuffle_length <= view_size",
            key="peer_sampling.shuffle_length",
        )
    return PeerSamplingConfig(
        view_size=view_size,
        shuffle_length=shuffle_length,
        period=_get(t, s, "period", d.period,
                    lambda v, k: _number(v, k, minimum=0, exclusive_min=True)),
    )


def _parse_data(raw: object, base: Path | None, num_classes: int) -> DataConfig:
    t = _table(raw, "data", _SECTION_KEYS["data"])  # type: ignore[arg-type]
    d = DataConfig()
    s = "data"
    task = _get(t, s, "task", d.task, lambda v, k: _choice(v, k, DATA_TASKS))
    path = _get(t, s, "path", d.path, lambda v, k: _path(v, k, base))
    if task in ("npz", "idx") and path is None:
        form = ("an .npz file with arrays x, y (optional x_test, y_test)" if task == "npz"
                else "a directory holding MNIST-style IDX files")
        raise ConfigError(f'data.path: required when data.task = "{task}"; expected {form}',
                          key="data.path")
    num_nodes = _get(t, s, "num_nodes", d.num_nodes, lambda v, k: _integer(v, k, minimum=1))
    node_index = _get(t, s, "node_index", d.node_index, lambda v, k: _integer(v, k, minimum=0))
    if node_index >= num_nodes:
        raise ConfigError(
            f"data.node_index: {node_index} is not below data.num_nodes {num_nodes}; expected "
            f"0 <= node_index < num_nodes",
            key="data.node_index",
        )
    permutation = _get(t, s, "permutation", d.permutation, parse_permutation)
    for cycle in permutation:
        for label in cycle:
            if label >= num_classes:
                raise ConfigError(
                    f"data.permutation: label {label} does not exist; the output layer has "
                    f"{num_classes} classes (expected labels 0..{num_classes - 1})",
                    key="data.permutation",
                )
    return DataConfig(
        task=task,
        path=path,
        node_index=node_index,
        num_nodes=num_nodes,
        permutation=permutation,
        test_fraction=_get(t, s, "test_fraction", d.test_fraction,
                           lambda v, k: _number(v, k, minimum=0, maximum=1, exclusive_min=True,
                                                exclusive_max=True)),
        seed=_get(t, s, "seed", d.seed, lambda v, k: _integer(v, k, minimum=0)),
    )


def _parse_security(raw: object, base: Path | None) -> SecurityConfig:
    t = _table(raw, "security", _SECTION_KEYS["security"])  # type: ignore[arg-type]
    d = SecurityConfig()
    s = "security"
    return SecurityConfig(
        swarm_key_file=_get(t, s, "swarm_key_file", d.swarm_key_file,
                            lambda v, k: _path(v, k, base)),
        cipher=_get(t, s, "cipher", d.cipher, lambda v, k: _choice(v, k, CIPHERS)),
    )


def _parse_limits(raw: object) -> LimitsConfig:
    t = _table(raw, "limits", _SECTION_KEYS["limits"])  # type: ignore[arg-type]
    d = LimitsConfig()
    s = "limits"
    positive = lambda v, k: _number(v, k, minimum=0, exclusive_min=True)  # noqa: E731
    return LimitsConfig(
        max_connections=_get(t, s, "max_connections", d.max_connections,
                             lambda v, k: _integer(v, k, minimum=1)),
        max_frame_size=_get(t, s, "max_frame_size", d.max_frame_size,
                            lambda v, k: _integer(v, k, minimum=1024, maximum=2**31 - 1)),
        max_messages_per_second=_get(t, s, "max_messages_per_second",
                                     d.max_messages_per_second, positive),
        connect_timeout=_get(t, s, "connect_timeout", d.connect_timeout, positive),
        read_timeout=_get(t, s, "read_timeout", d.read_timeout, positive),
    )


def _parse_checkpoint(raw: object) -> CheckpointConfig:
    t = _table(raw, "checkpoint", _SECTION_KEYS["checkpoint"])  # type: ignore[arg-type]
    return CheckpointConfig(
        interval=_get(t, "checkpoint", "interval", CheckpointConfig().interval,
                      lambda v, k: _number(v, k, minimum=0, exclusive_min=True)),
    )


def config_from_dict(raw: Mapping[str, Any], *, base_dir: Path | None = None,
                     source: Path | None = None) -> NodeConfig:
    """Validate a parsed TOML document (nested dicts) into a :class:`NodeConfig`.

    ``base_dir`` resolves relative paths (the config file's directory).
    """
    top = ("node", "network", "models", "training", "gossip", "peer_sampling", "data",
           "security", "limits", "checkpoint")
    for key, value in raw.items():
        if key not in top:
            hint = _other_section_hint(key, "") or _did_you_mean(key, top)
            where = "section" if isinstance(value, dict | list) else "top-level key"
            raise ConfigError(f"{key}: unknown {where}{hint}; known sections: {', '.join(top)}",
                              key=key)
    network = _parse_network(raw.get("network", {}))
    models = _parse_models(raw.get("models", []), network.layers)
    return NodeConfig(
        node=_parse_node(raw.get("node", {}), base_dir),
        network=network,
        models=models,
        training=_parse_training(raw.get("training", {})),
        gossip=_parse_gossip(raw.get("gossip", {})),
        peer_sampling=_parse_peer_sampling(raw.get("peer_sampling", {})),
        data=_parse_data(raw.get("data", {}), base_dir, network.layers[-1]),
        security=_parse_security(raw.get("security", {}), base_dir),
        limits=_parse_limits(raw.get("limits", {})),
        checkpoint=_parse_checkpoint(raw.get("checkpoint", {})),
        source=source,
    )


def parse_config_text(text: str, *, base_dir: Path | None = None,
                      source: Path | None = None) -> NodeConfig:
    """Parse TOML text into a :class:`NodeConfig` (syntax errors become ConfigError)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}",
                          source=str(source) if source else None) from None
    try:
        return config_from_dict(raw, base_dir=base_dir, source=source)
    except ConfigError as exc:
        if source is not None and exc.source is None:
            raise ConfigError(str(exc), key=exc.key, source=str(source)) from None
        raise


def load_config(path: str | os.PathLike[str]) -> NodeConfig:
    """Read and validate the TOML config file at ``path``."""
    p = Path(path).expanduser()
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {p} is a directory; expected a TOML file") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {p}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError("invalid TOML: the file is not UTF-8 text", source=str(p)) from None
    return parse_config_text(text, base_dir=p.absolute().parent, source=p)


# --------------------------------------------------------------------------- writing


def config_to_dict(config: NodeConfig) -> dict[str, Any]:
    """The config as TOML-ready nested dicts of plain values (paths absolute,
    ``None`` values left out)."""
    def path(p: Path | None) -> str | None:
        return None if p is None else str(p)

    n, net, tr = config.node, config.network, config.training
    out: dict[str, Any] = {
        "node": {
            "name": n.name, "listen": str(n.listen),
            "advertise": None if n.advertise is None else str(n.advertise),
            "bootstrap": [str(b) for b in n.bootstrap], "data_dir": path(n.data_dir),
            "seed": n.seed, "log_format": n.log_format, "log_level": n.log_level,
        },
        "network": {"layers": net.layers_text, "activation": net.activation,
                    "cross_models": net.cross_models},
        "training": dataclasses.asdict(tr),
        "gossip": dataclasses.asdict(config.gossip),
        "peer_sampling": dataclasses.asdict(config.peer_sampling),
        "data": {
            "task": config.data.task, "path": path(config.data.path),
            "node_index": config.data.node_index, "num_nodes": config.data.num_nodes,
            "permutation": config.data.permutation_text,
            "test_fraction": config.data.test_fraction, "seed": config.data.seed,
        },
        "security": {"swarm_key_file": path(config.security.swarm_key_file),
                     "cipher": config.security.cipher},
        "limits": dataclasses.asdict(config.limits),
        "checkpoint": dataclasses.asdict(config.checkpoint),
        "models": [
            {"name": m.name, "neurons": m.neurons_text, "depends_on": list(m.depends_on),
             **({"kind": m.kind} if m.kind is not None else {})}
            for m in config.models
        ],
    }
    for section in out.values():
        if isinstance(section, dict):
            for key in [k for k, v in section.items() if v is None]:
                del section[key]
    return out


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        # JSON string escapes (\" \\ \n \uXXXX) are valid TOML basic-string escapes.
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def render_config_toml(config: NodeConfig) -> str:
    """Write ``config`` as a TOML document that :func:`load_config` reads back
    to an equal config."""
    d = config_to_dict(config)
    lines: list[str] = []
    for section in ("node", "network", "training", "gossip", "peer_sampling", "data",
                    "security", "limits", "checkpoint"):
        lines.append(f"[{section}]")
        for key, value in d[section].items():
            lines.append(f"{key} = {_toml_value(value)}")
        lines.append("")
    for model in d["models"]:
        lines.append("[[models]]")
        for key, value in model.items():
            lines.append(f"{key} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- swarm key


def generate_swarm_key() -> bytes:
    """32 fresh random bytes from the OS CSPRNG."""
    return secrets.token_bytes(SWARM_KEY_BYTES)


def encode_swarm_key(key: bytes) -> str:
    """The key file's content: standard base64 and a newline."""
    if len(key) != SWARM_KEY_BYTES:
        raise ValueError(f"a swarm key is {SWARM_KEY_BYTES} bytes, got {len(key)}")
    return base64.b64encode(key).decode("ascii") + "\n"


def load_swarm_key(path: str | os.PathLike[str]) -> bytes:
    """Read a swarm key file written by ``p2p keygen`` and return the 32 bytes.

    Raises :class:`SwarmKeyError` naming the file when it is missing, unreadable,
    not base64, or not 32 bytes long. Logs a warning when other users can read it.
    """
    p = Path(path).expanduser()
    key = "security.swarm_key_file"
    try:
        raw = p.read_bytes()
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise SwarmKeyError(f"swarm key file {p} does not exist (create one with "
                            "`p2p keygen --out FILE`)", key=key) from None
    except OSError as exc:
        raise SwarmKeyError(f"cannot read swarm key file {p}: {exc.strerror or exc}",
                            key=key) from None
    if len(raw) > 1024:
        raise SwarmKeyError(f"swarm key file {p} is {len(raw)} bytes; expected one line of "
                            f"base64 encoding {SWARM_KEY_BYTES} bytes", key=key)
    try:
        decoded = base64.b64decode(raw.strip(), validate=True)
    except (ValueError, TypeError):
        raise SwarmKeyError(f"swarm key file {p} is not valid base64; expected one line of "
                            f"base64 encoding {SWARM_KEY_BYTES} bytes (as `p2p keygen` writes)",
                            key=key) from None
    if len(decoded) != SWARM_KEY_BYTES:
        raise SwarmKeyError(f"swarm key file {p} holds {len(decoded)} bytes; expected "
                            f"{SWARM_KEY_BYTES} (as `p2p keygen` writes)", key=key)
    if mode & 0o077:
        logger.warning("swarm key file %s is readable by other users (mode %o); "
                       "consider chmod 600", p, mode & 0o777)
    return decoded
