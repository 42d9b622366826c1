"""Build a node's learning side (network, data, trainer) from its configuration.

Kept apart from the runtime so the same construction serves the daemon, the
swarm script's reference comparison and the tests. The config has already
built (and so validated) the learner's spec objects; this adds what needs
torch or the data on disk.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from learner import ModelLayout, NetworkSpec, NodeData, PartialModelSpec, load_node_data
from learner.dp.accounting import noise_multiplier_for
from learner.dp.config import DPConfig
from learner.network import PartialMLP
from learner.tasks import TaskShape
from learner.trainer import Trainer
from p2p.config import ConfigError, NodeConfig, task_mismatch

logger = logging.getLogger(__name__)


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


def private_training(config: NodeConfig, shard_size: int) -> DPConfig | None:
    """The DP-SGD settings of ``config`` for a shard of ``shard_size`` samples (None without
    ``gossip.privacy`` "dp"): ``dp.target_epsilon`` becomes the noise multiplier that
    spends it over ``training.rounds`` rounds. Errors name the key."""
    if not config.gossip.dp:
        return None
    d, t = config.dp, config.training
    sample_rate = min(1.0, t.batch_size / shard_size)
    noise = d.noise_multiplier or 1.0
    planned = f"; budget epsilon {d.budget:g}" if d.budget is not None else "; no budget"
    if d.target_epsilon is not None:
        steps = t.rounds * t.steps_per_round
        try:
            noise = noise_multiplier_for(d.target_epsilon, d.delta, sample_rate, steps)
        except ValueError as exc:
            raise ConfigError(f"dp.target_epsilon: {exc}", key="dp.target_epsilon") from None
        planned = (f"; derived to spend epsilon {d.target_epsilon:g} over {steps} steps"
                   + (f", budget {d.budget:g}" if d.budget != d.target_epsilon else ""))
    logger.info("differential privacy (DP-SGD): noise multiplier %.4g, clip norm %g, delta %g, "
                "sample rate %.3g (%d of %d samples per step)%s", noise, d.clip_norm, d.delta,
                sample_rate, t.batch_size, shard_size, planned)
    if d.delta * shard_size > 0.1:
        logger.warning("dp.delta = %g is not well below 1 / %d (this shard's samples): a "
                       "mechanism that reveals one sample outright would still meet it",
                       d.delta, shard_size)
    return d.learner_config(noise)


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
    train_config = config.training.train_config(seed=config.node.seed)
    # DP noise and sampling come from the operating system (noise_seed None): a seed
    # others could guess would let them subtract the noise
    trainer = Trainer(network, data.train_x, data.train_y, train_config,
                      dp=private_training(config, len(data.train_y)))
    fingerprints = {name: layout.fingerprint(name) for name in layout.shared_models}
    return LearningSetup(layout, network, data, trainer, fingerprints)
