"""The collaboration graph's ``[strategy]`` keys (``graph_*``) and what it refuses across
sections; the defaults are the maths' own (:class:`~p2p.strategies.graph.maths.GraphParams`)."""

from __future__ import annotations

from dataclasses import dataclass

from p2p.config import ConfigError, NodeConfig, push_frame_bytes
from p2p.config.kinds import Integer, Number, setting
from p2p.strategies.graph.maths import GraphParams

__all__ = ["GraphKeys", "check"]


@dataclass(frozen=True)
class GraphKeys:
    """The ``strategy.graph_*`` keys."""

    graph_mu: float = setting(GraphParams.mu, Number(above=0),
                              "graph: mu (> 0), smoothness of the models along the learned "
                              "graph against the local losses")
    graph_beta: float = setting(GraphParams.beta, Number(above=0),
                                "graph: beta (> 0), L2 penalty on the edge weights (smaller: "
                                "sparser graph)")
    graph_delta: float = setting(GraphParams.delta, Number(above=0),
                                 "graph: delta (> 0), offset of the log barrier on the degrees")
    graph_kappa: int = setting(GraphParams.kappa, Integer(minimum=1, maximum=64),
                               "graph: peers sampled, pulled and whose edges are updated per "
                               "wake-up (1 to 64)")
    graph_local_lipschitz: float = setting(GraphParams.local_lipschitz, Number(minimum=0),
                                           "graph: L_loc (>= 0); a wake-up moves the model mu / "
                                           "(mu + c L_loc) of the way to its neighbours' "
                                           "weighted mean (0: all the way)")
    graph_neighbours: int = setting(GraphParams.max_neighbours, Integer(minimum=1, maximum=64),
                                    "graph: heaviest neighbours a node pulls and mixes with at "
                                    "each wake-up (1 to 64)")
    graph_max_edges: int = setting(GraphParams.max_edges, Integer(minimum=1, maximum=4096),
                                   "graph: edges a node keeps, the lightest dropped beyond (1 to "
                                   "4096, at least `graph_neighbours`)")
    graph_period: float = setting(1.0, Number(minimum=0.01),
                                  "graph: mean seconds between wake-ups (Poisson clock; >= 0.01)")
    graph_epsilon: float = setting(0.0, Number(minimum=0),
                                   "graph: epsilon of the Laplace noise on each released model "
                                   "(0: no noise); spent: releases x epsilon")
    graph_epsilon_budget: float = setting(0.0, Number(minimum=0),
                                          "graph: the node stops waking once one more release "
                                          "would spend more than this (0: no budget)")
    graph_sensitivity: float = setting(1.0, Number(minimum=0),
                                       "graph: L0 of the noise scale s = L0 / (epsilon m), m the "
                                       "shard size (nominal for SGD-trained networks)")
    graph_confidence_samples: int = setting(1000, Integer(minimum=1),
                                            "graph: shard size at which the confidence c = "
                                            "min(1, m / this) reaches 1")


def check(config: NodeConfig) -> None:
    """The graph mixes whole models itself (no declared models), compares outputs on the
    public split, keeps at least the edges it mixes with, and sends whole models
    (float32) in one frame."""
    if config.models:
        raise ConfigError(
            'strategy.name: "graph" mixes whole models itself, but this config declares '
            f"{len(config.models)} partial model(s) ([[models]]); remove them (all-local "
            "layout)", key="strategy.name")
    if config.data.public_size == 0:
        raise ConfigError('strategy.name: "graph" compares outputs on the task\'s public '
                          "split, but data.public_size is 0; set data.public_size (e.g. "
                          "200)", key="data.public_size")
    s = config.strategy.of(GraphKeys)
    if s.graph_max_edges < s.graph_neighbours:
        raise ConfigError(f"strategy.graph_max_edges: {s.graph_max_edges} is "
                          "fewer than strategy.graph_neighbours = "
                          f"{s.graph_neighbours}; expected at least as many",
                          key="strategy.graph_max_edges")
    parameters = config.layout().total_parameters
    need = push_frame_bytes(parameters)
    if config.limits.max_frame_size < need:
        raise ConfigError(
            f"limits.max_frame_size: {config.limits.max_frame_size} bytes cannot carry a "
            f'"graph" reply of the whole network ({parameters:,} parameters; needs '
            f"{need:,} bytes); raise it or use a smaller network",
            key="limits.max_frame_size")
