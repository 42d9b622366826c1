"""Collaboration strategies a node can run (``[strategy]``): one folder each, see
:mod:`p2p.strategies.base`; :mod:`p2p.strategies.registry` names them."""

from p2p.strategies.base import (
    LossTerm,
    OutOfStep,
    Strategy,
    StrategyFactory,
    StrategyHost,
    StrategyPlugin,
    ValueCheck,
)
from p2p.strategies.registry import (
    STRATEGIES,
    STRATEGY_TABLE,
    build_strategy,
    strategy_messages,
)

__all__ = ["STRATEGIES", "STRATEGY_TABLE", "LossTerm", "OutOfStep", "Strategy",
           "StrategyFactory", "StrategyHost", "StrategyPlugin", "ValueCheck", "build_strategy",
           "strategy_messages"]
