"""Checks applied to everything the push-sum core receives or is given."""

from __future__ import annotations

import math
import numbers

import numpy as np

from gossip.errors import InvalidValues, RejectedPush
from gossip.messages import Push

#: Largest magnitude accepted in a received vector. Model parameters and masks
#: are orders of magnitude below; anything larger is hostile or diverged, and
#: would overflow float32 when loaded into a network.
MAX_ABS_VALUE = 1e6


def check_vector(values: object, length: int | None, what: str) -> np.ndarray:
    """Return ``values`` as a 1-D float64 array (a copy) or raise InvalidValues."""
    if not isinstance(values, np.ndarray):
        raise InvalidValues(f"{what}: expected a numpy array, got {type(values).__name__}")
    if values.ndim != 1:
        raise InvalidValues(f"{what}: expected a 1-D array, got shape {values.shape}")
    if length is not None and values.shape[0] != length:
        raise InvalidValues(f"{what}: expected length {length}, got {values.shape[0]}")
    if not np.issubdtype(values.dtype, np.floating):
        raise InvalidValues(f"{what}: expected a floating dtype, got {values.dtype}")
    out = np.array(values, dtype=np.float64, copy=True)
    if not np.all(np.isfinite(out)):
        bad = int(np.count_nonzero(~np.isfinite(out)))
        raise InvalidValues(f"{what}: {bad} non-finite value(s) (NaN or infinity)")
    return out


def check_weight(weight: object, max_weight: float, what: str) -> float:
    """Return ``weight`` as a float in (0, max_weight] or raise InvalidValues."""
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
        raise InvalidValues(f"{what}: expected a float, got {type(weight).__name__}")
    w = float(weight)
    if not math.isfinite(w) or w <= 0.0 or w > max_weight:
        raise InvalidValues(f"{what}: expected a finite weight in (0, {max_weight:g}], got {w!r}")
    return w


def validate_push(push: object, fingerprint: bytes, length: int, max_weight: float) -> None:
    """Raise RejectedPush naming the first problem of ``push``; return None if valid."""
    if not isinstance(push, Push):
        raise RejectedPush(f"expected a Push message, got {type(push).__name__}")
    if push.model != fingerprint:
        raise RejectedPush(
            f"model fingerprint {bytes(push.model)[:8].hex()}... does not match "
            f"{fingerprint[:8].hex()}..."
        )
    if isinstance(push.push_id, bool) or not isinstance(push.push_id, int) or push.push_id < 0:
        raise RejectedPush(f"push_id: expected a non-negative int, got {push.push_id!r}")
    values = push.values
    if not isinstance(values, np.ndarray):
        raise RejectedPush(f"values: expected a numpy array, got {type(values).__name__}")
    if values.dtype != np.float64:
        raise RejectedPush(f"values: expected dtype float64, got {values.dtype}")
    if values.ndim != 1 or values.shape[0] != length:
        raise RejectedPush(f"values: expected shape ({length},), got {values.shape}")
    if not np.all(np.isfinite(values)):
        bad = int(np.count_nonzero(~np.isfinite(values)))
        raise RejectedPush(f"values: {bad} non-finite value(s) (NaN or infinity)")
    largest = float(np.max(np.abs(values))) if values.size else 0.0
    if largest > MAX_ABS_VALUE:
        raise RejectedPush(f"values: magnitude {largest:.3g} exceeds the bound {MAX_ABS_VALUE:g}")
    try:
        check_weight(push.weight, max_weight, "weight")
    except InvalidValues as exc:
        raise RejectedPush(str(exc)) from None
    for name in ("masked", "noisy"):
        if not isinstance(getattr(push, name), bool):
            raise RejectedPush(f"{name}: expected a bool, got {getattr(push, name)!r}")
    age = push.noise_age
    if isinstance(age, bool) or not isinstance(age, int) or age < 0:
        raise RejectedPush(f"noise_age: expected a non-negative int, got {age!r}")
