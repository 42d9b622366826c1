"""Collaboration strategies a node can run (``[strategy]``): see :mod:`p2p.strategy.base`."""

from p2p.strategy.base import LossTerm, Strategy, StrategyHost
from p2p.strategy.registry import STRATEGIES, STRATEGY_NAMES, build_strategy

__all__ = ["STRATEGIES", "STRATEGY_NAMES", "LossTerm", "Strategy", "StrategyHost",
           "build_strategy"]
