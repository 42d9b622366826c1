"""Label permutations written as short spec strings (the papers' "modified MNIST").

A permutation maps each true label `y` to the label the node is taught,
`perm[y]`. Accepted specs (whitespace is ignored around tokens):

- ``""``, ``"id"``, ``"identity"``, ``"()"`` or ``None``: no change;
- swaps ``"8:9"`` or several ``"6:7,8:9"``;
- cycles in cycle notation ``"(7 8 9)"`` (7->8, 8->9, 9->7), products ``"(6 7)(8 9)"``;
- the papers' difference rate ``"rate:r"``: the cycle ``(C-r ... C-1)`` over the
  last `r` of `C` classes (``rate:0`` is the identity, ``rate:1`` is impossible);
- an explicit image list ``"map:1,0,2,3,4,5,6,7,8,9"`` (``perm[i]`` for every class).
"""

from __future__ import annotations

import itertools
import re

import numpy as np

from learner.data_errors import DataError

__all__ = [
    "format_permutation",
    "identity_permutation",
    "last_classes_permutations",
    "parse_permutation",
]

_FORMS = (
    "'id', a swap '8:9' (comma-separated for several), cycles '(7 8 9)(1 2)', "
    "'rate:R' (cycle over the last R classes) or 'map:i0,i1,...'"
)
_CYCLE_RE = re.compile(r"\(([^()]*)\)")


def identity_permutation(num_classes: int) -> np.ndarray:
    """The identity mapping over `num_classes` labels (int64)."""
    return np.arange(num_classes, dtype=np.int64)


def _label(token: str, spec: str, num_classes: int) -> int:
    token = token.strip()
    if not re.fullmatch(r"\d+", token):
        raise DataError(f"permutation {spec!r}: {token!r} is not a class index; expected {_FORMS}")
    value = int(token)
    if value >= num_classes:
        raise DataError(
            f"permutation {spec!r}: class {value} out of range; expected 0..{num_classes - 1}"
        )
    return value


def _apply_cycle(perm: np.ndarray, cycle: list[int], spec: str) -> None:
    """Compose `perm` with a cycle applied after it (so cycles read left to right)."""
    if len(set(cycle)) != len(cycle):
        raise DataError(f"permutation {spec!r}: cycle {tuple(cycle)} repeats a class")
    step = {a: b for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True)}
    for i, image in enumerate(perm):
        perm[i] = step.get(int(image), int(image))


def _parse_cycles(text: str, spec: str, num_classes: int) -> np.ndarray:
    perm = identity_permutation(num_classes)
    rest = _CYCLE_RE.sub("", text)
    if rest.strip():
        raise DataError(f"permutation {spec!r}: unexpected text {rest.strip()!r}; expected {_FORMS}")
    for body in _CYCLE_RE.findall(text):
        tokens = body.replace(",", " ").split()
        if not tokens:
            continue
        _apply_cycle(perm, [_label(t, spec, num_classes) for t in tokens], spec)
    return perm


def parse_permutation(spec: str | None, num_classes: int) -> np.ndarray:
    """Parse a permutation spec into an int64 array `perm` with `perm[true_label] = taught_label`.

    Raises DataError naming the spec and the accepted forms when it is malformed,
    names a class outside ``0..num_classes-1`` or does not describe a bijection.
    """
    if num_classes < 1:
        raise DataError(f"permutation: num_classes must be >= 1, got {num_classes}")
    text = "" if spec is None else spec.strip()
    if text.lower() in ("", "id", "identity", "none"):
        return identity_permutation(num_classes)
    if text.startswith("("):
        return _parse_cycles(text, spec or "", num_classes)
    if text.lower().startswith("rate:"):
        value = text[5:].strip()
        if not re.fullmatch(r"\d+", value):
            raise DataError(f"permutation {spec!r}: rate must be an integer; expected 'rate:R'")
        rate = int(value)
        if rate == 1 or rate > num_classes:
            raise DataError(
                f"permutation {spec!r}: difference rate must be 0 or 2..{num_classes}, got {rate}"
            )
        perm = identity_permutation(num_classes)
        if rate:
            _apply_cycle(perm, list(range(num_classes - rate, num_classes)), spec or "")
        return perm
    if text.lower().startswith("map:"):
        images = [_label(t, spec or "", num_classes) for t in text[4:].split(",")]
        if len(images) != num_classes or sorted(images) != list(range(num_classes)):
            raise DataError(
                f"permutation {spec!r}: 'map:' needs each of the {num_classes} classes exactly once"
            )
        return np.asarray(images, dtype=np.int64)
    if ":" in text:
        perm = identity_permutation(num_classes)
        for pair in text.split(","):
            parts = pair.split(":")
            if len(parts) != 2:
                raise DataError(f"permutation {spec!r}: bad swap {pair.strip()!r}; expected 'A:B'")
            a, b = (_label(p, spec or "", num_classes) for p in parts)
            if a == b:
                raise DataError(f"permutation {spec!r}: swap {pair.strip()!r} swaps a class with itself")
            _apply_cycle(perm, [a, b], spec or "")
        return perm
    raise DataError(f"permutation {spec!r}: unrecognised form; expected {_FORMS}")


def format_permutation(perm: np.ndarray) -> str:
    """Cycle notation for `perm` (``"id"`` for the identity), accepted by `parse_permutation`."""
    seen: set[int] = set()
    cycles: list[str] = []
    for start in range(len(perm)):
        if start in seen or int(perm[start]) == start:
            continue
        cycle = [start]
        seen.add(start)
        current = int(perm[start])
        while current != start:
            cycle.append(current)
            seen.add(current)
            current = int(perm[current])
        cycles.append("(" + " ".join(map(str, cycle)) + ")")
    return "".join(cycles) or "id"


def last_classes_permutations(count: int = 3, num_classes: int = 10) -> list[str]:
    """Specs for all `count`! permutations of the last `count` classes, identity first.

    With the defaults: the six elements of S3 acting on digits 7, 8, 9, as in
    the papers' semi-local experiment (``id``, ``(8 9)``, ``(7 8)``, ...).
    """
    if not 1 <= count <= num_classes:
        raise DataError(f"last_classes_permutations: count must be 1..{num_classes}, got {count}")
    classes = list(range(num_classes - count, num_classes))
    specs: list[str] = []
    for images in itertools.permutations(classes):
        perm = np.asarray(list(range(num_classes - count)) + list(images), dtype=np.int64)
        specs.append(format_permutation(perm))
    return specs
