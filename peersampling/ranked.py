"""A view of seeded min-wise samplers (Brahms' history samplers, Basalt's view).

A keyed hash, secret to this node, puts each id in one of ``capacity`` slots
with a rank; a slot holds the lowest-ranked id it has been offered, so it ends
up a uniform pick among the distinct ids that fell into it, whatever the order
or repetition: flooding gains an adversary nothing beyond its number of
identities (Bortnikov et al., "Brahms", 2009; Auvolat et al., "Basalt", 2021).
While fewer ids are known than slots, an id whose slot is taken parks in an
empty one as a *spare*, so small views keep every member. Only *proven*
descriptors (whose address answered with that id) occupy slots; unproven
winners wait in a bounded candidate list until probed. Ages count periods
since the holder last answered; they pick whom to shuffle with next.

How it works: docs/design/trust.md ("Fake identities").
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable

from .aged import AgedEntries
from .descriptor import Descriptor, with_age

_EMPTY = 1 << 33  # rank of an empty slot: worse than anything
_SPARE = 1 << 32  # rank of a spare (an id parked outside its own slot): any owner wins


def slot_and_rank(key: bytes, node_id: bytes, slots: int) -> tuple[int, int]:
    """The slot ``node_id`` belongs to and its 32-bit rank there (keyed BLAKE2b).

    ``key`` is secret to the node, so an adversary can neither choose the
    slot its ids fall into nor make them rank low. One hash per id: the cost
    of a view update does not grow with the view size.
    """
    h = int.from_bytes(hashlib.blake2b(node_id, key=key, digest_size=8).digest(), "big")
    return (h >> 32) % slots, h & 0xFFFFFFFF


class RankedView(AgedEntries):
    """``capacity`` seeded samplers plus the candidates waiting for a probe.

    ``max_candidates`` bounds the candidate list; when it is full a pushed
    (unsolicited) candidate is evicted before a pulled one.
    """

    __slots__ = (
        "capacity", "max_candidates", "_key", "_salts", "_slot", "_rank", "_empty",
        "_where", "_candidates", "_losers",
    )

    def __init__(self, capacity: int, rng: random.Random, *, max_candidates: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f"view capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.max_candidates = max_candidates or 2 * capacity
        self._key = rng.getrandbits(128).to_bytes(16, "big")
        self._salts = [rng.getrandbits(32) for _ in range(capacity)]
        self._slot: list[bytes | None] = [None] * capacity
        self._rank = [_EMPTY] * capacity
        self._empty = list(range(capacity - 1, -1, -1))  # empty slots (lowest index last)
        self._where: dict[bytes, int] = {}  # holder -> its slot
        self._desc: dict[bytes, Descriptor] = {}
        self._born: dict[bytes, int] = {}  # holder -> _now minus its age (see AgedEntries)
        self._now = 0
        # id -> (descriptor, pulled): would win a slot, waiting for a probe
        self._candidates: dict[bytes, tuple[Descriptor, bool]] = {}
        # ids known to win no slot; valid while no slot's rank goes up
        self._losers: set[bytes] = set()

    # ----------------------------------------------------------- the view

    @property
    def is_full(self) -> bool:
        return not self._empty

    def refresh(self, node_id: bytes) -> None:
        """``node_id`` answered us: its age restarts at 0."""
        if node_id in self._born:
            self._born[node_id] = self._now

    def slot_holders(self) -> list[bytes | None]:
        """The holder of every slot (``None`` = empty), for tests and metrics."""
        return list(self._slot)

    # ------------------------------------------------------------ updates

    def _place(self, n: bytes) -> tuple[int, int]:
        """``(slot, rank)`` of ``n`` under the current salts."""
        slot, rank = slot_and_rank(self._key, n, self.capacity)
        return slot, rank ^ self._salts[slot]

    def _winning_slot(self, n: bytes) -> tuple[int, int] | None:
        """The slot ``n`` would take now (its own, else an empty one), with its rank there."""
        slot, rank = self._place(n)
        if rank < self._rank[slot]:
            return slot, rank
        if self._empty:
            return self._empty[-1], _SPARE
        return None

    def consider(self, d: Descriptor, *, proven: bool, pulled: bool = True) -> bool:
        """Offer ``d`` to its slot; returns ``True`` if it holds a slot now.

        A proven ``d`` takes its slot if it ranks below the holder (or parks
        in an empty slot); an unproven one that would win becomes a candidate.
        For a known holder, a higher ``epoch`` replaces the stored descriptor
        (a new address must be proven again); otherwise only a proven copy
        refreshes the age.
        """
        n = d.node_id
        cur = self._desc.get(n)
        if cur is not None:
            if d.epoch > cur.epoch:
                if d.address != cur.address and not proven:
                    self._candidates[n] = (d, pulled)
                    return True
                self._desc[n] = d
            if proven:
                self._born[n] = self._now
            return True
        waiting = self._candidates.get(n)
        if waiting is not None and not proven:
            if d.epoch > waiting[0].epoch:
                self._candidates[n] = (d, waiting[1] or pulled)
            return False
        if n in self._losers:
            return False
        win = self._winning_slot(n)
        if win is None:
            self._candidates.pop(n, None)
            if len(self._losers) >= 1 << 14:
                self._losers.clear()
            self._losers.add(n)
            return False
        if not proven:
            self._add_candidate(d, pulled)
            return False
        self._candidates.pop(n, None)
        slot, rank = win
        old = self._slot[slot]
        if old is None:
            self._empty.remove(slot)
        self._slot[slot] = n
        self._rank[slot] = rank
        self._where[n] = slot
        self._desc[n] = d
        self._born[n] = self._now
        if old is not None:
            # The displaced holder may still park in an empty slot (keeping its age).
            del self._where[old]
            old_d = self._desc.pop(old)
            old_born = self._born.pop(old)
            if self._empty and self.consider(old_d, proven=True):
                self._born[old] = old_born
        return True

    def offer(self, d: Descriptor, *, fresh: bool = False) -> bool:
        """:meth:`consider` with ``proven=fresh`` (the interface of :class:`PartialView`)."""
        return self.consider(d, proven=fresh)

    def merge(
        self,
        received: Iterable[Descriptor],
        sent: Iterable[bytes],
        fresh_id: bytes | None = None,
    ) -> int:
        """Consider every received descriptor (``fresh_id``'s as proven); ``sent`` is unused.

        Ranked slots swap nothing away: what this node sends stays in its view.
        """
        added = 0
        for d in received:
            added += self.consider(d, proven=d.node_id == fresh_id)
        return added

    def _add_candidate(self, d: Descriptor, pulled: bool) -> None:
        cands = self._candidates
        if len(cands) >= self.max_candidates:
            victim = next((k for k, (_, p) in cands.items() if not p), None)
            if victim is None:
                if not pulled:
                    return  # full of pulled candidates: a pushed one waits its turn
                victim = next(iter(cands))
            del cands[victim]
        cands[d.node_id] = (d, pulled)

    def take_candidates(self, k: int, *, pushed: int) -> list[tuple[Descriptor, bool]]:
        """Up to ``k`` ``(candidate, pulled)`` pairs that still win a slot, to be probed.

        Pulled candidates come first; at most ``pushed`` unsolicited ones. The
        returned candidates leave the list (a failed probe forgets them).
        """
        out: list[tuple[Descriptor, bool]] = []
        for pulled_pass in (True, False):
            budget = k - len(out) if pulled_pass else min(k - len(out), pushed)
            if budget <= 0:
                continue
            for n, (d, pulled) in list(self._candidates.items()):
                if pulled != pulled_pass:
                    continue
                del self._candidates[n]
                if n not in self._desc and self._winning_slot(n) is None:
                    continue  # (a holder's candidate is a newer version: still wanted)
                out.append((d, pulled))
                budget -= 1
                if budget <= 0:
                    break
        return out

    def has_candidates(self) -> bool:
        return bool(self._candidates)

    def _vacate(self, slot: int) -> None:
        self._slot[slot] = None
        self._rank[slot] = _EMPTY
        self._empty.append(slot)
        self._losers.clear()  # a slot's rank went up: earlier losers may win it

    def pop(self, node_id: bytes) -> Descriptor | None:
        """Remove ``node_id`` (and its candidate); return its entry.

        The slot stays empty until another id is offered; ids that lost
        before are examined again.
        """
        self._candidates.pop(node_id, None)
        d = self._desc.pop(node_id, None)
        if d is None:
            return None
        age = self._now - self._born.pop(node_id)
        self._vacate(self._where.pop(node_id))
        return with_age(d, age)

    def remove_address(self, address: str) -> int:
        """Drop every holder and candidate reachable at ``address``; return how many holders."""
        for n in [n for n, (d, _) in self._candidates.items() if d.address == address]:
            del self._candidates[n]
        gone = [n for n, d in self._desc.items() if d.address == address]
        for n in gone:
            self.pop(n)
        return len(gone)

    def reset_slot(self, rng: random.Random) -> int:
        """Give one random slot a new salt (Basalt's reset); returns its index.

        The holder keeps the slot with its rank under the new salt; ids that
        fall into the slot compete from then on under the new ranking.
        """
        i = rng.randrange(self.capacity)
        self._salts[i] = rng.getrandbits(32)
        n = self._slot[i]
        if n is not None and self._rank[i] != _SPARE:
            self._rank[i] = self._place(n)[1]
        self._losers.clear()
        return i

    def clear(self) -> None:
        self._slot = [None] * self.capacity
        self._rank = [_EMPTY] * self.capacity
        self._empty = list(range(self.capacity - 1, -1, -1))
        self._where.clear()
        self._desc.clear()
        self._born.clear()
        self._candidates.clear()
        self._losers.clear()
