"""Build a node's learning side (network, data, trainer) from its configuration.

Kept apart from the runtime so the same construction serves the daemon, the
Python API, ``p2p config``, the swarm script's reference comparison and the
tests. The config has already built (and so validated) the learner's spec
objects; this adds what needs torch, the data or the user's code: a notation
network or the user's module (``network.factory``), a task's arrays or the
user's datasets (``data.factory``), the loss, metrics, optimizer and schedule
hooks, the device. Every failure is a :class:`~p2p.config.ConfigError` naming
the key, raised before the node creates anything (:func:`build_learning`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from torch import nn

from learner import (
    ModelLayout,
    NetworkSpec,
    NodeData,
    NodeSetup,
    PartialModelSpec,
    load_node_data,
)
from learner.batches import LoaderBatches, evaluation_batches
from learner.data_errors import DataError
from learner.data_factory import DatasetData, load_factory_data
from learner.devices import DeviceError, resolve_device
from learner.dp.accounting import noise_multiplier_for
from learner.dp.config import DPConfig
from learner.errors import FieldError
from learner.hooks import Metrics, check_loss
from learner.module_spec import ModuleModelSpec
from learner.modules.build import ModuleRecipe, build_partial_module, factory_from_module
from learner.modules.layout import ModuleLayout
from learner.modules.partial import PartialModule
from learner.network import PartialMLP
from learner.spec import SpecError
from learner.tasks import TaskShape
from learner.trainer import Evaluation, Trainer
from learner.user_code import FactoryError, FactoryRef, call_with
from p2p.config import ConfigError, NodeConfig, task_mismatch
from p2p.config.schema import check_frame_size, model_error

logger = logging.getLogger(__name__)

__all__ = ["AnyLearning", "LearningSetup", "Overrides", "build_learning", "model_specs",
           "network_spec", "plain_state_dict", "private_training", "reference_setup"]

L = TypeVar("L")
N = TypeVar("N")
D = TypeVar("D")


@dataclass(frozen=True, eq=False)
class LearningSetup(Generic[L, N, D]):
    """Everything the trainer task owns.

    Generic in the layout, network and data types: a node holds
    :data:`AnyLearning`; code that only runs with a notation network and a task's
    arrays (strategies other than "partial", automatic grouping: the config
    refuses them otherwise, :mod:`p2p.config.factories`) reads the bare name.
    """

    layout: L
    network: N
    data: D
    trainer: Trainer
    fingerprints: dict[str, bytes]  # shared model name -> fingerprint
    metrics: Metrics = field(default_factory=Metrics)

    def evaluate(self) -> Evaluation:
        """The model's loss and metrics on the node's test set (caller holds the model)."""
        data: object = self.data
        trainer = self.trainer
        if isinstance(data, NodeData):
            return trainer.evaluate(data.test_x, data.test_y, self.metrics)
        assert isinstance(data, DatasetData)
        if data.test_tensors is not None:
            return trainer.evaluate(*data.test_tensors, self.metrics)
        return trainer.evaluate_batches(evaluation_batches(
            data.test, num_workers=_workers(trainer), pin_memory=trainer.device.type == "cuda"),
            self.metrics)

    @property
    def custom_metrics(self) -> bool:
        """Whether the node reports the user's metrics instead of accuracy."""
        return self.metrics.hook is not None


#: What a node holds: a notation network or the user's module, a task's arrays or datasets.
AnyLearning = LearningSetup[ModelLayout | ModuleLayout, PartialMLP | PartialModule,
                            NodeData | DatasetData]


def _workers(trainer: Trainer) -> int:
    return 0 if trainer.batches is None else trainer.batches.num_workers


@dataclass(frozen=True)
class Overrides:
    """What the Python API passes instead of (or besides) the config's references: a
    model factory or module, a data factory or ``(train, test[, public])`` datasets,
    and loss, metrics, optimizer and schedule callables."""

    model: object | None = None
    data: object | None = None
    loss: object | None = None
    metrics: object | None = None
    optimizer: object | None = None
    schedule: object | None = None


def network_spec(config: NodeConfig) -> NetworkSpec:
    """The node's network declaration."""
    return config.network.spec


def model_specs(config: NodeConfig) -> list[PartialModelSpec | ModuleModelSpec]:
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


# ------------------------------------------------------------------ the user's code


def _ref(value: object, key: str) -> FactoryRef | None:
    if value is None:
        return None
    try:
        return FactoryRef.parse(value, key)
    except FactoryError as exc:
        raise ConfigError(f"{key}: {exc.detail}", key=key) from None


def _hook(config_value: FactoryRef | None, given: object, key: str
          ) -> tuple[Callable[..., Any] | None, str]:
    """The callable of a hook (the API's object wins over the config's reference)."""
    ref = _ref(given, key) if given is not None else config_value
    if ref is None:
        return None, ""
    return ref.resolve(key), ref.text


def _as_config_error(exc: FieldError, config: NodeConfig) -> ConfigError:
    """A learner refusal under the config key it concerns."""
    if isinstance(exc, SpecError):
        return model_error(exc, config.models)
    if isinstance(exc, DataError):
        key = f"data.{exc.field}" if exc.field else "data.factory"
        return ConfigError(f"{key}: {exc.detail}", key=key)
    key = exc.field or "network.factory"
    return ConfigError(f"{key}: {exc.detail}", key=key)


def _data(config: NodeConfig, overrides: Overrides, classes: bool) -> NodeData | DatasetData:
    d = config.data
    given = overrides.data
    if given is not None and not callable(given):
        datasets = given
        given = lambda: datasets  # noqa: E731 - the API's datasets, as a factory's result
    ref = _ref(given, "data.factory") if given is not None else d.factory
    if ref is None:
        data = load_node_data(d.spec())
        if config.network.factory is None and overrides.model is None:
            mismatch = task_mismatch(config, TaskShape(data.num_features, data.num_classes,
                                                       data.sample_shape))
            if mismatch is not None:
                raise mismatch
        return data
    return load_factory_data(ref, path=None if d.path is None else str(d.path),
                             node_index=d.node_index, num_nodes=d.num_nodes, seed=d.seed,
                             permutation=d.permutation_text, classes=classes)


def _network(config: NodeConfig, overrides: Overrides, data: NodeData | DatasetData,
             classes: bool) -> PartialMLP | PartialModule:
    given = overrides.model
    if given is None and config.network.factory is None:
        if isinstance(data, DatasetData):
            _check_notation_fit(config, data)
        torch.manual_seed(config.node.seed)
        return PartialMLP(config.layout(), seed=config.node.seed)
    if isinstance(given, nn.Module):
        factory: Callable[..., object] = factory_from_module(given)
        text = f"the module {type(given).__name__}"
    else:
        ref = _ref(given, "network.factory") if given is not None else config.network.factory
        assert ref is not None
        factory, text = ref.resolve("network.factory"), ref.text
    if isinstance(data, NodeData):
        shape, num_classes = data.sample_shape, data.num_classes
    else:
        shape, num_classes = data.sample_shape, data.num_classes or 0
    models = tuple(m for m in config.models if isinstance(m, ModuleModelSpec))
    recipe = ModuleRecipe(factory, tuple(shape), num_classes, models, text=text,
                          classes=classes)
    module = build_partial_module(recipe, config.node.seed)
    check_frame_size(config.limits.max_frame_size, module.layout)
    return module


def _check_notation_fit(config: NodeConfig, data: DatasetData) -> None:
    """A notation network reads the datasets' inputs as flat rows: its first layer must
    have one neuron per value (a convolutional one: their shape), its last one per class."""
    network = config.network.spec
    values = int(np.prod(data.sample_shape))
    fits = (network.input_image == tuple(data.sample_shape) if network.input_image is not None
            else network.input_features == values)
    if fits and (data.num_classes is None or network.sizes[-1] == data.num_classes):
        return
    shape = "x".join(map(str, data.sample_shape))
    raise ConfigError(f"network.layers: the datasets of data.factory have inputs of shape "
                      f"{shape} ({values} values) and {data.num_classes} classes; the network "
                      f"must start with {values if network.input_image is None else shape} and "
                      f"end with {data.num_classes}; got {network.notation()}",
                      key="network.layers")


def _check_private(config: NodeConfig, network: nn.Module) -> None:
    if config.gossip.dp and any(isinstance(m, nn.modules.batchnorm._BatchNorm)
                                for m in network.modules()):
        raise ConfigError("gossip.privacy: DP-SGD cannot train a module with BatchNorm (its "
                          "batch statistics mix samples, which per-sample clipping "
                          "forbids); use GroupNorm or LayerNorm, or train without dp",
                          key="gossip.privacy")


def _trainer(config: NodeConfig, overrides: Overrides, network: nn.Module,
             data: NodeData | DatasetData, device: torch.device,
             loss: Callable[..., Any] | None, noise_seed: int | None) -> Trainer:
    t = config.training
    train_config = t.train_config(seed=config.node.seed)
    optimizer_fn, optimizer_text = _hook(t.optimizer_factory, overrides.optimizer,
                                         "training.optimizer_factory")
    schedule_fn, schedule_text = _hook(t.schedule, overrides.schedule, "training.schedule")
    optimizer = None if optimizer_fn is None else (
        lambda params: _checked(call_with(optimizer_fn, {"params": params, "lr": t.lr},
                                          key="training.optimizer_factory",
                                          text=optimizer_text),
                                torch.optim.Optimizer, "training.optimizer_factory",
                                optimizer_text))
    schedule = None if schedule_fn is None else (
        lambda opt: call_with(schedule_fn, {"optimizer": opt}, key="training.schedule",
                              text=schedule_text))
    options: dict[str, Any] = dict(loss=loss, optimizer=optimizer, schedule=schedule,
                                   device=device, precision=t.precision)
    x: np.ndarray | torch.Tensor | None = None
    y: np.ndarray | torch.Tensor | None = None
    if isinstance(data, NodeData):
        x, y = data.train_x, data.train_y
    elif data.train_tensors is not None:
        x, y = data.train_tensors
    else:
        options["batches"] = LoaderBatches(
            data.train, t.batch_size, seed=config.node.seed, num_workers=config.data.num_workers,
            start=config.data.worker_start, pin_memory=device.type == "cuda")
    shard = len(y) if y is not None else options["batches"].size
    # DP noise and sampling come from the operating system (noise_seed None, as in every
    # daemon): a seed others could guess would let them subtract the noise
    try:
        return Trainer(network, x, y, train_config, dp=private_training(config, shard),
                       noise_seed=noise_seed, **options)
    except ValueError as exc:
        if isinstance(exc, FieldError):
            raise
        raise ConfigError(f"training: {exc}", key="training") from None


def _checked(value: object, kind: type, key: str, text: str) -> Any:
    if not isinstance(value, kind):
        raise FactoryError(f"{text} returned {type(value).__name__}; expected a "
                           f"{kind.__module__}.{kind.__qualname__}", field=key)
    return value


def _first_batch(trainer: Trainer, loss_text: str, config: NodeConfig) -> None:
    """One forward pass on a first mini-batch before the node starts: a dataset item of
    the wrong shape or type, or a loss that is not a scalar, fails here in one line."""
    try:
        value = trainer.first_batch_loss()
    except FactoryError:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        key = "data.factory" if config.data.factory is not None else "network.factory"
        raise ConfigError(f"{key}: the first training batch fails: {type(exc).__name__}: "
                          f"{first}", key=key) from None
    if loss_text:
        check_loss(value, loss_text)


def build_learning(config: NodeConfig, overrides: Overrides | None = None, *,
                   noise_seed: int | None = None) -> AnyLearning:
    """Network, data and trainer for ``config``; every error is a ConfigError naming the key.
    ``noise_seed``: DP-SGD's sampling and noise (None: the OS; a simulation's seed only).

    With the user's code (a factory, a hook, another device) the first training
    batch is run through the model and the loss, so that bad data or a bad hook
    fails here, before the node creates its identity, lock or checkpoint.
    """
    overrides = overrides or Overrides()
    t = config.training
    try:
        device = resolve_device(t.device)
        loss_fn, loss_text = _hook(t.loss, overrides.loss, "training.loss")
        metrics_fn, metrics_text = _hook(t.metrics, overrides.metrics, "training.metrics")
        classes = loss_fn is None
        data = _data(config, overrides, classes)
        network = _network(config, overrides, data, classes)
        _check_private(config, network)
        trainer = _trainer(config, overrides, network, data, device, loss_fn, noise_seed)
        if isinstance(network, PartialModule) or isinstance(data, DatasetData) or loss_fn:
            _first_batch(trainer, loss_text, config)
    except (FactoryError, SpecError, DataError, DeviceError) as exc:
        raise _as_config_error(exc, config) from None
    layout = network.layout
    fingerprints = {name: layout.fingerprint(name) for name in layout.shared_models}
    metrics = Metrics(metrics_fn, text=metrics_text, classes=classes)
    if isinstance(network, PartialModule):
        logger.info("model %s: %d values, %s", config.network.factory.text
                    if config.network.factory else "from the Python API",
                    layout.total_parameters, "; ".join(
                        layout.describe(n) for n in (*layout.shared_models, "local")))
    return LearningSetup(layout, network, data, trainer, fingerprints, metrics)


def plain_state_dict(network: nn.Module) -> dict[str, torch.Tensor]:
    """The node's current model as a plain ``state_dict`` for use outside the project:
    the user's module as its code names it, or a notation network per layer
    (``layer1.weight`` shaped as torch's Linear/Conv2d, ``layer1.bias``, ...)."""
    if isinstance(network, PartialModule):
        return network.plain_state_dict()
    assert isinstance(network, PartialMLP)
    out: dict[str, torch.Tensor] = {}
    for slot in network.layout.layers:
        out[f"layer{slot.index}.weight"] = network.weight(slot.index).detach().cpu().clone()
        out[f"layer{slot.index}.bias"] = network.bias(slot.index).detach().cpu().clone()
    return out


def reference_setup(config: NodeConfig, learning: AnyLearning) -> NodeSetup:
    """The node as the synchronous reference simulates it (:func:`learner.run_reference`):
    its notation network and models, or its built module; its data in memory."""
    data = learning.data
    if not isinstance(data, NodeData):
        raise ConfigError("data.factory: the synchronous reference trains on a task's arrays; "
                          "run the daemons, or give a built-in task", key="data.factory")
    network = learning.network
    return NodeSetup(network_spec(config), tuple(config.models), data, config.node.seed,
                     config.network.cross_models,
                     model=network if isinstance(network, PartialModule) else None)


def values_of(setup: AnyLearning) -> dict[str, np.ndarray]:
    """Every shared model's canonical vector (tests and scripts compare nodes with it)."""
    return {name: setup.network.extract(name) for name in setup.layout.shared_models}
