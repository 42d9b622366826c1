"""Checks applied to everything the push-sum core receives or is given."""

from __future__ import annotations

import math
import numbers

import numpy as np

from gossip.compression import EncodedVector, decode
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


def check_magnitude(values: np.ndarray, what: str) -> None:
    """Raise InvalidValues if a decoded (finite) vector exceeds :data:`MAX_ABS_VALUE`."""
    if not values.size:
        return
    largest = max(float(values.max()), -float(values.min()))  # two reductions, no |x| temporary
    if largest > MAX_ABS_VALUE:
        raise InvalidValues(f"{what}: magnitude {largest:.3g} exceeds the bound {MAX_ABS_VALUE:g}")


def decode_values(values: object, length: int, what: str) -> np.ndarray:
    """Decode a received vector and bound it: a new float64 array, or InvalidValues."""
    if not isinstance(values, EncodedVector):
        raise InvalidValues(f"{what}: expected an EncodedVector, got {type(values).__name__}")
    try:
        out = decode(values, length)
    except InvalidValues as exc:
        raise InvalidValues(f"{what}: {exc}") from None
    bound = _encoding_bound(values)
    if bound is None or bound > MAX_ABS_VALUE:
        check_magnitude(out, what)
    return out


def _encoding_bound(values: EncodedVector) -> float | None:
    """A bound on |value| that a decoded (so checked) vector's encoding gives, if any.

    Within :data:`MAX_ABS_VALUE` it spares :func:`check_magnitude`'s pass over
    the values.
    """
    if values.encoding == "int8":  # |data| <= 128 times its block's (finite, >= 0) scale
        return 128.0 * float(values.scales.max()) if values.scales.size else 0.0
    if values.encoding == "f16":
        return float(np.finfo(np.float16).max)
    return None


def _check_flag(value: object, name: str) -> None:
    if not isinstance(value, bool):
        raise RejectedPush(f"{name}: expected a bool, got {value!r}")


def validate_push(push: object, fingerprint: bytes, length: int, max_weight: float) -> np.ndarray:
    """Return the decoded values of ``push``, or raise RejectedPush naming the first problem."""
    if not isinstance(push, Push):
        raise RejectedPush(f"expected a Push message, got {type(push).__name__}")
    if push.model != fingerprint:
        raise RejectedPush(
            f"model fingerprint {bytes(push.model)[:8].hex()}... does not match "
            f"{fingerprint[:8].hex()}..."
        )
    if isinstance(push.push_id, bool) or not isinstance(push.push_id, int) or push.push_id < 0:
        raise RejectedPush(f"push_id: expected a non-negative int, got {push.push_id!r}")
    try:
        check_weight(push.weight, max_weight, "weight")
    except InvalidValues as exc:
        raise RejectedPush(str(exc)) from None
    for name in ("masked", "noisy", "want_reply", "base_by_sender"):
        _check_flag(getattr(push, name), name)
    age = push.noise_age
    if isinstance(age, bool) or not isinstance(age, int) or age < 0:
        raise RejectedPush(f"noise_age: expected a non-negative int, got {age!r}")
    base = push.base
    if isinstance(base, bool) or not isinstance(base, int) or base < 0:
        raise RejectedPush(f"base: expected a non-negative int, got {base!r}")
    if base and (push.masked or push.noisy or not push.want_reply):
        # references come from push-pull exchanges and serve only clean requests
        raise RejectedPush("base: only a push-pull request without mask noise may be a delta")
    # the values last: decoding is the one pass over the payload
    try:
        return decode_values(push.values, length, "values")
    except InvalidValues as exc:
        raise RejectedPush(str(exc)) from None
