"""Strategy name -> where its factory lives; builds the strategy a config names.

One line per strategy in :data:`STRATEGIES`: ``"name": "module:factory"``, the
factory being ``factory(config: NodeConfig) -> Strategy`` (tests may register a
factory object directly, e.g. ``monkeypatch.setitem(STRATEGIES, "fake", build)``). The
factory is
imported only when a node builds that strategy, so this module imports nothing
of the project: the config schema reads :data:`STRATEGY_NAMES` from it to
validate ``strategy.name`` without importing any strategy (or torch).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["STRATEGIES", "STRATEGY_NAMES", "StrategyFactory", "build_strategy"]

#: Builds a strategy (:class:`p2p.strategy.base.Strategy`) from the node's whole
#: configuration (:class:`p2p.config.NodeConfig`); typed loosely here because the
#: config schema imports this module (no import cycle, tests/test_import_cycles.py).
StrategyFactory = Callable[[Any], Any]

#: ``strategy.name`` -> ``"module:factory"`` (or the factory itself).
STRATEGIES: dict[str, str | StrategyFactory] = {
    "partial": "p2p.strategy.partial:build",
    "fedcurv": "p2p.strategy.fedcurv:build",
    "fedlinked": "p2p.strategy.fedlinked:build",
    "graph": "p2p.strategy.graph:build",
}

#: What ``strategy.name`` accepts.
STRATEGY_NAMES: tuple[str, ...] = tuple(STRATEGIES)


def build_strategy(config: Any) -> Any:
    """The strategy ``config.strategy.name`` names, built from ``config``.

    An unknown name is a :class:`~p2p.config.ConfigError` on ``strategy.name``
    listing the known names.
    """
    # here, not at the top: importing p2p.config first would run the schema, which
    # imports this module for STRATEGY_NAMES
    from p2p.config.errors import ConfigError

    name = config.strategy.name
    where = STRATEGIES.get(name)
    if where is None:
        known = ", ".join(repr(n) for n in STRATEGY_NAMES)
        raise ConfigError(f"strategy.name: unknown strategy {name!r}; expected one of {known}",
                          key="strategy.name")
    if isinstance(where, str):
        module, _, attr = where.partition(":")
        factory: StrategyFactory = getattr(importlib.import_module(module), attr)
    else:
        factory = where
    strategy = factory(config)
    return strategy
