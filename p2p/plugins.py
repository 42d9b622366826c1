"""Where the plug-in families meet the config: the strategies' registry is injected here.

``p2p/__init__.py`` imports this module first, so the table is in place before
any config is read; the config itself never imports a plug-in
(:mod:`p2p.config.plugins`, tests/test_layering.py).
"""

from p2p.config.plugins import use_strategies
from p2p.strategies.registry import STRATEGY_TABLE

__all__: list[str] = []

use_strategies(STRATEGY_TABLE)
