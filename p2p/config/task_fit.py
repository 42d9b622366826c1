"""Does the network fit the task? Checked from the task's shape, before anything starts.

The network's input layer must have one neuron per feature and its output
layer one per class. ``p2p config`` and ``p2p run`` check this with
:func:`check_task_fit` before the node creates its identity key or loads
torch: built-in tasks from their definition, ``.npz`` and IDX files from their
array headers and labels (:func:`learner.tasks.task_shape`), so the feature
arrays are not read twice.
"""

from __future__ import annotations

from learner.errors import FieldError
from learner.tasks import TaskShape, task_shape
from p2p.config.errors import ConfigError
from p2p.config.schema import NodeConfig

__all__ = ["check_task_fit", "task_mismatch"]


def _source(config: NodeConfig) -> str | None:
    return None if config.source is None else str(config.source)


def task_mismatch(config: NodeConfig, shape: TaskShape) -> ConfigError | None:
    """The error to raise if ``config``'s network does not fit ``shape`` (None if it does).

    A convolutional network's input (channels x height x width) must be the
    task's sample shape (:attr:`learner.tasks.TaskShape.sample_shape`).
    """
    sizes = config.network.layers
    network = config.network.spec
    d = config.data
    what = f"{d.task!r}" if d.path is None else f"{d.task!r} ({d.path})"
    image = network.input_image
    if image is not None:
        if image == tuple(shape.sample_shape) and sizes[-1] == shape.num_classes:
            return None
        stored = "x".join(map(str, shape.sample_shape)) or str(shape.num_features)
        return ConfigError(
            f"network.layers: the task {what} has samples of shape {stored} and "
            f"{shape.num_classes} classes, so a convolutional network must start with {stored} "
            f"and end with {shape.num_classes}; got {network.notation()}",
            key="network.layers", source=_source(config))
    if (sizes[0], sizes[-1]) == (shape.num_features, shape.num_classes):
        return None
    return ConfigError(
        f"network.layers: the task {what} has {shape.num_features} features and "
        f"{shape.num_classes} classes, so layers must start with {shape.num_features} and end "
        f"with {shape.num_classes}; got {'='.join(map(str, sizes))}",
        key="network.layers", source=_source(config),
    )


def check_task_fit(config: NodeConfig) -> TaskShape:
    """Read the task's shape and check the network against it.

    Raises :class:`ConfigError` under ``data.path`` when the data cannot be
    read, under ``network.layers`` when the network does not fit.
    """
    d = config.data
    if d.factory is not None:  # the user's datasets: checked on a first batch when built
        return TaskShape(0, 0)
    try:
        shape = task_shape(d.task, None if d.path is None else str(d.path), d.seed)
    except FieldError as exc:
        key = f"data.{exc.field}" if exc.field else "data.path"
        raise ConfigError(f"{key}: {exc.detail}", key=key, source=_source(config)) from None
    error = None if config.network.factory is not None else task_mismatch(config, shape)
    if error is not None:
        raise error
    return shape
