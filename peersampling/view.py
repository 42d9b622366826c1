"""A bounded partial view with Cyclon's aging and merge rules.

Entries are keyed by node id, so a view never holds duplicates. Ages are kept
in a separate integer map, as births against a tick counter (see
:mod:`peersampling.aged`): aging every entry each period is one increment and
descriptors are only rebuilt when they leave the view.
"""

from __future__ import annotations

from collections.abc import Container, Iterable

from .aged import AgedEntries
from .descriptor import Descriptor, with_age


def next_victim(replaceable: list[bytes], present: Container[bytes]) -> bytes | None:
    """Pop ``replaceable`` (entries sent in the shuffle, last to go first) until an id
    still ``present`` in the view comes up: the entry a received one replaces (None:
    nothing left to replace)."""
    while replaceable:
        candidate = replaceable.pop()
        if candidate in present:
            return candidate
    return None


class PartialView(AgedEntries):
    """At most ``capacity`` descriptors, each with an age.

    The owner is responsible for never inserting its own descriptor.
    """

    __slots__ = ("capacity",)

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"view capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._desc: dict[bytes, Descriptor] = {}
        self._born: dict[bytes, int] = {}
        self._now = 0

    @property
    def is_full(self) -> bool:
        return len(self._born) >= self.capacity

    def pop(self, node_id: bytes) -> Descriptor | None:
        """Remove and return the entry for ``node_id`` (with its age)."""
        d = self._desc.pop(node_id, None)
        if d is None:
            return None
        return with_age(d, self._now - self._born.pop(node_id))

    def remove_address(self, address: str) -> int:
        """Drop every entry reachable at ``address``; return how many."""
        gone = [k for k, d in self._desc.items() if d.address == address]
        for k in gone:
            del self._desc[k]
            del self._born[k]
        return len(gone)

    def _update_known(self, n: bytes, d: Descriptor, fresh: bool) -> None:
        """Take news about an entry already in the view.

        Only a descriptor heard from the node itself (``fresh``) resets the
        age. A younger copy from a third party may update the address and
        tags but not the age: copies of a dead node's descriptor bouncing
        between views must keep aging, or the dead entry is never the
        oldest and is never purged.

        Epochs (signed by the node) come first: an older epoch is ignored
        even first-hand (a replay), a newer one replaces the address and tags
        (the age only if fresh). Unsigned descriptors all have epoch 0.
        """
        cur = self._desc[n]
        cur_epoch = cur.epoch
        if d.epoch < cur_epoch:
            return
        if d.epoch > cur_epoch and not fresh:
            self._desc[n] = with_age(d, self._now - self._born[n])
            return
        if fresh:
            self._desc[n] = d
            self._born[n] = self._now - d.age
            return
        if d.age < self._now - self._born[n] and (d.tags != cur.tags or d.address != cur.address):
            self._desc[n] = d

    def offer(self, d: Descriptor, *, fresh: bool = False) -> bool:
        """Add ``d`` if there is room; if known, take its news (see above).

        Returns ``True`` when ``d`` was added.
        """
        n = d.node_id
        born = self._born
        if n in born:
            self._update_known(n, d, fresh)
            return False
        if len(born) < self.capacity:
            self._desc[n] = d
            born[n] = self._now - d.age
            return True
        return False

    def merge(
        self,
        received: Iterable[Descriptor],
        sent: Iterable[bytes],
        fresh_id: bytes | None = None,
    ) -> int:
        """Cyclon merge: take ``received``, making room by evicting ``sent``.

        A received entry already in the view is not added again (only its
        news is taken, and its age reset if it is ``fresh_id``, the peer we
        are talking to); a new one fills an empty slot first, otherwise
        replaces one of the entries sent in this exchange that is still here;
        if neither is possible it is dropped. Returns the number of new entries.
        """
        desc, born, cap, now = self._desc, self._born, self.capacity, self._now
        fresh: list[Descriptor] = []
        for d in received:  # decide what is known before changing anything
            n = d.node_id
            if n in born:
                self._update_known(n, d, n == fresh_id)
            else:
                fresh.append(d)
        replaceable = [n for n in sent if n in born]
        replaceable.reverse()  # pop() evicts in the order the entries were sent
        added = 0
        for d in fresh:
            n = d.node_id
            if n in born:  # listed twice in ``received``
                continue
            if len(born) >= cap:
                victim = next_victim(replaceable, born)
                if victim is None:
                    continue
                del desc[victim]
                del born[victim]
            desc[n] = d
            born[n] = now - d.age
            added += 1
        return added

    def clear(self) -> None:
        self._desc.clear()
        self._born.clear()
