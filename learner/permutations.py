"""Label permutations (the papers' "modified MNIST"): one notation, one parser.

A permutation maps each true label ``y`` to the label the node is taught,
``perm[y]``: a product of disjoint cycles. Accepted forms: ``"id"`` (also ``""``,
``"identity"``, ``"none"``, ``"()"``, ``None``); colon cycles separated by commas,
``"8:9,6:7"`` (the canonical form, written by :func:`format_cycles` and
:func:`format_permutation`); parenthesised cycles ``"(7 8 9)(6 7)"``; the
papers' difference rate ``"rate:r"`` (the cycle over the last ``r`` classes);
an image list ``"map:1,0,2,..."``. A comma always separates cycles (or images),
never labels of one cycle.

See docs/guide/data-and-training.md ("How the data is split").
"""

from __future__ import annotations

import itertools
import re

import numpy as np

from learner.data_errors import DataError

__all__ = [
    "Cycles",
    "cycles_of",
    "format_cycles",
    "format_permutation",
    "identity_permutation",
    "last_classes_permutations",
    "parse_cycles",
    "parse_permutation",
]

#: A permutation as disjoint cycles, e.g. ``((8, 9), (6, 7))``; ``()`` is the identity.
Cycles = tuple[tuple[int, ...], ...]

_FORMS = (
    "'id', cycles '8:9' or '7:8:9' (comma-separated for several, e.g. '8:9,6:7'), "
    "'(7 8 9)(1 2)', 'rate:R' (cycle over the last R classes) or 'map:i0,i1,...'"
)
_IDENTITY = ("", "id", "identity", "none")
_CYCLE_RE = re.compile(r"\(([^()]*)\)")


def identity_permutation(num_classes: int) -> np.ndarray:
    """The identity mapping over `num_classes` labels (int64)."""
    return np.arange(num_classes, dtype=np.int64)


def _label(token: str, spec: str, num_classes: int | None) -> int:
    token = token.strip()
    if not re.fullmatch(r"\d+", token):
        raise DataError(f"permutation {spec!r}: {token!r} is not a class index; expected {_FORMS}")
    value = int(token)
    if num_classes is not None and value >= num_classes:
        raise DataError(f"permutation {spec!r}: class {value} out of range: it does not exist "
                        f"among {num_classes} classes (expected labels 0..{num_classes - 1})")
    return value


def _checked(cycles: list[tuple[int, ...]], spec: str) -> Cycles:
    seen: set[int] = set()
    out: list[tuple[int, ...]] = []
    for cycle in cycles:
        text = ":".join(map(str, cycle))
        if len(set(cycle)) != len(cycle):
            raise DataError(f"permutation {spec!r}: cycle {text} repeats a class (a class cannot "
                            "be mapped to itself or twice)")
        shared = seen.intersection(cycle)
        if shared:
            raise DataError(f"permutation {spec!r}: class {min(shared)} appears in two cycles; "
                            "cycles must be disjoint")
        seen.update(cycle)
        if len(cycle) > 1:
            out.append(cycle)
    return tuple(out)


def _need_classes(spec: str, num_classes: int | None, form: str) -> int:
    if num_classes is None:
        raise DataError(f"permutation {spec!r}: '{form}' needs the number of classes")
    return num_classes


def parse_cycles(spec: str | None, num_classes: int | None = None) -> Cycles:
    """Parse a permutation spec into disjoint cycles, in the order written.

    With ``num_classes``, labels must lie in ``0..num_classes-1`` (and the
    ``rate:``/``map:`` forms, which need it, are accepted). Raises
    :class:`DataError` naming the spec and the accepted forms.
    """
    if spec is not None and not isinstance(spec, str):
        raise DataError(f"permutation: expected a string such as '8:9', got "
                        f"{type(spec).__name__}")
    raw = spec or ""
    text = raw.strip()
    if text.lower() in _IDENTITY:
        return ()
    if text.startswith("("):
        rest = _CYCLE_RE.sub("", text)
        if rest.strip():
            raise DataError(f"permutation {raw!r}: unexpected text {rest.strip()!r}; "
                            f"expected {_FORMS}")
        bodies = _CYCLE_RE.findall(text)
        if any("," in body for body in bodies):
            raise DataError(f"permutation {raw!r}: a comma separates cycles, not labels; write "
                            "the labels of one cycle with spaces, e.g. '(7 8 9)', or use '7:8:9'")
        return _checked([tuple(_label(t, raw, num_classes) for t in body.split())
                         for body in bodies], raw)
    lowered = text.lower()
    if lowered.startswith("rate:"):
        n = _need_classes(raw, num_classes, "rate:R")
        value = text[5:].strip()
        if not re.fullmatch(r"\d+", value):
            raise DataError(f"permutation {raw!r}: rate must be an integer; expected 'rate:R'")
        rate = int(value)
        if rate == 1 or rate > n:
            raise DataError(f"permutation {raw!r}: difference rate must be 0 or 2..{n}, "
                            f"got {rate}")
        return (tuple(range(n - rate, n)),) if rate else ()
    if lowered.startswith("map:"):
        n = _need_classes(raw, num_classes, "map:")
        images = [_label(t, raw, n) for t in text[4:].split(",")]
        if len(images) != n or sorted(images) != list(range(n)):
            raise DataError(f"permutation {raw!r}: 'map:' needs each of the {n} classes "
                            "exactly once")
        return cycles_of(np.asarray(images, dtype=np.int64))
    if ":" in text:
        return _checked([tuple(_label(t, raw, num_classes) for t in chunk.split(":"))
                         for chunk in text.split(",")], raw)
    raise DataError(f"permutation {raw!r}: cannot parse: unrecognised form; expected {_FORMS}")


def parse_permutation(spec: str | None, num_classes: int) -> np.ndarray:
    """Parse a permutation spec into an int64 array `perm` with `perm[true_label] = taught_label`.

    Raises DataError naming the spec and the accepted forms when it is malformed
    or names a class outside ``0..num_classes-1``.
    """
    if num_classes < 1:
        raise DataError(f"permutation: num_classes must be >= 1, got {num_classes}")
    perm = identity_permutation(num_classes)
    for cycle in parse_cycles(spec, num_classes):
        for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True):
            perm[a] = b
    return perm


def cycles_of(perm: np.ndarray) -> Cycles:
    """The disjoint cycles of `perm`, each starting at its smallest label, in label order."""
    seen: set[int] = set()
    cycles: list[tuple[int, ...]] = []
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
        cycles.append(tuple(cycle))
    return tuple(cycles)


def format_cycles(cycles: Cycles) -> str:
    """The canonical notation of `cycles`: ``"8:9,6:7"`` (``"id"`` for the identity)."""
    return ",".join(":".join(map(str, c)) for c in cycles) or "id"


def format_permutation(perm: np.ndarray) -> str:
    """Canonical notation for `perm` (``"id"`` for the identity), accepted by `parse_permutation`."""
    return format_cycles(cycles_of(perm))


def last_classes_permutations(count: int = 3, num_classes: int = 10) -> list[str]:
    """Specs for all `count`! permutations of the last `count` classes, identity first.

    With the defaults: the six elements of S3 acting on digits 7, 8, 9, as in
    the papers' semi-local experiment (``id``, ``8:9``, ``7:8``, ...).
    """
    if not 1 <= count <= num_classes:
        raise DataError(f"last_classes_permutations: count must be 1..{num_classes}, got {count}")
    classes = list(range(num_classes - count, num_classes))
    specs: list[str] = []
    for images in itertools.permutations(classes):
        perm = np.asarray(list(range(num_classes - count)) + list(images), dtype=np.int64)
        specs.append(format_permutation(perm))
    return specs
