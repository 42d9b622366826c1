"""Read-side bookkeeping shared by the views: descriptors keyed by id, with ages.

:class:`~peersampling.view.PartialView` (Cyclon) and
:class:`~peersampling.ranked.RankedView` (seeded samplers) decide differently
*which* ids they hold, but both keep the held descriptors in ``_desc`` and
their ages in a separate integer map ``_age`` (same keys), so aging every
entry each period is a cheap loop and descriptors are only rebuilt, with their
current age, when they leave the view.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from .descriptor import Descriptor, with_age


class AgedEntries:
    """Queries and aging over ``_desc`` / ``_age``; subclasses fill both."""

    __slots__ = ()

    _desc: dict[bytes, Descriptor]
    _age: dict[bytes, int]

    def __len__(self) -> int:
        return len(self._age)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._age

    def __iter__(self) -> Iterator[bytes]:
        return iter(list(self._age))

    def age_of(self, node_id: bytes) -> int | None:
        return self._age.get(node_id)

    def get(self, node_id: bytes) -> Descriptor | None:
        """The entry for ``node_id`` with its current age, or ``None``."""
        d = self._desc.get(node_id)
        return None if d is None else with_age(d, self._age[node_id])

    def descriptors(self) -> list[Descriptor]:
        """Every entry with its current age, in insertion order."""
        ages = self._age
        return [with_age(d, ages[k]) for k, d in self._desc.items()]

    def addresses(self) -> list[str]:
        return [d.address for d in self._desc.values()]

    def increase_age(self) -> None:
        ages = self._age
        for k in ages:
            ages[k] += 1

    def oldest(self, rng: random.Random) -> bytes | None:
        """Node id of the oldest entry (ties broken at random), or ``None``."""
        ages = self._age
        if not ages:
            return None
        top = max(ages.values())
        candidates = [k for k, a in ages.items() if a == top]
        return candidates[0] if len(candidates) == 1 else rng.choice(candidates)

    def random_subset(
        self, rng: random.Random, k: int, exclude: bytes | None = None
    ) -> list[Descriptor]:
        """Up to ``k`` distinct random entries, never the one for ``exclude``."""
        keys = list(self._age) if exclude is None else [n for n in self._age if n != exclude]
        if len(keys) > k:
            keys = rng.sample(keys, k)
        ages, desc = self._age, self._desc
        return [with_age(desc[n], ages[n]) for n in keys]

    def random_entry(self, rng: random.Random) -> Descriptor | None:
        if not self._age:
            return None
        n = rng.choice(list(self._age))
        return with_age(self._desc[n], self._age[n])
