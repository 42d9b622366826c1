"""Random samples of the views, the same as :meth:`random.Random.sample`'s, at a lower cost.

Every period a node samples a few entries of its views two or three times.
The standard library's ``sample`` is general (any sequence, a ``counts``
option, an abstract-base-class check) and calls ``_randbelow`` per draw; at
10,000 simulated nodes it was about a tenth of peer sampling's time.
:func:`sample` makes the very same draws from the generator (``getrandbits``
with the same widths, rejected values redrawn alike, the same pool swaps), so
a seeded run gives exactly the same views.

It is used only for a plain :class:`random.Random` (a subclass may draw
differently) and only if a check at import time finds it identical to the
running Python's own; otherwise the standard method is called.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from math import ceil, log
from typing import TypeVar

T = TypeVar("T")

_Random = random.Random


def _sample(rng: random.Random, population: Sequence[T], k: int) -> list[T]:
    """``rng.sample(population, k)``, written out (the algorithm of CPython's ``random``)."""
    n = len(population)
    if not 0 <= k <= n:
        raise ValueError("Sample larger than population or is negative")
    getrandbits = rng.getrandbits
    result: list[T] = []
    append = result.append
    setsize = 21
    if k > 5:
        setsize += 4 ** ceil(log(k * 3, 4))
    if n <= setsize:
        pool = list(population)
        for i in range(k):
            m = n - i
            bits = m.bit_length()
            j = getrandbits(bits)
            while j >= m:
                j = getrandbits(bits)
            append(pool[j])
            pool[j] = pool[m - 1]
        return result
    selected: set[int] = set()
    bits = n.bit_length()
    for _ in range(k):
        j = getrandbits(bits)
        while j >= n or j in selected:
            j = getrandbits(bits)
        selected.add(j)
        append(population[j])
    return result


def _same_as_the_standard_library() -> bool:
    """Whether :func:`_sample` draws exactly as this Python's ``random``."""
    for seed in range(8):
        ours, theirs = _Random(seed), _Random(seed)
        for n in (1, 2, 3, 7, 19, 20, 21, 22, 40, 100):
            population = list(range(n))
            for k in {0, 1, min(n, 4), min(n, 5), min(n, 6), n // 2}:
                if _sample(ours, population, k) != theirs.sample(population, k):
                    return False
        if ours.getstate() != theirs.getstate():
            return False
    return True


_EXACT = _same_as_the_standard_library()


def sample(rng: random.Random, population: Sequence[T], k: int) -> list[T]:
    """``rng.sample(population, k)``: the same result and the same draws, faster."""
    if _EXACT and type(rng) is _Random:
        return _sample(rng, population, k)
    return rng.sample(population, k)

