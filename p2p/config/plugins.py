"""Plug-in sections: the keys a plug-in family declares, injected into the schema.

A family (the collaboration strategies, :mod:`p2p.strategies`) owns one section,
``[strategy]``: ``name`` picks the plug-in, and every plug-in adds its own keys,
prefixed by its name (``fedcurv_lambda``) and read only when it runs. Each plug-in
describes itself with a :class:`PluginSection` (its settings dataclass, declared
with :func:`~p2p.config.kinds.setting`, and its checks across sections); the
family's registry hands its live table to :func:`use_strategies` (``p2p/__init__.py``
does, before any config is read). The config never imports a plug-in, and a plug-in
added to the registry brings its keys, checks and reference rows with it
(docs/design/architecture.md, "Plug-in families").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from p2p.config.errors import ConfigError
from p2p.config.kinds import Choice, Setting, settings_of

__all__ = ["PluginSection", "StrategyConfig", "strategy_plugins", "use_strategies"]

_T = TypeVar("_T")
#: The whole config a plug-in's check reads (:class:`~p2p.config.NodeConfig`; generic
#: here because the schema imports this module).
C = TypeVar("C")


@dataclass(frozen=True, kw_only=True)
class PluginSection(Generic[C]):
    """What one plug-in declares to the config.

    ``settings``: a frozen dataclass of its keys (each field declared with
    ``setting``, named ``<name>_...``), or None when it has none. ``summary``:
    what ``strategy.name = "<name>"`` means, for the reference. ``check``: checks
    across sections (raises :class:`ConfigError` naming the key), run when the
    whole config (:class:`~p2p.config.NodeConfig`) naming this plug-in is built. ``with_dp``:
    whether it may run under DP-SGD (its loss and exchanges are accounted for).
    ``with_user_code``: whether it runs on the user's module or datasets
    (``network.factory``, ``data.factory``), not only on a notation network and a
    task's arrays (:mod:`p2p.config.factories`).
    """

    name: str
    summary: str
    settings: type | None = None
    check: Callable[[C], None] | None = None
    with_dp: bool = False
    with_user_code: bool = False


_strategies: list[Mapping[str, PluginSection[Any]]] = [{}]


def use_strategies(table: Mapping[str, PluginSection[Any]]) -> None:
    """Inject the strategies' table (live: a plug-in added to it later is seen)."""
    _strategies[0] = table


def strategy_plugins() -> Mapping[str, PluginSection[Any]]:
    """The injected strategies' table (empty until :func:`use_strategies`)."""
    return _strategies[0]


def _owners(table: Mapping[str, PluginSection[Any]]) -> dict[str, tuple[str, Setting]]:
    """Every plug-in key -> (its plug-in, its declaration); a key outside its plug-in's
    prefix or declared twice is a bug of that plug-in (ValueError)."""
    owners: dict[str, tuple[str, Setting]] = {}
    for name, plugin in table.items():
        if plugin.settings is None:
            continue
        for key, declared in settings_of(plugin.settings).items():
            if not key.startswith(f"{name}_") or key in owners:
                raise ValueError(f"strategy {name!r}: key {key!r} must be new and start with "
                                 f"{name + '_'!r}")
            owners[key] = (name, declared)
    return owners


@dataclass(frozen=True, init=False)
class StrategyConfig:
    """``[strategy]``: what collaboration adds on top of local SGD (:mod:`p2p.strategies`).

    ``name`` picks the scheme; ``plugins`` holds the settings of every registered
    scheme (its defaults unless given). Built as before from the flat keys
    (``StrategyConfig(name="fedcurv", fedcurv_lambda=10.0)``), which also read as
    attributes (``config.strategy.fedcurv_lambda``); a scheme's code reads its own
    settings typed, with :meth:`of`.
    """

    name: str
    plugins: tuple[Any, ...]

    def __init__(self, name: str = "partial", plugins: tuple[Any, ...] = (),
                 **keys: Any) -> None:
        table = strategy_plugins()
        if name not in table:
            known = ", ".join(repr(n) for n in table)
            raise ConfigError(f"strategy.name: unknown strategy {name!r}; expected one of "
                              f"{known}", key="strategy.name")
        owners = _owners(table)
        values = {key: getattr(p, key) for p in plugins for key in settings_of(type(p))
                  if key in owners}
        for key, value in keys.items():
            if key not in owners:
                raise TypeError(f"StrategyConfig: unknown key {key!r}")
            values[key] = value
        built = []
        for plugin_name, plugin in table.items():
            if plugin.settings is not None:
                mine = {k: v for k, v in values.items() if owners[k][0] == plugin_name}
                built.append(plugin.settings(**mine))
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "plugins", tuple(built))

    @classmethod
    def composed_settings(cls) -> dict[str, Setting]:
        """The section's keys: ``name``, then every registered plug-in's (the document
        reads and writes them through :func:`~p2p.config.kinds.settings_of`)."""
        table = strategy_plugins()
        name = Setting(Choice(tuple(table)), "; ".join(f'"{n}": {p.summary}'
                                                       for n, p in table.items()), "name")
        return {"name": name, **{k: s for k, (_, s) in _owners(table).items()}}

    def with_keys(self, **keys: Any) -> StrategyConfig:
        """A copy with these keys (``name`` too) changed (``dataclasses.replace`` does
        the same, untyped)."""
        return StrategyConfig(keys.pop("name", self.name), self.plugins, **keys)

    def of(self, settings: type[_T]) -> _T:
        """This config's settings of the plug-in whose settings class is ``settings``."""
        for p in self.plugins:
            if isinstance(p, settings):
                return p
        raise KeyError(f"{settings.__name__} is no registered strategy's settings")

    def __getattr__(self, key: str) -> Any:
        if not key.startswith("_") and key != "plugins":
            for p in self.plugins:
                if key in {f.name for f in dataclasses.fields(p)}:
                    return getattr(p, key)
        raise AttributeError(f"[strategy] has no key {key!r}")
