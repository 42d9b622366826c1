"""The default strategy: push-sum averaging of the partial models, as a node has always
done. The node does that averaging itself; this strategy adds nothing on top."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from p2p.strategies.base import LossTerm, StrategyHost

if TYPE_CHECKING:
    from p2p.config import NodeConfig

__all__ = ["PartialStrategy", "build"]


class PartialStrategy:
    """``strategy.name = "partial"``: no handler, no loss term, no background task."""

    name = "partial"

    def install(self, host: StrategyHost) -> None:
        """Nothing to register."""

    def loss_term(self) -> LossTerm | None:
        """No extra loss."""
        return None

    def after_round(self) -> None:
        """Nothing to do after a round."""

    async def run(self) -> None:
        """No background task."""

    def status(self) -> Mapping[str, object]:
        """Only the name."""
        return {"name": self.name}


def build(config: NodeConfig) -> PartialStrategy:
    """The registry's factory."""
    return PartialStrategy()
