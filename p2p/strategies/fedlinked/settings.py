"""FedLinked's ``[strategy]`` keys (``fedlinked_*``) and what it refuses across sections."""

from __future__ import annotations

from dataclasses import dataclass

from p2p.config import ConfigError, NodeConfig
from p2p.config.kinds import Integer, Number, setting

__all__ = ["FedLinkedKeys", "check"]


@dataclass(frozen=True)
class FedLinkedKeys:
    """The ``strategy.fedlinked_*`` keys."""

    fedlinked_weight: float = setting(0.3, Number(minimum=0),
                                      "fedlinked: weight (>= 0) of the distillation loss, the "
                                      "squared distance of the node's representation to its "
                                      "target on a batch of public samples")
    fedlinked_eta: float = setting(1.0, Number(above=0),
                                   "fedlinked: the report's eta (> 0): the node's utilities are "
                                   "scaled so that their squares sum to it")
    fedlinked_sharpness: float = setting(32.0, Number(minimum=1),
                                         "fedlinked: the target weighs each known peer by "
                                         "utility ** sharpness (>= 1; 1: the report's weights)")
    fedlinked_peers: int = setting(3, Integer(minimum=1, maximum=64),
                                   "fedlinked: peers pulled from the peer-sampling view at each "
                                   "refresh (1 to 64)")
    fedlinked_every: int = setting(2, Integer(minimum=1),
                                   "fedlinked: rounds between two refreshes of the target (>= 1)")
    fedlinked_warmup: int = setting(10, Integer(minimum=0),
                                    "fedlinked: rounds of plain local training before the first "
                                    "refresh (>= 0)")
    fedlinked_cache: int = setting(16, Integer(minimum=1, maximum=1024),
                                   "fedlinked: peers whose latest representation is kept (1 to "
                                   "1024; the oldest goes first)")
    fedlinked_public_batch: int = setting(32, Integer(minimum=1),
                                          "fedlinked: public samples per distillation batch "
                                          "(>= 1)")


def check(config: NodeConfig) -> None:
    """FedLinked sends no parameters: declared partial models would never be shared."""
    if config.models:
        raise ConfigError(
            'strategy.name: "fedlinked" sends no parameters, but this config declares '
            f"{len(config.models)} partial model(s) ([[models]]); remove them (all-local "
            "layout)", key="strategy.name")
