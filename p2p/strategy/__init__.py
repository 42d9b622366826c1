"""Collaboration strategies a node can run (``[strategy]``): see :mod:`p2p.strategy.base`."""

from p2p.strategy.base import LossTerm, Strategy, StrategyHost

__all__ = ["LossTerm", "Strategy", "StrategyHost"]
