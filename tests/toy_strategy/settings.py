"""The toy's ``[strategy]`` keys and its check across sections."""

from __future__ import annotations

from dataclasses import dataclass

from p2p.config import ConfigError, NodeConfig
from p2p.config.kinds import Integer, Number, setting


@dataclass(frozen=True)
class ToyKeys:
    """The ``strategy.toy_*`` keys."""

    toy_period: float = setting(0.05, Number(above=0), "toy: seconds between two asks")
    toy_peers: int = setting(1, Integer(minimum=1, maximum=8), "toy: peers asked each time")


def check(config: NodeConfig) -> None:
    """The toy asks how far peers trained: a node that trains for ever has no end to it."""
    if config.training.rounds == 0:
        raise ConfigError('training.rounds: 0 (until stopped) with strategy "toy"; expected '
                          "a number of rounds", key="training.rounds")
