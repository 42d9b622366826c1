"""MNIST-1D-style signals, generated offline from a seed.

Following the recipe of Greydanus and Kobak, "Scaling down deep learning
with MNIST-1D" (ICML 2024): each class is a short hand-drawn 1-D template (12
points); a sample is its class template padded with a random run of zeros,
stretched back to a fixed length (so the digit's width varies), scaled,
shifted circularly, laid on smooth background noise where the template is
absent, sprinkled with white noise, sheared (a random linear trend) and
resampled to 40 points. The result is hard for linear models and for MLPs,
easy for small convolutional networks, and cheap to make in any size.

The templates below are this project's own; the numbers are therefore not
those of the published MNIST-1D set, only of the same construction.
"""

from __future__ import annotations

import numpy as np

from learner.data_errors import DataError
from learner.tasks.arrays import TaskData

__all__ = ["MNIST1D_LENGTH", "make_mnist1d", "mnist1d_task"]

#: Points per generated signal.
MNIST1D_LENGTH = 40

# One 12-point profile per digit, each starting and ending at rest (0).
_TEMPLATES = np.array([
    [0, 2.0, 3.5, 4.5, 5.0, 5.0, 5.0, 5.0, 4.5, 3.5, 2.0, 0],      # 0: one broad hump
    [0, -3.0, -3.0, -2.5, -2.0, -1.5, -1.0, -0.5, 0, 0.5, 0, 0],    # 1: drop, slow climb
    [0, 1.5, 2.5, 2.5, 1.5, 0, -1.0, -2.0, -3.0, -3.0, -2.0, 0],    # 2: hump then trough
    [0, 1.5, 2.5, 2.5, 1.5, 0, 0, 1.5, 2.5, 2.5, 1.5, 0],           # 3: two humps
    [0, -1.0, -2.0, -3.0, -4.0, -4.0, 0, 0, 0, 0, 0, 0],            # 4: ramp down, snap up
    [0, -3.0, -3.0, -3.0, -3.0, 0, 1.5, 2.5, 2.5, 1.5, -1.0, 0],    # 5: low shelf, hump
    [0, -1.5, -2.5, -3.0, -3.5, -3.5, -3.5, -3.5, -3.0, -2.5, -1.5, 0],  # 6: broad trough
    [0, 3.0, 3.0, 2.5, 2.0, 1.5, 1.0, 0.5, 0, -0.5, 0, 0],          # 7: jump, slow fall
    [0, -1.5, -2.5, -2.5, -1.5, 0, 0, -1.5, -2.5, -2.5, -1.5, 0],   # 8: two troughs
    [0, -1.5, -2.5, -2.5, -1.5, 0, 0, 0, 0, 0.5, 0.3, 0],           # 9: trough, then flat
])

# The construction's settings (the paper's values).
_PAD = (36, 60)            # zeros appended before stretching, inclusive range
_STRETCHED = 72            # template (12) + the longest padding
_SCALE = 0.4               # amplitude factor drawn from 1 +- SCALE/2
_MAX_SHIFT = 48            # circular shift drawn from 0..MAX_SHIFT-1
_BACKGROUND = 0.25         # standard deviation of the background noise (before smoothing)
_BACKGROUND_SIGMA = 2.0    # its smoothing (Gaussian, in points)
_WHITE = 0.02              # standard deviation of the white noise
_SHEAR = 0.75              # slope drawn from +- SHEAR/2 over the signal


def _normalised_templates() -> np.ndarray:
    t = _TEMPLATES - _TEMPLATES.mean(axis=1, keepdims=True)
    t /= t.std(axis=1, keepdims=True)
    return (t - t[:, :1]) / 6.0  # back at rest at both ends; a small amplitude


def _smooth(noise: np.ndarray, sigma: float) -> np.ndarray:
    """Each row convolved with a Gaussian of `sigma` points (mirrored at the ends)."""
    half = int(4 * sigma + 0.5)
    offsets = np.arange(-half, half + 1)
    kernel = np.exp(-0.5 * (offsets / sigma) ** 2)
    kernel /= kernel.sum()
    padded = np.pad(noise, ((0, 0), (half, half)), mode="symmetric")
    windows = np.lib.stride_tricks.sliding_window_view(padded, kernel.size, axis=1)
    return windows @ kernel


def _resample_matrix(source: int, target: int) -> np.ndarray:
    """(target, source) weights of linear interpolation from `source` to `target` even points."""
    where = np.linspace(0, source - 1, target)
    left = np.minimum(np.floor(where).astype(int), source - 2)
    frac = where - left
    weights = np.zeros((target, source))
    weights[np.arange(target), left] = 1 - frac
    weights[np.arange(target), left + 1] = frac
    return weights


def make_mnist1d(num_samples: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`num_samples` raw signals (before the dataset-wide standardisation) and their labels.

    Classes are balanced (they differ by at most one sample) and shuffled.
    """
    templates = _normalised_templates()
    rest = templates.shape[1]  # 12 points: index 12 is the first padding zero
    y = np.arange(num_samples, dtype=np.int64) % len(templates)
    rng.shuffle(y)
    padding = rng.integers(_PAD[0], _PAD[1] + 1, size=num_samples)
    # stretch: the padded signal (template, then zeros) resampled to _STRETCHED points
    position = np.linspace(0.0, 1.0, _STRETCHED)[None, :] * (rest - 1 + padding)[:, None]
    x = np.empty((num_samples, _STRETCHED))
    for label, template in enumerate(templates):
        rows = y == label
        x[rows] = np.interp(position[rows], np.arange(rest + 1), np.append(template, 0.0))
    background = position >= rest
    x *= 1 + _SCALE * (rng.random(num_samples) - 0.5)[:, None]
    shift = rng.integers(0, _MAX_SHIFT, size=num_samples)
    columns = (np.arange(_STRETCHED)[None, :] - shift[:, None]) % _STRETCHED
    x = np.take_along_axis(x, columns, axis=1)
    background = np.take_along_axis(background, columns, axis=1)
    smooth_noise = _smooth(rng.normal(scale=_BACKGROUND, size=x.shape), _BACKGROUND_SIGMA)
    x = np.where(background, smooth_noise, x)
    x += rng.normal(scale=_WHITE, size=x.shape)
    slope = _SHEAR * (rng.random(num_samples) - 0.5)
    x -= slope[:, None] * np.linspace(-0.5, 0.5, _STRETCHED)[None, :]
    return x @ _resample_matrix(_STRETCHED, MNIST1D_LENGTH).T, y


def mnist1d_task(seed: int, *, num_samples: int = 5000, public_size: int = 0) -> TaskData:
    """The MNIST-1D-style task: `num_samples` signals of 40 points, 10 classes.

    Seeded: the same seed gives the same samples on every node. The public
    split (`public_size` signals) is drawn from a second stream, so the main
    samples do not depend on its size. All signals are standardised with the
    mean and standard deviation of the main samples.
    """
    if num_samples < 10 or public_size < 0:
        raise DataError(f"mnist1d task: need num_samples >= 10 and public_size >= 0 (got "
                        f"{num_samples}, {public_size})")
    x, y = make_mnist1d(num_samples, np.random.default_rng(np.random.SeedSequence([seed, 0x1D])))
    mean, std = float(x.mean()), float(x.std())
    x_public = y_public = None
    if public_size:
        raw, y_public = make_mnist1d(public_size, np.random.default_rng(
            np.random.SeedSequence([seed, 0x1D, 0x9AB1])))
        x_public = ((raw - mean) / std).astype(np.float32)
    return TaskData(((x - mean) / std).astype(np.float32), y, None, None, 10,
                    x_public=x_public, y_public=y_public, sample_shape=(1, MNIST1D_LENGTH))
