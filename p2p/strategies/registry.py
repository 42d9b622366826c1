"""Strategy name -> its folder's plug-in; builds the strategy a config names.

One line per strategy in :data:`STRATEGIES`: ``"name": "package:PLUGIN"``, the
:class:`~p2p.strategies.base.StrategyPlugin` its folder's ``__init__.py`` declares
(tests may register one directly, e.g. ``monkeypatch.setitem(STRATEGIES, "toy",
plugin)``). :data:`STRATEGY_TABLE` reads that dict live: ``p2p/__init__.py``
injects it into the config (the plug-ins' keys and checks), the node registers
:func:`strategy_messages` and :func:`build_strategy` imports a strategy's node side
(torch) only when a node runs it. Resolving a plug-in imports its settings and
messages, never torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from p2p.config.errors import ConfigError
from p2p.strategies.base import Strategy, StrategyPlugin

if TYPE_CHECKING:
    from p2p.config import NodeConfig
    from p2p.wire.codec import WireMessage

__all__ = ["STRATEGIES", "STRATEGY_TABLE", "build_strategy", "strategy_messages"]

#: ``strategy.name`` -> ``"package:PLUGIN"`` (or the plug-in itself).
STRATEGIES: dict[str, str | StrategyPlugin] = {
    "partial": "p2p.strategies.partial:PLUGIN",
    "fedcurv": "p2p.strategies.fedcurv:PLUGIN",
    "fedlinked": "p2p.strategies.fedlinked:PLUGIN",
    "graph": "p2p.strategies.graph:PLUGIN",
}


class _Table(Mapping[str, StrategyPlugin]):
    """:data:`STRATEGIES` with each line resolved to its plug-in (read live)."""

    def __getitem__(self, name: str) -> StrategyPlugin:
        where = STRATEGIES[name]
        if isinstance(where, str):
            module, _, attr = where.partition(":")
            where = getattr(importlib.import_module(module), attr)
        if not isinstance(where, StrategyPlugin) or where.name != name:
            raise TypeError(f"STRATEGIES[{name!r}] is no StrategyPlugin named {name!r}")
        return where

    def __contains__(self, name: object) -> bool:
        return name in STRATEGIES

    def __iter__(self) -> Iterator[str]:
        return iter(STRATEGIES)

    def __len__(self) -> int:
        return len(STRATEGIES)


#: Strategy name -> its plug-in, for every line of :data:`STRATEGIES`.
STRATEGY_TABLE: Mapping[str, StrategyPlugin] = _Table()


def strategy_messages() -> tuple[WireMessage, ...]:
    """The wire messages of every registered strategy (a node speaks them all)."""
    return tuple(m for plugin in STRATEGY_TABLE.values() for m in plugin.messages)


def build_strategy(config: NodeConfig) -> Strategy:
    """The strategy ``config.strategy.name`` names, built from ``config``.

    An unknown name is a :class:`~p2p.config.ConfigError` on ``strategy.name``
    listing the known names.
    """
    name = config.strategy.name
    if name not in STRATEGIES:
        known = ", ".join(repr(n) for n in STRATEGIES)
        raise ConfigError(f"strategy.name: unknown strategy {name!r}; expected one of {known}",
                          key="strategy.name")
    return STRATEGY_TABLE[name].factory()(config)
