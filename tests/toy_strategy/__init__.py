"""``toy``: a strategy added the way any is, one folder and one registry line (the
acceptance test of issue 29, tests/p2p/strategies/test_toy_strategy.py, registers it
as ``"toy": "toy_strategy:PLUGIN"``).

Each node asks sampled peers how many rounds they trained and keeps the running
mean of the answers: a key of its own (``toy_period``, ``toy_peers``), a check
across sections, two wire messages, a maths function and a node side.
"""

from toy_strategy.messages import TOY_MESSAGES
from toy_strategy.settings import ToyKeys, check

from p2p.strategies.base import StrategyPlugin

__all__ = ["PLUGIN", "ToyKeys"]

PLUGIN = StrategyPlugin(
    name="toy",
    summary="asks peers how far they trained (a test's strategy)",
    settings=ToyKeys,
    check=check,
    with_dp=False,
    messages=TOY_MESSAGES,
    build="toy_strategy.node:build",
)
