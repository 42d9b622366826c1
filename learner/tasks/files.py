"""Tasks read from the user's files: an `.npz` archive or MNIST-style IDX files.

Each loader returns a :class:`learner.tasks.arrays.TaskData`; the shape readers
give a :class:`learner.tasks.arrays.TaskShape` from array headers and labels
without reading the feature arrays.
"""

from __future__ import annotations

import gzip
import zipfile
from pathlib import Path

import numpy as np

from learner.data_errors import DataError
from learner.tasks.arrays import (
    TaskData,
    TaskShape,
    check_classes,
    feature_rows,
    integer_labels,
    sample_shape_of,
)
from learner.tasks.idx import read_idx

__all__ = ["idx_shape", "idx_task", "npz_shape", "npz_task"]

# optional pairs of an .npz besides x and y; each pair is given whole or not at all
_NPZ_PAIRS = (("x_test", "y_test"), ("x_public", "y_public"))


def npz_task(path: str | Path, num_classes: int | None = None) -> TaskData:
    """A user's `.npz` with `x` and `y`, optionally `x_test`/`y_test` and `x_public`/`y_public`.

    `x` is (samples, features...) numeric, `y` (samples,) integer labels >= 0.
    uint8 features are scaled to [0, 1]; other features are returned as they
    are, marked `raw_features` (the data loader standardizes them).
    `x_public`/`y_public`, when present, are the task's public split (see
    :mod:`learner.tasks`).
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
        for xs, ys in _NPZ_PAIRS:
            if (xs in keys) != (ys in keys):
                raise DataError(f"{path}: {xs!r} and {ys!r} must be given together")
        try:
            stored = archive["x"]
            x = feature_rows(stored, f"{path}: key 'x'")
            y = integer_labels(archive["y"], f"{path}: key 'y'", x.shape[0])
            extra: list[np.ndarray | None] = []
            for xs, ys in _NPZ_PAIRS:
                if xs in keys:
                    rows = feature_rows(archive[xs], f"{path}: key {xs!r}")
                    extra += [rows, integer_labels(archive[ys], f"{path}: key {ys!r}",
                                                   rows.shape[0])]
                else:
                    extra += [None, None]
        except ValueError as exc:  # object arrays refused by allow_pickle=False
            if isinstance(exc, DataError):
                raise
            raise DataError(f"{path}: unreadable array ({exc})") from exc
    x_test, y_test, x_public, y_public = extra
    task = TaskData(x, y, x_test, y_test, 0, raw_features=stored.dtype != np.uint8,
                    x_public=x_public, y_public=y_public,
                    sample_shape=sample_shape_of(tuple(stored.shape[1:])))
    return check_classes(task, str(path), num_classes)


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
    x = feature_rows(images, str(train_images))
    y = integer_labels(read_idx(train_labels), str(train_labels), x.shape[0])
    x_test = y_test = None
    if test_images is not None and test_labels is not None:
        x_test = feature_rows(read_idx(test_images), str(test_images))
        y_test = integer_labels(read_idx(test_labels), str(test_labels), x_test.shape[0])
    task = TaskData(x, y, x_test, y_test, 0, images.dtype != np.uint8,
                    sample_shape=sample_shape_of(tuple(images.shape[1:])))
    return check_classes(task, str(directory), num_classes)


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


def _full_shape(task: TaskData) -> TaskShape:
    return TaskShape(task.num_features, task.num_classes, task.sample_shape)


def npz_shape(path: Path, num_classes: int | None) -> TaskShape:
    """The shape of the `.npz` task at `path`, from its headers and labels."""
    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError as exc:
        raise DataError(f"{path}: no such .npz file") from exc
    except (OSError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path}: not a readable .npz archive ({exc})") from exc
    with archive:
        members = {name.removesuffix(".npy") for name in archive.namelist()}
    if not {"x", "y"} <= members or any((xs in members) != (ys in members)
                                        for xs, ys in _NPZ_PAIRS):
        return _full_shape(npz_task(path, num_classes))  # the loader names what is missing
    with zipfile.ZipFile(path) as archive:
        shape = _npy_shape(archive, "x", f"{path}: key 'x'")
    if len(shape) < 2 or shape[0] == 0:
        return _full_shape(npz_task(path, num_classes))
    with np.load(path, allow_pickle=False) as arrays:  # labels only: small next to x
        highest = int(integer_labels(arrays["y"], f"{path}: key 'y'", shape[0]).max())
        for _, ys in _NPZ_PAIRS:
            if ys in members:
                labels = np.asarray(arrays[ys])
                if labels.size:
                    highest = max(highest, int(integer_labels(
                        labels, f"{path}: key {ys!r}", labels.shape[0]).max()))
    return TaskShape(int(np.prod(shape[1:])), num_classes or highest + 1,
                     sample_shape_of(shape[1:]))


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


def idx_shape(directory: Path, num_classes: int | None) -> TaskShape:
    """The shape of the IDX task in `directory`, from the image header and the labels."""
    train_images, train_labels, test_images, test_labels = _idx_files(directory)
    shape = _idx_header_shape(train_images)
    if shape is None or len(shape) < 2:
        return _full_shape(idx_task(directory, num_classes))
    files = [p for p in (train_labels, test_labels) if p is not None]
    labels = [integer_labels(v, str(p), v.shape[0]) for p in files for v in (read_idx(p),)]
    highest = max(int(v.max()) for v in labels if v.size)
    return TaskShape(int(np.prod(shape[1:])), num_classes or highest + 1,
                     sample_shape_of(shape[1:]))
