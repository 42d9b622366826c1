"""The synchronous reference: thesis Algorithm 2, in process.

Every round, every node trains `steps_per_round` mini-batches on its own
shard; then every shared partial model is replaced, on each of its holders,
by the exact average of the holders' vectors. No networking, no asynchrony:
this is the yardstick the gossiping daemons are compared with. Deterministic
for given node seeds and `TrainConfig.seed`.

With `dp`, every node trains with DP-SGD (:class:`learner.dp.sgd.PrivateSGD`;
its Poisson sampling and noise are seeded from the node's training seed, so
runs stay reproducible); a node whose next round would go past
`dp.epsilon_budget` stops training and keeps averaging, as a daemon does.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from learner.batched_training import batch_key, train_steps_batched
from learner.data import NodeData
from learner.dp.config import DPConfig
from learner.layout import ModelLayout
from learner.modules.layout import ModuleLayout
from learner.modules.partial import PartialModule
from learner.network import PartialNetwork
from learner.spec import NetworkSpec
from learner.trainer import TrainConfig, Trainer, evaluate_model

__all__ = [
    "NodeSetup",
    "ReferenceResult",
    "ReferenceSetupError",
    "average_shared_models",
    "run_reference",
]

logger = logging.getLogger(__name__)


class ReferenceSetupError(ValueError):
    """The nodes given to the reference cannot run together (the message says why)."""


@dataclass(frozen=True, eq=False)
class NodeSetup:
    """One simulated node: its network, declared partial models, data and seed.

    `seed` initialises the node's local parameters and its mini-batch order;
    shared models start identical on all holders whatever the seed. `model`: a
    node's module already built and cut into its partial models (a user's
    module, :func:`learner.modules.build.build_partial_module`), trained instead
    of a notation network built from `network` and `models` (which it ignores).
    """

    network: NetworkSpec | None
    models: tuple[object, ...]
    data: NodeData
    seed: int
    cross_models: bool = False
    model: PartialModule | None = None


@dataclass(frozen=True)
class ReferenceResult:
    """Per-node test accuracy over time and at the end.

    `eval_rounds[k]` is the number of rounds done when `accuracy[k]` (one value
    per node) and `loss[k]` were measured; the last entry is after the final round.
    """

    eval_rounds: tuple[int, ...]
    accuracy: tuple[tuple[float, ...], ...]
    loss: tuple[tuple[float, ...], ...]
    #: with DP-SGD: each node's epsilon spent at the end (empty without)
    epsilon: tuple[float, ...] = ()
    #: with DP-SGD: each node's sample rate (expected batch / shard size)
    sample_rate: tuple[float, ...] = ()

    @property
    def final_accuracy(self) -> tuple[float, ...]:
        """Each node's accuracy after the last round."""
        return self.accuracy[-1]

    @property
    def mean_final_accuracy(self) -> float:
        """Mean over nodes of the final accuracy."""
        return float(np.mean(self.final_accuracy))

    @property
    def mean_accuracy(self) -> tuple[float, ...]:
        """Mean over nodes at each evaluation."""
        return tuple(float(np.mean(row)) for row in self.accuracy)


def average_shared_models(
    networks: Sequence[PartialNetwork | PartialModule],
    layouts: Sequence[ModelLayout | ModuleLayout],
) -> dict[str, int]:
    """Replace every shared model, on each holder, by the exact mean over its holders.

    Holders are grouped by (name, fingerprint): a node whose declaration of a
    model differs is not averaged with the others (as on the wire). Returns the
    number of holders averaged per model name (groups of one are skipped).
    """
    groups: dict[tuple[str, bytes], list[int]] = {}
    for index, layout in enumerate(layouts):
        for name in layout.shared_models:
            groups.setdefault((name, layout.fingerprint(name)), []).append(index)
    names_seen: dict[str, int] = {}
    for (name, _), holders in groups.items():
        names_seen[name] = names_seen.get(name, 0) + 1
        if len(holders) < 2:
            continue
        vectors = [networks[i].extract(name) for i in holders]
        mean = np.mean(np.stack(vectors), axis=0, dtype=np.float64).astype(vectors[0].dtype)
        for i in holders:
            networks[i].assign(name, mean)
    for name, variants in names_seen.items():
        if variants > 1:
            logger.warning("model %r is declared in %d incompatible ways; each variant is "
                           "averaged separately", name, variants)
    return {name: len(holders) for (name, _), holders in groups.items() if len(holders) > 1}


def _node_train_seed(config_seed: int, node_seed: int) -> int:
    return int(np.random.SeedSequence([config_seed, node_seed]).generate_state(1, np.uint32)[0])


def run_reference(
    nodes: Sequence[NodeSetup],
    rounds: int,
    train_config: TrainConfig,
    eval_every: int = 1,
    *,
    on_eval: Callable[[int, tuple[float, ...]], None] | None = None,
    dp: DPConfig | None = None,
    batched: bool = False,
) -> ReferenceResult:
    """Run Algorithm 2 for `rounds` rounds and test every node on its own test set.

    Evaluates every `eval_every` rounds and after the last one. `on_eval`, if
    given, is called with (rounds done, per-node accuracies) at each evaluation.
    `dp`: train every node with DP-SGD under these settings. `batched`: train
    the nodes' rounds together (:func:`learner.batched_training.train_steps_batched`:
    the same mini-batches and updates, one vectorised step for all nodes of one
    architecture; equal to the plain loop within float rounding, several
    times cheaper for hundreds of nodes). Refused with `dp` (DP-SGD is not batched).
    """
    if batched and dp is not None:
        raise ReferenceSetupError("run_reference: batched=True cannot train DP-SGD nodes; "
                                  "drop batched or dp")
    if not nodes:
        raise ReferenceSetupError("run_reference: no nodes given")
    if rounds < 1:
        raise ReferenceSetupError(f"run_reference: rounds must be >= 1, got {rounds}")
    if eval_every < 1:
        raise ReferenceSetupError(f"run_reference: eval_every must be >= 1, got {eval_every}")
    layouts: list[ModelLayout | ModuleLayout] = []
    networks: list[PartialNetwork | PartialModule] = []
    trainers: list[Trainer] = []
    for index, node in enumerate(nodes):
        network: PartialNetwork | PartialModule
        config = dataclasses.replace(train_config,
                                     seed=_node_train_seed(train_config.seed, node.seed))
        if node.model is not None:
            network = node.model
            layouts.append(network.layout)
            networks.append(network)
            trainers.append(Trainer(network, node.data.train_x, node.data.train_y, config,
                                    dp=dp, noise_seed=config.seed))
            continue
        if node.network is None:
            raise ReferenceSetupError(f"node {index}: give a network or a built model")
        if node.data.num_features != node.network.input_features:
            raise ReferenceSetupError(
                f"node {index}: data has {node.data.num_features} features but the network "
                f"{node.network.notation()} has {node.network.input_features} inputs"
            )
        if node.data.num_classes != node.network.sizes[-1]:
            raise ReferenceSetupError(
                f"node {index}: data has {node.data.num_classes} classes but the network "
                f"{node.network.notation()} has {node.network.sizes[-1]} outputs"
            )
        layout = ModelLayout(node.network, list(node.models), cross_models=node.cross_models)
        network = PartialNetwork(layout, node.seed)
        layouts.append(layout)
        networks.append(network)
        trainers.append(Trainer(network, node.data.train_x, node.data.train_y, config, dp=dp,
                                noise_seed=config.seed))

    eval_rounds: list[int] = []
    accuracy: list[tuple[float, ...]] = []
    loss: list[tuple[float, ...]] = []
    batch_keys = [batch_key(t) for t in trainers] if batched else None
    for done in range(1, rounds + 1):
        if batch_keys is not None:
            train_steps_batched(trainers, train_config.steps_per_round, keys=batch_keys)
        else:
            for trainer in trainers:
                if trainer.can_train():  # False once a DP budget is spent
                    trainer.train_round()
        average_shared_models(networks, layouts)
        if done % eval_every == 0 or done == rounds:
            results = [
                evaluate_model(net, node.data.test_x, node.data.test_y)
                for net, node in zip(networks, nodes, strict=True)
            ]
            eval_rounds.append(done)
            accuracy.append(tuple(r.accuracy for r in results))
            loss.append(tuple(r.loss for r in results))
            if on_eval is not None:
                on_eval(done, accuracy[-1])
    privacy = [t.privacy for t in trainers if t.privacy is not None]
    return ReferenceResult(tuple(eval_rounds), tuple(accuracy), tuple(loss),
                           epsilon=tuple(p.epsilon() for p in privacy),
                           sample_rate=tuple(p.sample_rate for p in privacy))
