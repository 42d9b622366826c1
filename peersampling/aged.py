"""Read-side bookkeeping shared by the views: descriptors keyed by id, with ages.

:class:`~peersampling.view.PartialView` (Cyclon) and
:class:`~peersampling.ranked.RankedView` (seeded samplers) decide differently
*which* ids they hold, but both keep the held descriptors in ``_desc`` and
their ages in a separate integer map (same keys), so descriptors are only
rebuilt, with their current age, when they leave the view. The map holds the
*birth* of each entry (``_born[id] = _now - age``) against a tick counter
``_now``, so aging every entry each period is one increment, not a loop.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from .descriptor import Descriptor, with_age
from .draws import sample


class AgedEntries:
    """Queries and aging over ``_desc`` / ``_born``; subclasses fill both."""

    __slots__ = ("_desc", "_born", "_now")

    _desc: dict[bytes, Descriptor]
    _born: dict[bytes, int]  # node id -> _now minus its age
    _now: int  # periods aged so far

    def __len__(self) -> int:
        return len(self._born)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._born

    def __iter__(self) -> Iterator[bytes]:
        return iter(list(self._born))

    def age_of(self, node_id: bytes) -> int | None:
        born = self._born.get(node_id)
        return None if born is None else self._now - born

    def get(self, node_id: bytes) -> Descriptor | None:
        """The entry for ``node_id`` with its current age, or ``None``."""
        d = self._desc.get(node_id)
        return None if d is None else with_age(d, self._now - self._born[node_id])

    def descriptors(self) -> list[Descriptor]:
        """Every entry with its current age, in insertion order."""
        born, now = self._born, self._now
        return [with_age(d, now - born[k]) for k, d in self._desc.items()]

    def addresses(self) -> list[str]:
        return [d.address for d in self._desc.values()]

    def increase_age(self) -> None:
        """Age every entry by one."""
        self._now += 1

    def oldest(self, rng: random.Random) -> bytes | None:
        """Node id of the oldest entry (ties broken at random), or ``None``."""
        born = self._born
        if not born:
            return None
        first = min(born.values())
        candidates = [k for k, b in born.items() if b == first]
        return candidates[0] if len(candidates) == 1 else rng.choice(candidates)

    def random_subset(
        self, rng: random.Random, k: int, exclude: bytes | None = None
    ) -> list[Descriptor]:
        """Up to ``k`` distinct random entries, never the one for ``exclude``."""
        born, desc, now = self._born, self._desc, self._now
        keys = list(born)
        if exclude is not None and exclude in born:
            keys.remove(exclude)  # keys are distinct: the one copy, order kept
        if len(keys) > k:
            keys = sample(rng, keys, k)
        return [with_age(desc[n], now - born[n]) for n in keys]

    def random_entry(self, rng: random.Random) -> Descriptor | None:
        born = self._born
        if not born:
            return None
        n = rng.choice(list(born))
        return with_age(self._desc[n], self._now - born[n])
