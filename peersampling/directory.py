"""A small cache of recently seen holders of models this node does not hold.

Every node sees a steady stream of descriptors while shuffling. Remembering a
few recent holders per fingerprint lets any node answer "who holds model m?"
for a node that is looking for partners, so a model held by a handful of nodes
among thousands is found in a few periods instead of waiting for its holders to
meet by chance.
"""

from __future__ import annotations

from collections import OrderedDict

from .descriptor import Descriptor, with_age


class HolderDirectory:
    """Bounded LRU map ``fingerprint -> recent holders``.

    Entries remember the period in which they were seen, so that when they are
    handed out their age includes the time spent in the cache. Entries older
    than ``max_age`` are never handed out.
    """

    __slots__ = ("max_tags", "per_tag", "max_age", "_by_tag", "_tags_by_address")

    def __init__(self, *, max_tags: int = 256, per_tag: int = 8, max_age: int = 50) -> None:
        self.max_tags = max_tags
        self.per_tag = per_tag
        self.max_age = max_age
        self._by_tag: OrderedDict[bytes, OrderedDict[bytes, tuple[Descriptor, int]]] = OrderedDict()
        self._tags_by_address: dict[str, set[bytes]] = {}

    def __len__(self) -> int:
        return len(self._by_tag)

    def observe(self, tag: bytes, d: Descriptor, period: int) -> None:
        """Remember ``d`` as a holder of ``tag`` seen during ``period``."""
        if self.max_tags <= 0:
            return
        holders = self._by_tag.get(tag)
        if holders is None:
            if len(self._by_tag) >= self.max_tags:
                old_tag, old_holders = self._by_tag.popitem(last=False)
                for old, _ in old_holders.values():
                    self._unindex(old.address, old_tag)
            holders = self._by_tag[tag] = OrderedDict()
        else:
            self._by_tag.move_to_end(tag)
        n = d.node_id
        previous = holders.pop(n, None)
        if previous is not None:
            prev_d, prev_period = previous
            # Keep whichever is fresher once cache time is accounted for.
            if prev_d.age + (period - prev_period) <= d.age:
                holders[n] = previous
                return
            if prev_d.address != d.address:
                self._unindex(prev_d.address, tag)
        holders[n] = (d, period)
        self._tags_by_address.setdefault(d.address, set()).add(tag)
        while len(holders) > self.per_tag:
            _, (evicted, _) = holders.popitem(last=False)
            self._unindex(evicted.address, tag)

    def holders(
        self, tag: bytes, period: int, k: int, exclude: bytes | None = None
    ) -> list[Descriptor]:
        """Up to ``k`` most recently seen holders of ``tag``, with aged ages."""
        held = self._by_tag.get(tag)
        if not held:
            return []
        out: list[Descriptor] = []
        for n, (d, seen) in reversed(held.items()):
            if n == exclude:
                continue
            age = d.age + (period - seen)
            if age > self.max_age:
                continue
            out.append(with_age(d, age))
            if len(out) >= k:
                break
        return out

    def forget_address(self, address: str) -> None:
        """Drop every holder reachable at ``address`` (it failed)."""
        tags = self._tags_by_address.pop(address, None)
        if not tags:
            return
        for tag in tags:
            held = self._by_tag.get(tag)
            if held is None:
                continue
            for n in [n for n, (d, _) in held.items() if d.address == address]:
                del held[n]
            if not held:
                del self._by_tag[tag]

    def forget_tag(self, tag: bytes) -> None:
        held = self._by_tag.pop(tag, None)
        if held:
            for d, _ in held.values():
                self._unindex(d.address, tag)

    def _unindex(self, address: str, tag: bytes) -> None:
        tags = self._tags_by_address.get(address)
        if tags is not None:
            tags.discard(tag)
            if not tags:
                del self._tags_by_address[address]
