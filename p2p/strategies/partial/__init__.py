"""``partial``, the default: push-sum averaging of the partial models, nothing added
(no keys, no messages, no maths; :mod:`p2p.strategies.partial.node`)."""

from p2p.strategies.base import StrategyPlugin

__all__ = ["PLUGIN"]

PLUGIN = StrategyPlugin(
    name="partial",
    summary="push-sum averaging of the partial models alone",
    with_dp=True,
    with_user_code=True,
    build="p2p.strategies.partial.node:build",
)
