"""FedCurv's ``[strategy]`` keys (``fedcurv_*``) and what it refuses across sections."""

from __future__ import annotations

from dataclasses import dataclass

from p2p.config import ConfigError, NodeConfig
from p2p.config.kinds import Integer, Number, setting

__all__ = ["FedCurvKeys", "check"]


@dataclass(frozen=True)
class FedCurvKeys:
    """The ``strategy.fedcurv_*`` keys."""

    fedcurv_lambda: float = setting(1.0, Number(minimum=0),
                                    "fedcurv: weight lambda (>= 0) of the penalty lambda x sum "
                                    "over the other holders j of (w - w_j)' diag(F_j) (w - w_j)")
    fedcurv_every: int = setting(2, Integer(minimum=1),
                                 "fedcurv: rounds a generation of the gossiped sums lasts on "
                                 "this node (>= 1); each generation starts afresh with a new "
                                 "estimate of its diagonal Fisher (a node also enters a newer "
                                 "generation as soon as it hears of one); 2 did best in our "
                                 "runs ([results](../results/strategies.md#fedcurv))")
    fedcurv_samples: int = setting(128, Integer(minimum=1, maximum=100_000),
                                   "fedcurv: training samples the Fisher diagonal is estimated "
                                   "on (1 to 100000, at most the shard)")


def check(config: NodeConfig) -> None:
    """FedCurv's sums travel in clear, which masking would not hide."""
    if config.gossip.masking == "masked":
        raise ConfigError(
            'strategy.name: "fedcurv" gossips Fisher-weighted parameters in clear, '
            f"which gossip.privacy {config.gossip.privacy!r} would not hide; use privacy "
            '"none" with fedcurv', key="strategy.name")
