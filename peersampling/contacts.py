"""Whom a sampler asks when its views cannot supply a shuffle target.

Bootstrap addresses are asked while the node knows no peer at all; a
restored peer whose descriptor no longer verifies is asked like one
(``rejoin``).  While the main view holds someone but fewer than one shuffle's
worth, every :data:`ISLAND_REJOIN_EVERY` periods a bootstrap address it does
not hold is asked as well: a few nodes that only know each other (two
restarted nodes whose bootstrap refused them, one the other's bootstrap)
would otherwise shuffle among themselves forever.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from .descriptor import parse_address
from .stats import SamplerStats
from .view_set import ViewSet

#: Periods between the bootstrap contacts of a node whose view is too small for a shuffle.
ISLAND_REJOIN_EVERY = 8


class Contacts:
    """Bootstrap and rejoin addresses of one sampler, and when to ask them."""

    def __init__(self, stats: SamplerStats) -> None:
        self.bootstrap: list[str] = []
        self.rejoin: list[str] = []  # checkpointed peers whose descriptor no longer verifies
        self._next = 0
        self._stats = stats

    def set_bootstrap(self, addresses: Sequence[str], own: str, rng: random.Random) -> None:
        """Use ``addresses`` (in a random order; ``own`` and repeats skipped).

        Raises :class:`InvalidDescriptor` (field ``address``) for a malformed one.
        """
        clean: list[str] = []
        for address in addresses:
            parse_address(address)
            if address != own and address not in clean:
                clean.append(address)
        self.bootstrap = clean
        rng.shuffle(self.bootstrap)
        self._next = 0

    def add_rejoin(self, address: str, own: str) -> None:
        """Ask ``address`` like a bootstrap address (a restored peer that no longer verifies)."""
        if address not in self.rejoin and address != own:
            self.rejoin.append(address)

    def fallback(self, views: ViewSet, rng: random.Random) -> str | None:
        """Whom to ask for a main view when it is empty: a model-view peer, else the next
        bootstrap or rejoin address."""
        for v in views.models.values():
            d = v.random_entry(rng)
            if d is not None:
                return d.address
        pool = self.bootstrap + [a for a in self.rejoin if a not in self.bootstrap]
        if not pool:
            return None
        address = pool[self._next % len(pool)]
        self._next += 1
        self._stats.bootstrap_attempts += 1
        return address

    def island_due(self, period: int, main_size: int, shuffle_length: int) -> bool:
        """Whether ``period`` also asks a bootstrap address: the main view holds someone
        but fewer than ``shuffle_length`` entries, and there is an address to ask."""
        return (period % ISLAND_REJOIN_EVERY == 0 and 0 < main_size < shuffle_length
                and bool(self.bootstrap or self.rejoin))

    def island(self, period: int, held: set[str]) -> str | None:
        """The bootstrap address ``period`` asks besides its shuffle: the next one the main
        view does not hold (``held``; one it holds is shuffled with anyway)."""
        pool = [a for a in self.bootstrap + self.rejoin if a not in held]
        if not pool:
            return None
        self._stats.bootstrap_attempts += 1
        return pool[period // ISLAND_REJOIN_EVERY % len(pool)]
