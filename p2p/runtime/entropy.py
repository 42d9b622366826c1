"""Where a node's random choices come from: the OS (daemons) or one seed (simulations).

A daemon draws its partner choice, peer-sampling picks, push ids, masks and
nonces from the operating system, so that no peer can predict them; that is
what ``entropy=None`` keeps everywhere. A simulation gives each node an
:class:`Entropy`: named, independent streams derived from the run's seed, so
that a run repeats. Each request of a name gets a stream of its own (the
second ``random("x")`` is not the first one again). The ``*_for`` helpers
give today's OS-drawn object for ``None``. See docs/guide/simulation.md
("Reproducible runs").
"""

from __future__ import annotations

import hashlib
import os
import random

import numpy as np

__all__ = ["Entropy", "generator_for", "random_for", "seed_for"]


class Entropy:
    """Independent random streams, one per purpose, all derived from ``seed``."""

    def __init__(self, seed: int | str | bytes, *path: int | str) -> None:
        self._key = hashlib.sha256(repr((seed, *path)).encode()).digest()
        self._asked: dict[str, int] = {}

    def child(self, *path: int | str) -> Entropy:
        """A source of its own under ``path`` (a simulation's node, a node's life)."""
        return Entropy(self._key, *path)

    def seed(self, purpose: str) -> int:
        """A 63-bit seed for ``purpose`` (fresh at each request)."""
        count = self._asked.get(purpose, 0)
        self._asked[purpose] = count + 1
        digest = hashlib.sha256(self._key + repr((purpose, count)).encode()).digest()
        return int.from_bytes(digest[:8], "big") >> 1

    def random(self, purpose: str) -> random.Random:
        """A :class:`random.Random` for ``purpose``."""
        return random.Random(self.seed(purpose))

    def generator(self, purpose: str) -> np.random.Generator:
        """A numpy Generator for ``purpose``."""
        return np.random.default_rng(self.seed(purpose))


def random_for(entropy: Entropy | None, purpose: str) -> random.Random:
    """``entropy``'s stream for ``purpose``; None: seeded from os.urandom (a daemon's)."""
    if entropy is None:
        return random.Random(int.from_bytes(os.urandom(8), "big"))
    return entropy.random(purpose)


def generator_for(entropy: Entropy | None, purpose: str) -> np.random.Generator | None:
    """``entropy``'s Generator for ``purpose``; None: None (the callee draws from the OS)."""
    return None if entropy is None else entropy.generator(purpose)


def seed_for(entropy: Entropy | None, purpose: str) -> int | None:
    """``entropy``'s seed for ``purpose``; None: None (the callee draws from the OS)."""
    return None if entropy is None else entropy.seed(purpose)
