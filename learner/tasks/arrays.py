"""What a task's loader returns, and the checks every loader applies to arrays it reads.

A :class:`TaskData` holds all samples of a task before they are split among
nodes; a :class:`TaskShape` is what a network must fit, read without loading
the samples where the source allows it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from learner.data_errors import DataError

__all__ = ["TaskData", "TaskShape", "check_classes", "feature_rows", "integer_labels",
           "sample_shape_of"]


@dataclass(frozen=True)
class TaskData:
    """All samples of a task; `x_test`/`y_test` are None when the source has no test set.

    `raw_features`: the features are as the file stores them (floats, or
    integers other than uint8), with no fixed normalisation; the data loader
    standardizes such features unless told not to. Built-in tasks and uint8
    images (scaled to [0, 1] here) are False.

    `x_public`/`y_public`: samples the source made apart from `x` for the
    public split (generated tasks draw them from the same distribution; an
    `.npz` may store them); None when the public split is carved out of `x`.

    `sample_shape`: the shape of one sample before it was flattened into a row,
    channels first (``(1, 28, 28)`` for grey images, ``(64,)`` for plain
    feature vectors); its product is `num_features`.
    """

    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray | None
    y_test: np.ndarray | None
    num_classes: int
    raw_features: bool = False
    x_public: np.ndarray | None = None
    y_public: np.ndarray | None = None
    sample_shape: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.sample_shape:  # not given: a plain feature vector
            object.__setattr__(self, "sample_shape", (int(self.x.shape[1]),))

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])


@dataclass(frozen=True)
class TaskShape:
    """What a network must fit: features per sample (input layer) and classes (output layer).

    `sample_shape` is one sample's shape, channels first (see :class:`TaskData`);
    empty when unknown, else its product is `num_features`.
    """

    num_features: int
    num_classes: int
    sample_shape: tuple[int, ...] = ()


def sample_shape_of(stored: tuple[int, ...]) -> tuple[int, ...]:
    """Channels-first shape of one sample stored as `stored` (the array's shape but its first).

    A vector stays as it is; a 2-D image gains one channel; deeper arrays are
    taken as channels first already.
    """
    if len(stored) == 2:
        return (1, *stored)
    return tuple(stored)


def feature_rows(values: np.ndarray, where: str) -> np.ndarray:
    """Flatten samples to rows of float32; integer pixels (uint8) are scaled to [0, 1]."""
    values = np.asarray(values)
    if values.ndim < 2:
        raise DataError(f"{where}: expected an array of shape (samples, features...), got shape "
                        f"{values.shape}")
    if values.shape[0] == 0:
        raise DataError(f"{where}: has no samples")
    if values.dtype.kind not in "biuf":
        raise DataError(f"{where}: expected numeric features, got dtype {values.dtype}")
    rows = values.reshape(values.shape[0], -1)
    if values.dtype == np.uint8:
        rows = rows.astype(np.float32) / 255.0
    rows = rows.astype(np.float32)
    if not np.all(np.isfinite(rows)):
        raise DataError(f"{where}: contains NaN or infinite values")
    return rows


def integer_labels(values: np.ndarray, where: str, samples: int) -> np.ndarray:
    """`values` as int64 labels >= 0, one per sample (integral floats are accepted)."""
    values = np.asarray(values)
    if values.ndim != 1:
        raise DataError(f"{where}: expected a 1-D array of integer labels, got shape {values.shape}")
    if values.shape[0] != samples:
        raise DataError(f"{where}: has {values.shape[0]} labels but the features have {samples} rows")
    if values.dtype.kind not in "iu":
        if values.dtype.kind == "f" and np.all(np.isfinite(values)) and np.all(values == np.round(values)):
            values = values.astype(np.int64)
        else:
            raise DataError(f"{where}: expected integer labels, got dtype {values.dtype}")
    labels = values.astype(np.int64)
    if labels.size and labels.min() < 0:
        raise DataError(f"{where}: labels must be >= 0, found {int(labels.min())}")
    return labels


def check_classes(task: TaskData, where: str, num_classes: int | None) -> TaskData:
    """Fix or check the class count; every label must lie in 0..num_classes-1."""
    highest = int(task.y.max())
    for extra in (task.y_test, task.y_public):
        if extra is not None and extra.size:
            highest = max(highest, int(extra.max()))
    if num_classes is None:
        num_classes = highest + 1
    elif highest >= num_classes:
        raise DataError(f"{where}: label {highest} out of range; expected 0..{num_classes - 1}")
    if num_classes < 2:
        raise DataError(f"{where}: needs at least 2 classes, labels only cover {num_classes}")
    for name, other in (("test", task.x_test), ("public", task.x_public)):
        if other is not None and other.shape[1] != task.x.shape[1]:
            raise DataError(f"{where}: {name} features have {other.shape[1]} columns, "
                            f"training features {task.x.shape[1]}")
    return TaskData(task.x, task.y, task.x_test, task.y_test, num_classes, task.raw_features,
                    task.x_public, task.y_public, task.sample_shape)
