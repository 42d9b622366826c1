"""One node's data: its training shard, the shared test part and the public split.

Every node calls `load_node_data` with the same task, seed, `num_nodes` and
`test_fraction` and its own `node_index`: the seeded split gives all nodes the
same test part and disjoint shards without coordination. Each node's train and
test labels go through its own permutation; the public split (see
:mod:`learner.tasks`) is the same on every node, true labels included. Features
a file stores as they are (floats, integers other than uint8) are standardized
by default (`scale = "standard"`) with statistics over the training samples of
all nodes, which every node computes alike; built-in tasks and uint8 images
keep their fixed scaling to [0, 1].

See docs/guide/data-and-training.md ("How the data is split", "Scaling").
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np

from learner.data_errors import DataError
from learner.permutations import parse_permutation
from learner.tasks import get_task
from learner.tasks.arrays import TaskData

__all__ = ["SCALINGS", "DataSpec", "NodeData", "TaskSplit", "dirichlet_shards", "load_node_data",
           "split_parts", "split_task"]

logger = logging.getLogger(__name__)

#: How stored features are scaled: "standard" (shared mean and standard deviation) or "none".
SCALINGS = ("standard", "none")
# Unscaled features whose root mean square lies outside these bounds get a warning.
_UNIT_SCALE = (0.01, 10.0)


@dataclass(frozen=True)
class DataSpec:
    """What data a node trains and is tested on.

    task: a name of the task registry (:data:`learner.tasks.TASKS`: "digits",
    "synthetic", "mnist5k", "mnist1d", "npz", "idx"); path: the `.npz` file or
    IDX directory (npz/idx only); node_index in 0..num_nodes-1; permutation: a
    label permutation spec (see `learner.permutations`) or None (checked
    against the task's classes when the data is loaded); seed: the
    swarm-wide data seed (same on every node); test_fraction: share of samples
    held out as the shared test part when the source has no test set;
    samples_per_node: cap on each node's shard (None: the whole shard);
    num_classes: class count for npz/idx (None: highest label + 1); scale: one
    of SCALINGS, for features a file stores unnormalised (see the module);
    num_samples: samples a generated task (synthetic, mnist1d) makes (None:
    the task's default); public_size: samples in the public split (None: the
    task's default, see :mod:`learner.tasks`); classes: the true labels this
    node trains and is tested on (None: all); its shard and test part keep
    only samples of these classes (the public split keeps all); label_skew:
    Dirichlet concentration alpha of the shards' class proportions (None: shards
    of the shuffled pool, every class alike; small alpha, e.g. 0.3: each node
    holds a few classes mostly; see :func:`dirichlet_shards`).
    """

    task: str = "digits"
    path: str | None = None
    node_index: int = 0
    num_nodes: int = 1
    permutation: str | None = None
    seed: int = 0
    test_fraction: float = 0.2
    samples_per_node: int | None = None
    num_classes: int | None = None
    scale: str = "standard"
    num_samples: int | None = None
    public_size: int | None = None
    classes: tuple[int, ...] | None = None
    label_skew: float | None = None

    def __post_init__(self) -> None:
        entry = get_task(self.task)
        if entry.needs_path and not self.path:
            form = ("an .npz file with arrays x, y (optional x_test, y_test)" if self.task == "npz"
                    else "a directory holding MNIST-style IDX files")
            raise DataError(f'required when data.task = "{self.task}"; expected {form}',
                            field="path")
        if self.num_nodes < 1:
            raise DataError(f"expected an integer >= 1, got {self.num_nodes}", field="num_nodes")
        if not 0 <= self.node_index < self.num_nodes:
            raise DataError(f"{self.node_index} is not below data.num_nodes {self.num_nodes}; "
                            "expected 0 <= node_index < num_nodes", field="node_index")
        if self.seed < 0:
            raise DataError(f"expected an integer >= 0, got {self.seed}", field="seed")
        if not 0.0 < self.test_fraction < 1.0:
            raise DataError(f"expected a number > 0 and < 1, got {self.test_fraction}",
                            field="test_fraction")
        if self.samples_per_node is not None and self.samples_per_node < 1:
            raise DataError(f"expected an integer >= 1 or None, got {self.samples_per_node}",
                            field="samples_per_node")
        if self.num_classes is not None and self.num_classes < 2:
            raise DataError(f"expected an integer >= 2 or None, got {self.num_classes}",
                            field="num_classes")
        if self.scale not in SCALINGS:
            raise DataError(f"expected one of {', '.join(map(repr, SCALINGS))}, got "
                            f"{self.scale!r}", field="scale")
        if self.num_samples is not None and self.num_samples < 10:
            raise DataError(f"expected an integer >= 10 or None, got {self.num_samples}",
                            field="num_samples")
        entry.request(self.path, self.seed, self.num_classes, self.num_samples, self.public_size)
        if self.label_skew is not None and not (0.0 < self.label_skew < math.inf):
            raise DataError(f"expected a finite number > 0 or None, got {self.label_skew}",
                            field="label_skew")
        if self.classes is not None:
            classes = tuple(self.classes)
            if not classes or any(isinstance(c, bool) or not isinstance(c, int) or c < 0
                                  for c in classes) or len(set(classes)) != len(classes):
                raise DataError(f"expected distinct class labels >= 0 (at least one) or None, "
                                f"got {self.classes!r}", field="classes")
            object.__setattr__(self, "classes", classes)


@dataclass(frozen=True, eq=False)
class NodeData:
    """Float32 features and int64 labels of one node.

    Training and test labels are permuted by the node's permutation; the
    public split's (`public_x`, `public_y`, possibly empty) are the true labels,
    identical on every node. `sample_shape`: one sample's shape before it was
    flattened, channels first (``(1, 28, 28)`` for mnist5k).
    """

    train_x: np.ndarray
    train_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    num_features: int
    num_classes: int
    permutation: np.ndarray = field(repr=False)
    public_x: np.ndarray = field(default_factory=lambda: np.empty((0, 0), np.float32),
                                 repr=False)
    public_y: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64), repr=False)
    sample_shape: tuple[int, ...] = ()


@dataclass(frozen=True, eq=False)
class TaskSplit:
    """Indices into a task's `x`: the shared test part (empty when the task has its
    own test set), the carved public split (empty when none is carved) and each
    node's disjoint training shard."""

    test: np.ndarray
    public: np.ndarray
    shards: list[np.ndarray]


def split_task(
    task: TaskData,
    *,
    num_nodes: int,
    seed: int,
    test_fraction: float,
    samples_per_node: int | None = None,
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Indices into `task.x` of the shared test part (empty when the task has its
    own test set) and of each node's disjoint training shard (seeded)."""
    split = split_parts(task, num_nodes=num_nodes, seed=seed, test_fraction=test_fraction,
                        samples_per_node=samples_per_node)
    return split.test, split.shards


def split_parts(
    task: TaskData,
    *,
    num_nodes: int,
    seed: int,
    test_fraction: float,
    samples_per_node: int | None = None,
    public_size: int = 0,
    label_skew: float | None = None,
) -> TaskSplit:
    """Seeded split of `task.x`: test part first, then `public_size` public samples,
    then the shards. With `public_size` 0 the test part and the shards are those
    of :func:`split_task` before public splits existed. With `label_skew` the
    shards' class proportions are drawn from a Dirichlet (:func:`dirichlet_shards`)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xDA7A]))
    order = rng.permutation(task.x.shape[0])
    if task.x_test is None:
        num_test = max(1, int(round(test_fraction * order.size)))
        test_idx, pool = np.sort(order[:num_test]), order[num_test:]
    else:
        test_idx, pool = np.empty(0, dtype=np.int64), order
    if public_size >= pool.size:
        raise DataError(f"data.public_size: {public_size} public samples leave no training "
                        f"samples (the task has {pool.size} after the test part)")
    public_idx, pool = np.sort(pool[:public_size]), pool[public_size:]
    if pool.size < num_nodes:
        raise DataError(
            f"data.num_nodes: {num_nodes} nodes but only {pool.size} training samples; "
            "expected at most one node per training sample"
        )
    if label_skew is not None:
        shards = dirichlet_shards(pool, task.y[pool], num_nodes, label_skew, rng)
    else:
        shards = np.array_split(pool, num_nodes)
    if samples_per_node is not None:
        smallest = min(s.size for s in shards)
        if samples_per_node > smallest:
            raise DataError(
                f"data.samples_per_node: {samples_per_node} exceeds the smallest shard "
                f"({smallest} samples = {pool.size} training samples / {num_nodes} nodes)"
            )
        shards = [s[:samples_per_node] for s in shards]
    return TaskSplit(test_idx, public_idx, shards)


#: Draws of the class proportions tried before a label-skewed split gives up.
SKEW_DRAWS = 100


def dirichlet_shards(pool: np.ndarray, labels: np.ndarray, num_nodes: int, alpha: float,
                     rng: np.random.Generator) -> list[np.ndarray]:
    """Disjoint shards of `pool` (whose labels are `labels`) with label skew: for each
    class, the share of its samples each node gets is drawn from Dirichlet(alpha, ...,
    alpha), the usual non-IID split (Hsu et al. 2019). Seeded by `rng`, so every node
    computes the same split. Draws again (up to SKEW_DRAWS times) while a shard would
    hold fewer than 2 samples."""
    classes = np.unique(labels)
    for _ in range(SKEW_DRAWS):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_nodes)]
        for c in classes:
            members = pool[labels == c]
            shares = rng.dirichlet(np.full(num_nodes, alpha))
            cuts = np.round(np.cumsum(shares)[:-1] * members.size).astype(np.int64)
            for node, part in enumerate(np.split(members, cuts)):
                parts[node].append(part)
        shards = [np.sort(np.concatenate(p)) for p in parts]
        if min(s.size for s in shards) >= 2:
            return shards
    raise DataError(f"{SKEW_DRAWS} draws of Dirichlet({alpha:g}) class proportions all left "
                    f"a node with fewer than 2 of the {pool.size} training samples; raise "
                    "data.label_skew or lower data.num_nodes", field="label_skew")


def load_node_data(spec: DataSpec) -> NodeData:
    """Load the task named by `spec` and return this node's shard and the shared test part."""
    entry = get_task(spec.task)
    task = entry.load(spec.path, spec.seed, spec.num_classes, num_samples=spec.num_samples,
                      public_size=spec.public_size)
    perm = parse_permutation(spec.permutation, task.num_classes)
    split = split_parts(
        task,
        num_nodes=spec.num_nodes,
        seed=spec.seed,
        test_fraction=spec.test_fraction,
        samples_per_node=spec.samples_per_node,
        public_size=entry.carved_public(task, spec.public_size),
        label_skew=spec.label_skew,
    )
    test_idx = split.test
    task = _scaled(task, test_idx, spec)
    shard = split.shards[spec.node_index]
    if task.x_test is None or task.y_test is None:
        test_x, test_y = task.x[test_idx], task.y[test_idx]
    else:
        test_x, test_y = task.x_test, task.y_test
    if spec.classes is not None:
        shard, test_x, test_y = _of_classes(spec.classes, task, shard, test_x, test_y)
    if task.x_public is not None and task.y_public is not None:
        public_x, public_y = task.x_public, task.y_public
    else:
        public_x, public_y = task.x[split.public], task.y[split.public]
    data = NodeData(
        train_x=np.ascontiguousarray(task.x[shard], dtype=np.float32),
        train_y=perm[task.y[shard]],
        test_x=np.ascontiguousarray(test_x, dtype=np.float32),
        test_y=perm[test_y],
        num_features=task.num_features,
        num_classes=task.num_classes,
        permutation=perm,
        public_x=np.ascontiguousarray(public_x, dtype=np.float32),
        public_y=np.asarray(public_y, dtype=np.int64),
        sample_shape=task.sample_shape,
    )
    # One line at start: shows at a glance whether nodes were given distinct shards.
    logger.info(
        "data: shard %d of %d, %d training samples, %d test samples, %d public samples "
        "(task %s), permutation %s", spec.node_index, spec.num_nodes, data.train_y.size,
        data.test_y.size, data.public_y.size, spec.task, spec.permutation or "id",
    )
    return data


def _of_classes(classes: tuple[int, ...], task: TaskData, shard: np.ndarray,
                test_x: np.ndarray, test_y: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The shard and test part cut down to the true labels `classes` (data.classes)."""
    wrong = [c for c in classes if c >= task.num_classes]
    if wrong:
        raise DataError(f"{wrong[0]} is not a class of the task; expected labels in "
                        f"0..{task.num_classes - 1}", field="classes")
    wanted = np.asarray(classes, dtype=np.int64)
    shard = shard[np.isin(task.y[shard], wanted)]
    if shard.size == 0:
        raise DataError(f"this node's shard holds no sample of classes {list(classes)}",
                        field="classes")
    keep = np.isin(test_y, wanted)
    return shard, test_x[keep], test_y[keep]


def _scaled(task: TaskData, test_idx: np.ndarray, spec: DataSpec) -> TaskData:
    """`task` with stored features standardized by statistics every node shares.

    The statistics cover every training sample of every node (all rows of
    `task.x` but the shared test part), the same on each node; constant
    features are only centred. With `scale = "none"` the features stay as they
    are, and a warning says so when they are far from unit scale.
    """
    if not task.raw_features:
        return task  # built-in tasks and uint8 images have their own fixed scale
    where = spec.path or spec.task
    if spec.scale == "none":
        rms = np.sqrt(np.mean(np.square(task.x, dtype=np.float64), axis=0))
        worst = int(np.argmax(rms))
        if rms[worst] > _UNIT_SCALE[1] or 0 < rms.max() < _UNIT_SCALE[0]:
            logger.warning(
                "%s: features are far from unit scale (feature %d has root mean square %.4g) "
                'and data.scale = "none": training may stay near chance level; set '
                'data.scale = "standard" to standardize them', where, worst, rms[worst])
        return task
    train = np.ones(task.x.shape[0], dtype=bool)
    train[test_idx] = False
    rows = task.x[train].astype(np.float64)
    mean = rows.mean(axis=0)
    std = rows.std(axis=0)
    std[std == 0] = 1.0  # a constant feature: centred, not divided by zero

    def apply(x: np.ndarray) -> np.ndarray:
        return ((x - mean) / std).astype(np.float32)

    logger.info("%s: features standardized with the mean and standard deviation of the %d "
                "training samples of all nodes (data.scale = \"standard\")", where, rows.shape[0])
    x_test = None if task.x_test is None else apply(task.x_test)
    x_public = None if task.x_public is None else apply(task.x_public)
    return TaskData(apply(task.x), task.y, x_test, task.y_test, task.num_classes,
                    raw_features=False, x_public=x_public, y_public=task.y_public,
                    sample_shape=task.sample_shape)
