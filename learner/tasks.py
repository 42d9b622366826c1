"""Where samples come from: built-in tasks, a user's `.npz`, or IDX files on disk.

Each loader returns a `TaskData`: all samples of the task before it is split
among nodes, as float32 features (one row per sample) and int64 labels, plus
an explicit test set when the source has one. Nothing is downloaded.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import logging
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from learner.data_errors import DataError
from learner.idx import read_idx

__all__ = [
    "TASKS",
    "TaskData",
    "TaskShape",
    "digits_task",
    "idx_task",
    "load_task",
    "npz_task",
    "synthetic_task",
    "task_shape",
]

logger = logging.getLogger(__name__)

TASKS = ("digits", "synthetic", "npz", "idx")


@dataclass(frozen=True)
class TaskData:
    """All samples of a task; `x_test`/`y_test` are None when the source has no test set.

    `raw_features`: the features are as the file stores them (floats, or
    integers other than uint8), with no fixed normalisation; the data loader
    standardizes such features unless told not to. Built-in tasks and uint8
    images (scaled to [0, 1] here) are False.
    """

    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray | None
    y_test: np.ndarray | None
    num_classes: int
    raw_features: bool = False

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])


def _features(values: np.ndarray, where: str) -> np.ndarray:
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


def _labels(values: np.ndarray, where: str, samples: int) -> np.ndarray:
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


def _check_classes(task: TaskData, where: str, num_classes: int | None) -> TaskData:
    """Fix or check the class count; every label must lie in 0..num_classes-1."""
    highest = int(task.y.max())
    if task.y_test is not None and task.y_test.size:
        highest = max(highest, int(task.y_test.max()))
    if num_classes is None:
        num_classes = highest + 1
    elif highest >= num_classes:
        raise DataError(f"{where}: label {highest} out of range; expected 0..{num_classes - 1}")
    if num_classes < 2:
        raise DataError(f"{where}: needs at least 2 classes, labels only cover {num_classes}")
    if task.x_test is not None and task.x_test.shape[1] != task.x.shape[1]:
        raise DataError(f"{where}: test features have {task.x_test.shape[1]} columns, "
                        f"training features {task.x.shape[1]}")
    return TaskData(task.x, task.y, task.x_test, task.y_test, num_classes, task.raw_features)


def _bundled_digits_csv() -> Path | None:
    """scikit-learn's bundled digits file, located without importing scikit-learn (slow)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        candidate = Path(root) / "datasets" / "data" / "digits.csv.gz"
        if candidate.is_file():
            return candidate
    return None


@functools.lru_cache(maxsize=1)
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    csv = _bundled_digits_csv()
    if csv is not None:
        table = np.loadtxt(csv, delimiter=",", dtype=np.float64)
        pixels, target = table[:, :-1], table[:, -1]
    else:  # layout changed: go through the public loader
        from sklearn.datasets import load_digits

        bunch = load_digits()
        pixels, target = bunch.data, bunch.target
    x = (pixels / 16.0).astype(np.float32)  # pixel values are 0..16
    y = target.astype(np.int64)
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


def digits_task() -> TaskData:
    """scikit-learn's bundled 8x8 handwritten digits (1797 samples, 64 features in [0, 1])."""
    x, y = _digits_arrays()
    return TaskData(x, y, None, None, 10)


def synthetic_task(
    seed: int,
    *,
    num_samples: int = 2000,
    num_features: int = 64,
    num_classes: int = 10,
    clusters_per_class: int = 2,
    spread: float = 1.5,
) -> TaskData:
    """Seeded Gaussian clusters: each class is a mixture of `clusters_per_class` blobs.

    Centres are drawn from N(0, 1) per feature; samples add N(0, spread^2) noise,
    so classes overlap and accuracy stays below 100 %. The same seed gives the
    same task on every node.
    """
    if num_samples < num_classes or num_features < 1 or num_classes < 2 or clusters_per_class < 1:
        raise DataError(
            "synthetic task: need num_samples >= num_classes >= 2, num_features >= 1, "
            f"clusters_per_class >= 1 (got {num_samples}, {num_classes}, {num_features}, "
            f"{clusters_per_class})"
        )
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))
    centres = rng.normal(size=(num_classes, clusters_per_class, num_features))
    y = np.arange(num_samples, dtype=np.int64) % num_classes
    rng.shuffle(y)
    which = rng.integers(0, clusters_per_class, size=num_samples)
    noise = rng.normal(scale=spread, size=(num_samples, num_features))
    x = (centres[y, which] + noise) / np.sqrt(1.0 + spread**2)
    return TaskData(x.astype(np.float32), y, None, None, num_classes)


def npz_task(path: str | Path, num_classes: int | None = None) -> TaskData:
    """A user's `.npz` with `x` and `y`, optionally `x_test` and `y_test`.

    `x` is (samples, features...) numeric, `y` (samples,) integer labels >= 0.
    uint8 features are scaled to [0, 1]; other features are returned as they
    are, marked `raw_features` (the data loader standardizes them).
    """
    path = Path(path)
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError as exc:
        raise DataError(f"{path}: no such .npz file") from exc
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path}: not a readable .npz archive ({exc})") from exc
    with archive:
        keys = set(archive.files)
        for key in ("x", "y"):
            if key not in keys:
                raise DataError(
                    f"{path}: missing key {key!r}; expected keys 'x', 'y' and optionally "
                    f"'x_test', 'y_test' (found {sorted(keys)})"
                )
        if ("x_test" in keys) != ("y_test" in keys):
            raise DataError(f"{path}: 'x_test' and 'y_test' must be given together")
        try:
            stored = archive["x"]
            x = _features(stored, f"{path}: key 'x'")
            y = _labels(archive["y"], f"{path}: key 'y'", x.shape[0])
            x_test = y_test = None
            if "x_test" in keys:
                x_test = _features(archive["x_test"], f"{path}: key 'x_test'")
                y_test = _labels(archive["y_test"], f"{path}: key 'y_test'", x_test.shape[0])
        except ValueError as exc:  # object arrays refused by allow_pickle=False
            if isinstance(exc, DataError):
                raise
            raise DataError(f"{path}: unreadable array ({exc})") from exc
    task = TaskData(x, y, x_test, y_test, 0, raw_features=stored.dtype != np.uint8)
    return _check_classes(task, str(path), num_classes)


def _find_one(directory: Path, patterns: tuple[str, ...], what: str, required: bool) -> Path | None:
    found = sorted({p for pattern in patterns for p in directory.glob(pattern) if p.is_file()})
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise DataError(f"{directory}: several {what} files ({names}); keep exactly one")
    if not found:
        if required:
            raise DataError(
                f"{directory}: no {what} file; expected a name matching {' or '.join(patterns)} "
                "(IDX, optionally .gz)"
            )
        return None
    return found[0]


def _idx_files(directory: Path) -> tuple[Path, Path, Path | None, Path | None]:
    """Training images and labels, and the optional test images and labels, in `directory`."""
    if not directory.is_dir():
        raise DataError(f"{directory}: not a directory; the idx task expects a directory holding "
                        "train-images/train-labels IDX files")
    train_images = _find_one(directory, ("*train-images*",), "training images", True)
    train_labels = _find_one(directory, ("*train-labels*",), "training labels", True)
    test_images = _find_one(directory, ("*t10k-images*", "*test-images*"), "test images", False)
    test_labels = _find_one(directory, ("*t10k-labels*", "*test-labels*"), "test labels", False)
    if (test_images is None) != (test_labels is None):
        raise DataError(f"{directory}: test images and test labels must both be present or absent")
    assert train_images is not None and train_labels is not None
    return train_images, train_labels, test_images, test_labels


def idx_task(path: str | Path, num_classes: int | None = None) -> TaskData:
    """MNIST/EMNIST-style IDX files in directory `path`.

    Needs `*train-images*` and `*train-labels*`; `*t10k-images*`/`*test-images*`
    with matching labels give the test set. Images (uint8) are flattened and
    scaled to [0, 1].
    """
    directory = Path(path)
    train_images, train_labels, test_images, test_labels = _idx_files(directory)
    images = read_idx(train_images)
    x = _features(images, str(train_images))
    y = _labels(read_idx(train_labels), str(train_labels), x.shape[0])
    x_test = y_test = None
    if test_images is not None and test_labels is not None:
        x_test = _features(read_idx(test_images), str(test_images))
        y_test = _labels(read_idx(test_labels), str(test_labels), x_test.shape[0])
    task = TaskData(x, y, x_test, y_test, 0, images.dtype != np.uint8)
    return _check_classes(task, str(directory), num_classes)


def load_task(task: str, path: str | None, seed: int, num_classes: int | None = None) -> TaskData:
    """Dispatch on the task name; `path` is required for `npz` and `idx` only."""
    if task == "digits":
        return digits_task()
    if task == "synthetic":
        return synthetic_task(seed, num_classes=num_classes or 10)
    if task in ("npz", "idx"):
        if not path:
            raise DataError(f"data task {task!r} needs a path (data.path)")
        loader = npz_task if task == "npz" else idx_task
        return loader(path, num_classes)
    raise DataError(f"unknown data task {task!r}; expected one of {', '.join(TASKS)}")


@dataclass(frozen=True)
class TaskShape:
    """What a network must fit: features per sample (input layer) and classes (output layer)."""

    num_features: int
    num_classes: int


def _npy_shape(archive: zipfile.ZipFile, key: str, where: str) -> tuple[int, ...]:
    """The shape of array `key` of an open `.npz`, read from its header only."""
    try:
        with archive.open(f"{key}.npy") as member:
            version = np.lib.format.read_magic(member)
            if version == (1, 0):
                shape, _, _ = np.lib.format.read_array_header_1_0(member)
            else:
                shape, _, _ = np.lib.format.read_array_header_2_0(member)
    except (KeyError, OSError, ValueError, zipfile.BadZipFile) as exc:
        raise DataError(f"{where}: unreadable array header ({exc})") from exc
    return tuple(int(n) for n in shape)


def _npz_shape(path: Path, num_classes: int | None) -> TaskShape:
    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError as exc:
        raise DataError(f"{path}: no such .npz file") from exc
    except (OSError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path}: not a readable .npz archive ({exc})") from exc
    with archive:
        members = {name.removesuffix(".npy") for name in archive.namelist()}
    if not {"x", "y"} <= members or ("x_test" in members) != ("y_test" in members):
        return _full_shape(npz_task(path, num_classes))  # the loader names what is missing
    with zipfile.ZipFile(path) as archive:
        shape = _npy_shape(archive, "x", f"{path}: key 'x'")
    if len(shape) < 2 or shape[0] == 0:
        return _full_shape(npz_task(path, num_classes))
    with np.load(path, allow_pickle=False) as arrays:  # labels only: small next to x
        highest = int(_labels(arrays["y"], f"{path}: key 'y'", shape[0]).max())
        if "y_test" in members:
            y_test = np.asarray(arrays["y_test"])
            if y_test.size:
                highest = max(highest, int(_labels(y_test, f"{path}: key 'y_test'",
                                                   y_test.shape[0]).max()))
    return TaskShape(int(np.prod(shape[1:])), num_classes or highest + 1)


def _idx_header_shape(path: Path) -> tuple[int, ...] | None:
    """Dimensions declared by an IDX file's header (None if it is not a plain header)."""
    try:
        with open(path, "rb") as f:
            compressed = f.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if compressed else open(path, "rb")) as f:
            head = f.read(4)
            if len(head) < 4 or head[:2] != b"\0\0" or head[3] == 0:
                return None
            dims = f.read(4 * head[3])
    except (OSError, EOFError):
        return None
    if len(dims) < 4 * head[3]:
        return None
    return tuple(int.from_bytes(dims[i:i + 4], "big") for i in range(0, len(dims), 4))


def _idx_shape(directory: Path, num_classes: int | None) -> TaskShape:
    train_images, train_labels, test_images, test_labels = _idx_files(directory)
    shape = _idx_header_shape(train_images)
    if shape is None or len(shape) < 2:
        return _full_shape(idx_task(directory, num_classes))
    files = [p for p in (train_labels, test_labels) if p is not None]
    labels = [_labels(v, str(p), v.shape[0]) for p in files for v in (read_idx(p),)]
    highest = max(int(v.max()) for v in labels if v.size)
    return TaskShape(int(np.prod(shape[1:])), num_classes or highest + 1)


def _full_shape(task: TaskData) -> TaskShape:
    return TaskShape(task.num_features, task.num_classes)


def task_shape(task: str, path: str | None, seed: int,
               num_classes: int | None = None) -> TaskShape:
    """The features and classes of a task, cheaply: built-in tasks from their
    definition, `.npz` and IDX files from their headers and labels (the feature
    arrays are not read). Raises DataError as :func:`load_task` would."""
    if task == "digits":
        return TaskShape(64, 10)
    if task == "synthetic":
        return TaskShape(64, num_classes or 10)
    if task in ("npz", "idx"):
        if not path:
            raise DataError(f"data task {task!r} needs a path (data.path)")
        if task == "npz":
            return _npz_shape(Path(path), num_classes)
        return _idx_shape(Path(path), num_classes)
    raise DataError(f"unknown data task {task!r}; expected one of {', '.join(TASKS)}")
