"""Build a node's learning side (network, data, trainer) from its configuration.

Kept apart from the runtime so the same construction serves the daemon, the
swarm script's reference comparison and the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from learner import (
    DataSpec,
    ModelLayout,
    NetworkSpec,
    NodeData,
    PartialMLP,
    PartialModelSpec,
    TrainConfig,
    Trainer,
    load_node_data,
)
from p2p.config import ConfigError, NodeConfig


@dataclass(frozen=True, eq=False)
class LearningSetup:
    """Everything the trainer task owns."""

    layout: ModelLayout
    network: PartialMLP
    data: NodeData
    trainer: Trainer
    fingerprints: dict[str, bytes]  # shared model name -> fingerprint


def network_spec(config: NodeConfig) -> NetworkSpec:
    return NetworkSpec(sizes=tuple(config.network.layers), activation=config.network.activation)


def model_specs(config: NodeConfig) -> list[PartialModelSpec]:
    return [
        PartialModelSpec(name=m.name, counts=tuple(m.neurons), depends_on=tuple(m.depends_on),
                         kind=m.kind)
        for m in config.models
    ]


def build_learning(config: NodeConfig) -> LearningSetup:
    """Network, data and trainer for ``config``; errors name the config key."""
    try:
        layout = ModelLayout(network_spec(config), model_specs(config),
                             cross_models=config.network.cross_models)
    except ValueError as exc:
        raise ConfigError(f"models: {exc}") from exc
    d = config.data
    spec = DataSpec(
        task=d.task,
        path=None if d.path is None else str(d.path),
        node_index=d.node_index,
        num_nodes=d.num_nodes,
        permutation=d.learner_permutation,
        seed=d.seed,
        test_fraction=d.test_fraction,
    )
    data = load_node_data(spec)
    sizes = layout.network.sizes
    if data.num_features != sizes[0] or data.num_classes != sizes[-1]:
        raise ConfigError(
            f"network.layers: the task {d.task!r} has {data.num_features} features and "
            f"{data.num_classes} classes, so layers must start with {data.num_features} and end "
            f"with {data.num_classes}; got {'='.join(map(str, sizes))}"
        )
    torch.manual_seed(config.node.seed)
    network = PartialMLP(layout, seed=config.node.seed)
    t = config.training
    train_config = TrainConfig(
        lr=t.lr, batch_size=t.batch_size, steps_per_round=t.steps_per_round,
        optimizer=t.optimizer, momentum=t.momentum, seed=config.node.seed,
    )
    trainer = Trainer(network, data.train_x, data.train_y, train_config)
    fingerprints = {name: layout.fingerprint(name) for name in layout.shared_models}
    return LearningSetup(layout, network, data, trainer, fingerprints)
