"""Build a node's learning side (network, data, trainer) from its configuration.

Kept apart from the runtime so the same construction serves the daemon, the
swarm script's reference comparison and the tests. The config has already
built (and so validated) the learner's spec objects; this adds what needs
torch or the data on disk.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from learner import ModelLayout, NetworkSpec, NodeData, PartialModelSpec, load_node_data
from learner.network import PartialMLP
from learner.tasks import TaskShape
from learner.trainer import Trainer
from p2p.config import NodeConfig, task_mismatch


@dataclass(frozen=True, eq=False)
class LearningSetup:
    """Everything the trainer task owns."""

    layout: ModelLayout
    network: PartialMLP
    data: NodeData
    trainer: Trainer
    fingerprints: dict[str, bytes]  # shared model name -> fingerprint


def network_spec(config: NodeConfig) -> NetworkSpec:
    """The node's network declaration."""
    return config.network.spec


def model_specs(config: NodeConfig) -> list[PartialModelSpec]:
    """The node's declared partial models."""
    return list(config.models)


def build_learning(config: NodeConfig) -> LearningSetup:
    """Network, data and trainer for ``config``; errors name the config key."""
    layout = config.layout()
    data = load_node_data(config.data.spec())
    mismatch = task_mismatch(config, TaskShape(data.num_features, data.num_classes,
                                               data.sample_shape))
    if mismatch is not None:
        raise mismatch
    torch.manual_seed(config.node.seed)
    network = PartialMLP(layout, seed=config.node.seed)
    trainer = Trainer(network, data.train_x, data.train_y,
                      config.training.train_config(seed=config.node.seed))
    fingerprints = {name: layout.fingerprint(name) for name in layout.shared_models}
    return LearningSetup(layout, network, data, trainer, fingerprints)
