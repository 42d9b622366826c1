"""The toy on a node: answers asks, asks sampled peers every ``toy_period`` seconds."""

from __future__ import annotations

from collections.abc import Mapping

import trio
from toy_strategy.maths import running_mean
from toy_strategy.messages import ToyAsk, ToyTell
from toy_strategy.settings import ToyKeys

from p2p.config import NodeConfig
from p2p.strategies.base import LossTerm, StrategyHost
from p2p.wire.handshake import PeerInfo


class ToyStrategy:
    """Keeps the running mean of the rounds its peers say they trained."""

    name = "toy"

    def __init__(self, keys: ToyKeys) -> None:
        self.keys = keys
        self.host: StrategyHost | None = None
        self.asked = self.told = self.after_rounds = 0
        self.mean_rounds = 0.0

    def install(self, host: StrategyHost) -> None:
        self.host = host
        host.requests.add(ToyAsk, self._serve)

    async def _serve(self, peer: PeerInfo, msg: ToyAsk) -> ToyTell:
        assert self.host is not None
        self.asked += 1
        return ToyTell(self.host.rounds_done())

    def loss_term(self) -> LossTerm | None:
        return None

    def after_round(self) -> None:
        self.after_rounds += 1

    async def run(self) -> None:
        assert self.host is not None
        while True:
            for peer in self.host.sample_peers(self.keys.toy_peers):
                reply = await self.host.request(peer, ToyAsk(self.host.rounds_done()), ToyTell)
                if reply is not None:
                    self.mean_rounds = running_mean(self.mean_rounds, self.told, reply.rounds)
                    self.told += 1
            await trio.sleep(self.keys.toy_period)

    def status(self) -> Mapping[str, object]:
        return {"asked": self.asked, "told": self.told, "after_rounds": self.after_rounds,
                "mean_rounds": round(self.mean_rounds, 3)}


def build(config: NodeConfig) -> ToyStrategy:
    """The plug-in's factory: the ``strategy.toy_*`` keys."""
    return ToyStrategy(config.strategy.of(ToyKeys))
