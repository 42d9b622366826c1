"""The views of one peer sampler: the main view, one per model held, the holder cache.

The main view samples the whole swarm; each model this node holds has a view
of its holders, fed from every valid descriptor that names the model
(:meth:`ViewSet.observe`); the holder cache (:class:`HolderDirectory`)
remembers recent holders of models this node does not hold, to answer other
nodes' lookups.  Views are plain Cyclon views (:class:`PartialView`) or, under
the Sybil rules, rank samplers (:class:`RankedView`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from .descriptor import Descriptor
from .directory import HolderDirectory
from .ranked import RankedView
from .rules import SybilRules
from .view import PartialView

AnyView = PartialView | RankedView


class ViewSet:
    """Main view, model views and holder cache of one sampler."""

    def __init__(self, c: int, model_view_size: int, l: int,  # noqa: E741 - as PeerSampler
                 rng: random.Random, rules: SybilRules | None, directory_tags: int) -> None:
        self.rng = rng
        self.rules = rules
        self.model_view_size = model_view_size
        self.main: AnyView = self.new_view(c)
        self.models: dict[bytes, AnyView] = {}
        self.directory = HolderDirectory(max_tags=directory_tags, per_tag=2 * l, max_age=2 * c)

    def new_view(self, capacity: int) -> AnyView:
        """An empty view (a rank sampler under the Sybil rules)."""
        if self.rules is None:
            return PartialView(capacity)
        return RankedView(capacity, self.rng, max_candidates=self.rules.max_candidates or 0)

    def of(self, model: bytes | None) -> AnyView | None:
        """The main view (``model`` None) or ``model``'s view (None: not held)."""
        return self.main if model is None else self.models.get(model)

    def every(self) -> tuple[AnyView, ...]:
        """The main view, then each model view."""
        return (self.main, *self.models.values())

    def sync(self, tags: Iterable[bytes]) -> None:
        """Keep one view per model in ``tags``; a new one is seeded from the main view."""
        wanted = sorted(tags)  # sorted: iteration order must not depend on hashing
        old = self.models
        self.models = {m: old.get(m) or self.new_view(self.model_view_size) for m in wanted}
        guarded = self.rules is not None
        for m in wanted:
            if m in old:
                continue
            self.directory.forget_tag(m)  # kept in the model view from now on
            view = self.models[m]
            for d in self.main.descriptors():
                if m in d.tags:
                    view.offer(d, fresh=guarded)  # main-view entries are proven

    def observe(self, d: Descriptor, period: int, *, fresh: bool = False,
                pulled: bool = True) -> None:
        """Feed one valid descriptor to the model views and the holder cache.

        ``fresh``: ``d`` comes from the node itself (it is talking to us); under
        the Sybil rules: its address proved that id. ``pulled``: it came in a
        reply to this node's request (not in someone else's request).
        """
        tags = d.tags
        models = self.models
        for tag in tags:
            v = models.get(tag)
            if v is None:
                self.directory.observe(tag, d, period)
            elif isinstance(v, RankedView):
                v.consider(d, proven=fresh, pulled=pulled)
            else:
                v.offer(d, fresh=fresh)
        if models:
            n = d.node_id
            for m, v in models.items():
                if m in tags:
                    continue
                if isinstance(v, RankedView):
                    cur = v.get(n)
                    if cur is not None and d.epoch > cur.epoch:  # a newer version without m
                        v.pop(n)
                    continue
                age = v.age_of(n)
                if age is not None and d.age < age:  # fresher news: it dropped m
                    v.pop(n)

    def remove_address(self, address: str) -> None:
        """``address`` failed: out of every view and the holder cache."""
        self.main.remove_address(address)
        for v in self.models.values():
            v.remove_address(address)
        self.directory.forget_address(address)

    def pop(self, node_id: bytes) -> int:
        """Remove ``node_id`` from every view (and its address from the cache); how many
        views held it."""
        held = 0
        for v in self.every():
            d = v.pop(node_id)
            if d is not None:
                held += 1
                self.directory.forget_address(d.address)
        return held

    def known_holders(self, model: bytes, exclude: bytes, period: int,
                      count: int) -> list[Descriptor]:
        """Up to ``count`` holders of a model this node does not hold (a lookup's answer)."""
        found = self.directory.holders(model, period, count, exclude)
        if len(found) < count:
            seen = {d.node_id for d in found}
            for d in self.main.descriptors():
                if model in d.tags and d.node_id != exclude and d.node_id not in seen:
                    found.append(d)
                    if len(found) >= count:
                        break
        return found

    def addresses(self) -> set[str]:
        """Every address held by a view."""
        known = set(self.main.addresses())
        for v in self.models.values():
            known.update(v.addresses())
        return known

    def snapshot(self) -> list[Descriptor]:
        """Every known peer once (main view first, then model views)."""
        out = self.main.descriptors()
        seen = {d.node_id for d in out}
        for v in self.models.values():
            for d in v.descriptors():
                if d.node_id not in seen:
                    seen.add(d.node_id)
                    out.append(d)
        return out
