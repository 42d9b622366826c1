"""A node's config as a TOML document: reading it into a :class:`NodeConfig`, writing it back.

Everything here is derived from the schema (:mod:`p2p.config.schema`): the
known sections and keys, the "did you mean" hints, the order and form of the
written document.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from learner.module_spec import ModuleModelSpec
from learner.spec import PartialModelSpec, SpecError
from p2p.config.errors import ConfigError, did_you_mean, show
from p2p.config.kinds import Context, Setting, dump_table, parse_table, settings_of
from p2p.config.learning import (
    _MODEL_REQUIRED,
    FACTORY_DATA_UNUSED,
    MODEL_KEYS,
    MODULE_MODEL_KEYS,
)
from p2p.config.schema import NodeConfig, model_error

__all__ = [
    "SECTION_KEYS",
    "config_from_dict",
    "config_to_dict",
    "load_config",
    "parse_config_text",
    "render_config_toml",
    "toml_value",
]

#: Section name -> the dataclass holding it (every field of NodeConfig but ``models``).
_SECTIONS: dict[str, type] = {
    # each section field's default_factory is its dataclass; the stubs only know
    # "a factory or MISSING"
    f.name: f.default_factory  # type: ignore[misc]
    for f in dataclasses.fields(NodeConfig)
    if f.name not in ("models", "source")
}
_TOP = tuple(f.name for f in dataclasses.fields(NodeConfig) if f.name != "source")


def _keys(section: str) -> dict[str, Setting]:
    return MODEL_KEYS if section == "models" else settings_of(_SECTIONS[section])


class _SectionKeys(Mapping[str, tuple[str, ...]]):
    """Section -> its known keys, read when asked: ``[strategy]``'s come from the
    plug-ins registered at that moment (:mod:`p2p.config.plugins`)."""

    def __getitem__(self, section: str) -> tuple[str, ...]:
        if section not in _TOP:
            raise KeyError(section)
        return tuple(_keys(section))

    def __iter__(self) -> Iterator[str]:
        return iter(_TOP)

    def __len__(self) -> int:
        return len(_TOP)


#: Section -> its known keys (``models`` for one ``[[models]]`` entry), in order.
SECTION_KEYS: Mapping[str, tuple[str, ...]] = _SectionKeys()


def _other_section_hint(key: str, section: str) -> str:
    """Point at the section a misplaced key belongs to."""
    for name, keys in SECTION_KEYS.items():
        if key in keys and name != section and not section.startswith(name + "["):
            where = "[[models]]" if name == "models" else f"[{name}]"
            return f" (it belongs in {where})"
    return ""


def _table(raw: object, section: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    """Check ``raw`` is a table with only ``allowed`` keys; return it."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{section}: expected a table [{section}], got {show(raw)}",
                          key=section)
    for key in raw:
        if key not in allowed:
            hint = did_you_mean(key, allowed) or _other_section_hint(key, section)
            raise ConfigError(f"{section}.{key}: unknown key{hint}; known keys of [{section}]: "
                              f"{', '.join(allowed)}", key=f"{section}.{key}")
    return raw


def _parse_models(raw: object, ctx: Context
                  ) -> tuple[PartialModelSpec | ModuleModelSpec, ...]:
    if not isinstance(raw, list):
        raise ConfigError(f"models: expected an array of tables written [[models]], got "
                          f"{show(raw)}", key="models")
    specs: list[PartialModelSpec | ModuleModelSpec] = []
    for i, entry in enumerate(raw):
        where = f"models[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a table written [[models]], got {show(entry)}",
                              key=where)
        table = _table(entry, where, SECTION_KEYS["models"])
        module = [k for k in MODULE_MODEL_KEYS if k in table]
        if module and "neurons" in table:
            raise ConfigError(f"{where}.{module[0]}: a model gives neurons (a notation network) "
                              f"or {' and '.join(MODULE_MODEL_KEYS[:2])} (a network.factory "
                              "module), not both", key=f"{where}.{module[0]}")
        for required in _MODEL_REQUIRED if not module else ("name",):
            if required not in table:
                raise ConfigError(f"{where}.{required}: missing; every [[models]] entry needs "
                                  'name (e.g. "global") and neurons (e.g. "64-40-24-10"), or '
                                  'with network.factory params (e.g. ["features.*"]) or units',
                                  key=f"{where}.{required}")
        values = parse_table(MODEL_KEYS, table, where, ctx)
        try:
            specs.append(ModuleModelSpec(**values) if module else PartialModelSpec(**values))
        except SpecError as exc:
            exc.index = i
            raise model_error(exc, specs) from None
    return tuple(specs)


def config_from_dict(raw: Mapping[str, Any], *, base_dir: Path | None = None,
                     source: Path | None = None) -> NodeConfig:
    """Validate a parsed TOML document (nested dicts) into a :class:`NodeConfig`.

    ``base_dir`` resolves relative paths (the config file's directory).
    """
    for key, value in raw.items():
        if key not in _TOP:
            hint = _other_section_hint(key, "") or did_you_mean(key, _TOP)
            where = "section" if isinstance(value, dict | list) else "top-level key"
            raise ConfigError(f"{key}: unknown {where}{hint}; known sections: {', '.join(_TOP)}",
                              key=key)
    ctx = Context(base_dir=base_dir)
    parts: dict[str, Any] = {}
    for name in _TOP:  # in declaration order: network (and its classes) before data
        if name == "models":
            parts[name] = _parse_models(raw.get(name, []), ctx)
            continue
        cls = _SECTIONS[name]
        table = _table(raw.get(name, {}), name, SECTION_KEYS[name])
        parts[name] = cls(**parse_table(_keys(name), table, name, ctx))
        if name == "network":
            # the output layer's size; a factory's classes come from the data
            classes = None if parts[name].factory is not None else parts[name].layers[-1]
            ctx = dataclasses.replace(ctx, num_classes=classes)
    return NodeConfig(**parts, source=source)


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
    """The config as TOML-ready nested dicts of plain values (``None`` values left out)."""
    out: dict[str, Any] = {}
    for name in _TOP:
        if name == "models":
            out[name] = [dump_table({k: s for k, s in MODEL_KEYS.items() if hasattr(m, s.attr)},
                                    m) for m in config.models]
        else:
            out[name] = dump_table(_keys(name), getattr(config, name))
    # keys the user's code replaces are not written (their defaults are all they may hold)
    if config.network.factory is not None:
        for key in ("layers", "activation", "cross_models"):
            out["network"].pop(key, None)
    if config.data.factory is not None:
        for key in FACTORY_DATA_UNUSED:
            out["data"].pop(key, None)
    return out


def toml_value(value: object) -> str:
    """``value`` (a plain value of :func:`config_to_dict`) written as TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        # JSON string escapes (backslash-quote, -backslash, -n, -uXXXX) are valid in TOML strings.
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):  # an inline table (a model's units per layer)
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}"
                               for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def render_config_toml(config: NodeConfig) -> str:
    """Write ``config`` as a TOML document that :func:`load_config` reads back
    to an equal config ([[models]] last, so every plain section comes first)."""
    d = config_to_dict(config)
    lines: list[str] = []
    tables = [(f"[{name}]", d[name]) for name in _TOP if name != "models"]
    tables += [("[[models]]", model) for model in d["models"]]
    for header, table in tables:
        lines.append(header)
        lines.extend(f"{key} = {toml_value(value)}" for key, value in table.items())
        lines.append("")
    return "\n".join(lines)
