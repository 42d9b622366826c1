"""The learning sections of the schema: ``[network]``, ``[[models]]``, ``[training]``, ``[data]``.

Each key is declared once (:func:`~p2p.config.kinds.setting`) and checked by the
learner's own value objects (:class:`~learner.NetworkSpec`,
:class:`~learner.PartialModelSpec` and :class:`~learner.module_spec.ModuleModelSpec`,
:class:`~learner.TrainConfig`, :class:`~learner.DataSpec`), whose errors are
reported under the config's dotted key. A ``factory`` key names the user's own
model or data (docs/guide/own-model.md); :mod:`p2p.config.schema` assembles these
sections with the node's others into :class:`~p2p.config.NodeConfig`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from learner.data import SCALINGS, DataSpec
from learner.errors import FieldError
from learner.module_spec import BUFFER_RULES
from learner.permutations import Cycles, format_cycles, parse_permutation
from learner.spec import ACTIVATIONS, DECLARED_KINDS, NetworkSpec, SpecError
from learner.tasks import TASKS
from learner.train_config import OPTIMIZERS, TrainConfig
from learner.user_code import FactoryRef
from p2p.config.errors import ConfigError
from p2p.config.kinds import (
    COUNTS,
    LAYERS,
    Boolean,
    Choice,
    Factory,
    FilePath,
    Integer,
    IntegerList,
    LayerSizes,
    Number,
    Permutation,
    Setting,
    StringList,
    Text,
    Units,
    setting,
)

__all__ = [
    "FACTORY_DATA_UNUSED",
    "MODEL_KEYS",
    "MODULE_MODEL_KEYS",
    "PRECISIONS",
    "WORKER_STARTS",
    "DataConfig",
    "NetworkConfig",
    "TrainingConfig",
    "check_device",
    "learner_error",
]


def learner_error(exc: FieldError, section: str, keys: Mapping[str, str]) -> ConfigError:
    """``exc`` (a learner value object's refusal) under the config key of its field."""
    key = f"{section}.{keys.get(exc.field or '', exc.field)}" if exc.field else section
    return ConfigError(f"{key}: {exc.detail}", key=key)



@dataclass(frozen=True)
class NetworkConfig:
    """``[network]``: the node's MLP (a :class:`learner.NetworkSpec`) and how models combine."""

    layers: tuple[int, ...] = setting((64, 48, 32, 10), LAYERS,
                                      'layer sizes, input to output, e.g. "64=48=32=10", or '
                                      'a convolutional network, e.g. '
                                      '"1x28x28=c16k5=pool2=c32k5=pool2=100=10"')
    activation: str = setting(NetworkSpec.activation, Choice(ACTIVATIONS),
                              "activation after every hidden layer")
    cross_models: bool = setting(False, Boolean(), "average the weights between unrelated "
                                 "models among the nodes holding both")
    factory: FactoryRef | None = setting(
        None, Factory(), 'your own model instead of layers: "package.module:function" or '
        '"path/to/file.py:function" returning a torch.nn.Module (docs/guide/own-model.md)')

    def __post_init__(self) -> None:
        self.spec  # noqa: B018 - validates
        if self.factory is None:
            return
        defaults = NetworkConfig()
        for key in ("layers", "activation", "cross_models"):
            if getattr(self, key) != getattr(defaults, key):
                raise ConfigError(f"network.{key}: not used with network.factory (the module "
                                  "decides its layers); remove it", key=f"network.{key}")

    @property
    def spec(self) -> NetworkSpec:
        """The learner's declaration of this network."""
        try:
            if isinstance(self.layers, LayerSizes):  # a convolutional network
                return dataclasses.replace(self.layers.network, activation=self.activation)
            return NetworkSpec(self.layers, self.activation)
        except SpecError as exc:
            raise learner_error(exc, "network", {"sizes": "layers"}) from None


#: The keys of one ``[[models]]`` entry, mapped onto :class:`learner.PartialModelSpec`.
MODEL_KEYS: dict[str, Setting] = {
    "name": Setting(Text(), "unique name; 'local' is reserved", "name"),
    "neurons": Setting(COUNTS, 'neurons per layer, e.g. "64-40-24-10"', "counts"),
    "depends_on": Setting(StringList(), "declared models this one depends on", "depends_on"),
    "kind": Setting(Choice(DECLARED_KINDS), "shown by `p2p models`", "kind"),
    "params": Setting(StringList(), 'with network.factory: globs over parameter and buffer '
                      'names, e.g. ["features.*"] (* crosses dots)', "params"),
    "units": Setting(Units(), "with network.factory: a share of every Linear/Conv layer's "
                     'output units (0.8), or per layer {"features.*" = 0.8}', "units"),
    "buffers": Setting(Choice(BUFFER_RULES), 'with network.factory: "follow" (BatchNorm '
                       'statistics go with their module) or "local"', "buffers"),
}
_MODEL_REQUIRED = ("name", "neurons")
#: The keys of a [[models]] entry over a network.factory module (one of the two is needed).
MODULE_MODEL_KEYS = ("params", "units", "buffers")


#: ``training.precision``: float32, or autocast to bfloat16 / float16.
PRECISIONS = ("fp32", "bf16", "fp16")
_DEVICE_FORM = '"cpu", "auto", "cuda", "cuda:N" (N a device number) or "mps"'


def check_device(device: str, precision: str) -> None:
    """The form of ``training.device`` and whether ``training.precision`` fits it (whether
    the device exists is checked when the node is built)."""
    kind, _, number = device.partition(":")
    if (kind not in ("cpu", "auto", "cuda", "mps") or (number and kind != "cuda")
            or (device.endswith(":") or (number and not number.isdigit()))):
        raise ConfigError(f"training.device: expected {_DEVICE_FORM}, got {device!r}",
                          key="training.device")
    if precision == "fp16" and kind in ("cpu", "mps"):
        raise ConfigError(f'training.precision: "fp16" needs CUDA (training.device is '
                          f'{device!r}); use "bf16" on the CPU', key="training.precision")


@dataclass(frozen=True)
class TrainingConfig:
    """``[training]``: local SGD (a :class:`learner.TrainConfig`) and the round loop."""

    lr: float = setting(TrainConfig.lr, Number(), "learning rate (> 0)")
    batch_size: int = setting(TrainConfig.batch_size, Integer(), "mini-batch size (>= 1)")
    steps_per_round: int = setting(TrainConfig.steps_per_round, Integer(),
                                   "mini-batches per round (>= 1)")
    optimizer: str = setting(TrainConfig.optimizer, Choice(OPTIMIZERS), "the optimizer")
    momentum: float = setting(TrainConfig.momentum, Number(),
                              'momentum in [0, 1), used by "momentum"')
    shift: int = setting(TrainConfig.shift, Integer(minimum=0),
                         "move each training image by up to this many pixels (networks on "
                         "images only; 0 = off)")
    rounds: int = setting(0, Integer(minimum=0),
                          "rounds to train in all, counting those of a resumed checkpoint; "
                          "0 = until stopped")
    eval_every: int = setting(10, Integer(minimum=1), "evaluate every this many rounds")
    round_interval: float = setting(0.0, Number(minimum=0), "seconds between rounds")
    min_peers: int = setting(0, Integer(minimum=0), "peers to wait for before the first round")
    peer_wait: float = setting(60.0, Number(minimum=0), "longest wait for min_peers (s)")
    optimizer_factory: FactoryRef | None = setting(
        None, Factory(), 'your own optimizer: called with params and lr, e.g. '
        '"torch.optim:AdamW" (replaces optimizer)')
    schedule: FactoryRef | None = setting(
        None, Factory(), "a learning-rate schedule: called with the optimizer, returns a "
        "torch LRScheduler, stepped after every SGD step")
    loss: FactoryRef | None = setting(
        None, Factory(), "loss(outputs, targets) -> scalar tensor (default: cross-entropy)")
    metrics: FactoryRef | None = setting(
        None, Factory(), "metrics(outputs, targets) -> {name: value} per test batch, or a "
        "class with update() and compute() (default: accuracy)")
    device: str = setting("cpu", Text(nonempty=True),
                          '"cpu", "auto" (CUDA when present), "cuda", "cuda:N" or "mps" '
                          "(untested)")
    precision: str = setting("fp32", Choice(PRECISIONS),
                             '"fp32", or mixed precision "bf16" (CPU and CUDA) or "fp16" '
                             "(CUDA only)")

    def __post_init__(self) -> None:
        self.train_config()
        check_device(self.device, self.precision)
        if self.optimizer_factory is not None and self.optimizer != TrainConfig.optimizer:
            raise ConfigError("training.optimizer: not used with training.optimizer_factory; "
                              "remove one", key="training.optimizer")

    def train_config(self, seed: int = 0) -> TrainConfig:
        """The learner's training settings (``seed`` drives the mini-batch order)."""
        try:
            return TrainConfig(lr=self.lr, batch_size=self.batch_size,
                               steps_per_round=self.steps_per_round, optimizer=self.optimizer,
                               momentum=self.momentum, shift=self.shift, seed=seed)
        except FieldError as exc:
            raise learner_error(exc, "training", {}) from None


#: ``data.worker_start``: multiprocessing start methods that are safe with threads.
WORKER_STARTS = ("forkserver", "spawn")
#: ``[data]`` keys of the built-in tasks that a data factory does not use.
FACTORY_DATA_UNUSED = ("task", "test_fraction", "scale", "num_samples", "public_size",
                       "classes", "label_skew")


@dataclass(frozen=True)
class DataConfig:
    """``[data]``: where this node's training and test data come from (a :class:`learner.DataSpec`)."""

    task: str = setting(DataSpec.task, Choice(TASKS),
                        "built-in task (digits, synthetic, mnist5k, mnist1d), .npz file or IDX "
                        "files")
    path: Path | None = setting(None, FilePath(), "the .npz file or IDX directory")
    node_index: int = setting(DataSpec.node_index, Integer(),
                              "this node's shard of the training data, 0..num_nodes-1")
    num_nodes: int = setting(DataSpec.num_nodes, Integer(),
                             "shards the training data is cut into (one per node)")
    permutation: Cycles = setting((), Permutation(), 'label cycles, e.g. "8:9" or "7:8:9"')
    test_fraction: float = setting(DataSpec.test_fraction, Number(),
                                   "share held out for testing, in (0, 1)")
    seed: int = setting(DataSpec.seed, Integer(), "swarm-wide data seed")
    scale: str = setting(DataSpec.scale, Choice(SCALINGS),
                         'features a file stores as they are (floats, integers but uint8): '
                         '"standard" subtracts the mean and divides by the standard deviation '
                         "of each feature over the whole file's training samples (the same on "
                         'every node); "none" uses them as stored. Built-in tasks and uint8 '
                         "images keep their scaling to [0, 1]")
    num_samples: int | None = setting(DataSpec.num_samples, Integer(minimum=10),
                                      "samples a generated task makes (synthetic 2000, mnist1d "
                                      "5000 when absent); other tasks refuse it")
    public_size: int | None = setting(DataSpec.public_size, Integer(minimum=0),
                                      "samples of the public split every node holds alike "
                                      "(absent: the task's own, 500 for mnist5k and mnist1d, "
                                      "0 for digits, npz and idx)")
    classes: tuple[int, ...] | None = setting(None, IntegerList(),
                                              "true labels this node trains and is tested on, "
                                              "e.g. [0, 5, 6, 9] (absent: all); the public "
                                              "split keeps every class")
    label_skew: float | None = setting(DataSpec.label_skew, Number(above=0),
                                       "Dirichlet alpha of each node's class proportions "
                                       "(absent: every class alike; 0.3: a few classes per "
                                       "node mostly); the same on every node")
    factory: FactoryRef | None = setting(
        None, Factory(), 'your own data instead of task: "package.module:function" returning '
        "torch Datasets (train, test[, public]); called with path, node_index, num_nodes, "
        "seed (docs/guide/own-model.md)")
    num_workers: int = setting(0, Integer(minimum=0, maximum=64),
                               "DataLoader worker processes reading a factory's dataset (0: "
                               "read in the training thread)")
    worker_start: str = setting("forkserver", Choice(WORKER_STARTS),
                                "how loader workers start (the daemon has threads: never fork)")

    def __post_init__(self) -> None:
        self.spec()
        if self.factory is not None:
            defaults = DataConfig()
            for key in FACTORY_DATA_UNUSED:
                if getattr(self, key) != getattr(defaults, key):
                    raise ConfigError(f"data.{key}: not used with data.factory (your code "
                                      "makes the datasets); remove it", key=f"data.{key}")

    def spec(self) -> DataSpec:
        """The learner's data spec for this node."""
        try:
            return DataSpec(task=self.task, path=None if self.path is None else str(self.path),
                            node_index=self.node_index, num_nodes=self.num_nodes,
                            permutation=self.permutation_text, seed=self.seed,
                            test_fraction=self.test_fraction, scale=self.scale,
                            num_samples=self.num_samples, public_size=self.public_size,
                            classes=self.classes, label_skew=self.label_skew)
        except FieldError as exc:
            raise learner_error(exc, "data", {}) from None

    @property
    def permutation_text(self) -> str:
        """The permutation in its canonical notation (``"8:9"``; ``"id"`` for none)."""
        return format_cycles(self.permutation)

    def label_map(self, num_classes: int) -> tuple[int, ...]:
        """``label_map[y]`` is the label this node trains on for true label ``y``."""
        try:
            return tuple(int(y) for y in parse_permutation(self.permutation_text, num_classes))
        except FieldError as exc:
            raise ConfigError(f"data.permutation: {exc}", key="data.permutation") from None
