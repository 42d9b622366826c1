"""The task registry: every data task by name, how it loads, its shape and its public split.

The node's config (``data.task``), :mod:`learner.data` (and so the reference
and the simulator), ``scripts/swarm.py`` and ``scripts/paper/reproduce.py`` all
look tasks up here; nothing is downloaded. Tasks: ``digits``, ``synthetic``,
``mnist5k``, ``mnist1d``, and the user's ``npz`` and ``idx`` files. The test
part is the file's own or ``data.test_fraction`` held out (seeded, the same on
every node). The public split is held identically by every node, true labels
included: *generated* from a stream of its own, or *carved* from the samples
after the test part (shrinking the shards, so digits, npz and idx carve none
unless ``data.public_size`` asks).

The tasks' table: docs/guide/data-and-training.md ("Tasks").
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from learner.data_errors import DataError
from learner.tasks.arrays import TaskData, TaskShape
from learner.tasks.builtin import digits_task, mnist5k_task, synthetic_task
from learner.tasks.files import idx_shape, idx_task, npz_shape, npz_task
from learner.tasks.mnist1d import mnist1d_task

__all__ = [
    "TASKS",
    "Task",
    "TaskData",
    "TaskShape",
    "digits_task",
    "get_task",
    "idx_task",
    "load_task",
    "mnist1d_task",
    "mnist5k_task",
    "npz_task",
    "resolve_network",
    "synthetic_task",
    "task_shape",
]


@dataclass(frozen=True)
class _Request:
    """What a loader is asked for; sizes are resolved (no None) except num_classes."""

    path: str | None
    seed: int
    num_classes: int | None
    num_samples: int
    public_size: int
    public_asked: int | None  # data.public_size as given (None: the task's default)


@dataclass(frozen=True)
class Task:
    """One data task of the registry.

    `public`: ``"generated"`` (the loader makes the public samples apart),
    ``"carved"`` (the split takes them from the samples) or ``"file"`` (the
    file may hold them, else carved). `public_size`: the public split's size
    when ``data.public_size`` is not set. `num_samples`: samples a generated
    task makes by default (None: fixed by the source). `networks`: named
    networks for the task (``"mlp"``, and ``"cnn"`` for image tasks), usable
    wherever a network is asked for by name.
    """

    name: str
    summary: str
    needs_path: bool
    public: str
    public_size: int
    loader: Callable[[_Request], TaskData] = field(repr=False)
    shaper: Callable[[_Request], TaskShape] = field(repr=False)
    num_samples: int | None = None
    networks: dict[str, str] = field(default_factory=dict, compare=False)

    def request(self, path: str | None, seed: int, num_classes: int | None,
                num_samples: int | None, public_size: int | None) -> _Request:
        """Check the options against this task and fill in its defaults."""
        if self.needs_path and not path:
            raise DataError(f"data task {self.name!r} needs a path (data.path)")
        if num_samples is not None and self.num_samples is None:
            generated = ", ".join(t.name for t in _REGISTRY.values() if t.num_samples)
            raise DataError(f"the task {self.name!r} has a fixed number of samples; "
                            f"data.num_samples applies to generated tasks only ({generated})",
                            field="num_samples")
        if public_size is not None and public_size < 0:
            raise DataError(f"expected an integer >= 0 or None, got {public_size}",
                            field="public_size")
        return _Request(path, seed, num_classes,
                        num_samples if num_samples is not None else self.num_samples or 0,
                        public_size if public_size is not None else self.public_size,
                        public_size)

    def load(self, path: str | None, seed: int, num_classes: int | None = None, *,
             num_samples: int | None = None, public_size: int | None = None) -> TaskData:
        """All samples of the task (generated public samples included; carved ones are not)."""
        request = self.request(path, seed, num_classes, num_samples, public_size)
        if self.num_samples is None:
            return self.loader(request)
        return _generated(self, request)

    def shape(self, path: str | None, seed: int, num_classes: int | None = None) -> TaskShape:
        """Features and classes, cheaply (file tasks read headers and labels only)."""
        return self.shaper(self.request(path, seed, num_classes, None, None))

    def carved_public(self, task: TaskData, public_size: int | None) -> int:
        """How many samples the split carves out of `task.x` as the public split."""
        if task.x_public is not None:
            return 0  # the loader made or read them
        if self.public == "generated":
            return 0
        return self.public_size if public_size is None else public_size


@functools.lru_cache(maxsize=2)
def _generated(task: Task, request: _Request) -> TaskData:
    """A generated task is a pure function of its request: the nodes of one process (a
    simulation of a thousand) share one copy instead of each generating it. Callers copy
    what they keep (shards and test parts are indexed out), never write into it."""
    return task.loader(request)


def _path(request: _Request) -> Path:
    assert request.path is not None  # checked by Task.request
    return Path(request.path)


def _with_public_cap(task: TaskData, request: _Request, where: str) -> TaskData:
    """A file's own public split, cut to ``data.public_size`` when that is smaller."""
    if task.x_public is None or task.y_public is None:
        return task
    have = task.y_public.shape[0]
    if request.public_size > have:
        raise DataError(f"{where}: data.public_size {request.public_size} exceeds the "
                        f"{have} public samples the file holds (x_public)", field="public_size")
    if request.public_size == have:
        return task
    return TaskData(task.x, task.y, task.x_test, task.y_test, task.num_classes,
                    task.raw_features, task.x_public[:request.public_size],
                    task.y_public[:request.public_size], task.sample_shape)


def _load_npz(request: _Request) -> TaskData:
    task = npz_task(_path(request), request.num_classes)
    if request.public_asked is None:
        return task  # the file's public split whole, if it has one
    return _with_public_cap(task, request, str(request.path))


def _fixed_shape(features: int, sample_shape: tuple[int, ...], *,
                 classes_fixed: bool = True) -> Callable[[_Request], TaskShape]:
    def shape(request: _Request) -> TaskShape:
        classes = 10 if classes_fixed else request.num_classes or 10
        return TaskShape(features, classes, sample_shape)
    return shape


def _synthetic(request: _Request) -> TaskData:
    return synthetic_task(request.seed, num_samples=request.num_samples,
                          num_classes=request.num_classes or 10,
                          public_size=request.public_size)


def _mnist1d(request: _Request) -> TaskData:
    return mnist1d_task(request.seed, num_samples=request.num_samples,
                        public_size=request.public_size)


_REGISTRY: dict[str, Task] = {task.name: task for task in (
    Task("digits", "scikit-learn's 8x8 handwritten digits (1,797 samples)", False, "carved", 0,
         lambda r: digits_task(), _fixed_shape(64, (1, 8, 8)),
         networks={"mlp": "64=48=32=10"}),
    Task("synthetic", "seeded Gaussian clusters (64 features)", False, "generated", 200,
         _synthetic, _fixed_shape(64, (64,), classes_fixed=False), num_samples=2000,
         networks={"mlp": "64=48=32=10"}),
    Task("npz", "a .npz file: x, y, optionally x_test/y_test and x_public/y_public", True,
         "file", 0, _load_npz, lambda r: npz_shape(_path(r), r.num_classes)),
    Task("idx", "a directory of MNIST-style IDX files", True, "carved", 0,
         lambda r: idx_task(_path(r), r.num_classes),
         lambda r: idx_shape(_path(r), r.num_classes)),
    Task("mnist5k", "5,000 MNIST images, 500 per digit (bundled)", False, "carved", 500,
         lambda r: mnist5k_task(), _fixed_shape(784, (1, 28, 28)),
         networks={"mlp": "784=300=100=10",
                   "cnn": "1x28x28=c16k5=pool2=c32k5=pool2=100=10"}),
    Task("mnist1d", "MNIST-1D-style signals of 40 points, generated", False, "generated", 500,
         _mnist1d, _fixed_shape(40, (1, 40)), num_samples=5000,
         networks={"mlp": "40=100=100=10"}),
)}

#: Every task name, in the registry's order.
TASKS = tuple(_REGISTRY)


def get_task(name: str) -> Task:
    """The registry entry of task `name`; DataError naming the known tasks if there is none."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise DataError(f"unknown data task {name!r}; expected one of {', '.join(TASKS)}",
                        field="task") from None


def resolve_network(task: str, network: str | None) -> str:
    """The network notation for `network` on `task`: a name the task knows (``"mlp"``,
    ``"cnn"``), or a notation returned as given; None gives the task's ``"mlp"``."""
    entry = get_task(task)
    if network is None or network in entry.networks:
        key = network or "mlp"
        if key not in entry.networks:
            raise DataError(f"the task {task!r} has no default network; give one, e.g. "
                            '"784=100=10" (features, hidden, classes)', field="task")
        return entry.networks[key]
    if network.isalpha():  # a name, not a notation
        known = ", ".join(entry.networks) or "none"
        raise DataError(f"the task {task!r} has no network named {network!r} (named networks: "
                        f"{known}); give a notation such as \"784=300=100=10\"", field="task")
    return network


def load_task(task: str, path: str | None, seed: int, num_classes: int | None = None, *,
              num_samples: int | None = None, public_size: int | None = None) -> TaskData:
    """Load task `task`; `path` is required for `npz` and `idx` only (see :class:`Task`)."""
    return get_task(task).load(path, seed, num_classes, num_samples=num_samples,
                               public_size=public_size)


def task_shape(task: str, path: str | None, seed: int,
               num_classes: int | None = None) -> TaskShape:
    """The features and classes of a task, cheaply: built-in tasks from their
    definition, `.npz` and IDX files from their headers and labels (the feature
    arrays are not read). Raises DataError as :func:`load_task` would."""
    return get_task(task).shape(path, seed, num_classes)
