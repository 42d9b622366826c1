"""The dependency graph of partial models: validation, closures, orders.

"A depends on B" is written ``A -> B``; in the thesis' notation ``A < B``
("A is lower"). Dependencies must be acyclic; their transitive closure is what
counts everywhere.
"""

from __future__ import annotations

import difflib
import heapq
from collections.abc import Iterable, Mapping, Sequence
from typing import Generic, TypeVar

from learner.module_spec import ModuleModelSpec
from learner.spec import PartialModelSpec, SpecError

__all__ = ["ModelGraph"]

#: A declaration the graph orders: in the notation, or over a user's module.
AnySpec = PartialModelSpec | ModuleModelSpec
S = TypeVar("S", PartialModelSpec, ModuleModelSpec, AnySpec)


class ModelGraph(Generic[S]):
    """A validated, acyclic catalogue of partial-model declarations."""

    def __init__(self, models: Sequence[S]) -> None:
        by_name: dict[str, S] = {}
        for i, m in enumerate(models):
            if not isinstance(m, PartialModelSpec | ModuleModelSpec):
                raise SpecError(f"partial models: expected PartialModelSpec, got "
                                f"{type(m).__name__} ({m!r})", index=i)
            if m.name in by_name:
                raise SpecError(f"partial model {m.name!r} is declared twice (duplicate model "
                                "name); model names must be unique", field="name", model=m.name,
                                index=i)
            by_name[m.name] = m
        self._index = {m.name: i for i, m in enumerate(models)}
        for m in by_name.values():
            for d in m.depends_on:
                if d not in by_name:
                    known = ", ".join(sorted(by_name)) or "none"
                    close = difflib.get_close_matches(d, list(by_name), n=1, cutoff=0.6)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    raise SpecError(f"partial model {m.name!r} depends on unknown model {d!r}"
                                    f"{hint} (declared models: {known}); declare {d!r} or remove "
                                    "it from depends_on", field="depends_on", model=m.name,
                                    index=self._index[m.name])
        self._by_name: dict[str, S] = by_name
        self._order = [m.name for m in models]
        self._check_acyclic()
        self._closure: dict[str, frozenset[str]] = {}
        for name in self._order:
            self._closure[name] = self._compute_closure(name)

    # ------------------------------------------------------------------ checks
    def _check_acyclic(self) -> None:
        white, grey, black = 0, 1, 2
        colour = dict.fromkeys(self._by_name, white)
        for root in self._order:
            if colour[root] != white:
                continue
            # iterative DFS keeping the path, to report the cycle itself
            path: list[str] = [root]
            iters = [iter(self._by_name[root].depends_on)]
            colour[root] = grey
            while iters:
                nxt = next(iters[-1], None)
                if nxt is None:
                    colour[path.pop()] = black
                    iters.pop()
                    continue
                if colour[nxt] == grey:
                    cycle = path[path.index(nxt):] + [nxt]
                    chain = " -> ".join(cycle)
                    itself = f" (model {nxt!r} depends on itself)" if len(cycle) == 2 else ""
                    raise SpecError(f"partial models have a dependency cycle: {chain}{itself}; "
                                    f"dependencies must be acyclic: break the cycle {chain}",
                                    field="depends_on", model=nxt, index=self._index[nxt])
                if colour[nxt] == white:
                    colour[nxt] = grey
                    path.append(nxt)
                    iters.append(iter(self._by_name[nxt].depends_on))

    def _compute_closure(self, name: str) -> frozenset[str]:
        seen: set[str] = set()
        stack = list(self._by_name[name].depends_on)
        while stack:
            d = stack.pop()
            if d not in seen:
                seen.add(d)
                stack.extend(self._by_name[d].depends_on)
        return frozenset(seen)

    # ----------------------------------------------------------------- queries
    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> S:
        return self._by_name[name]

    @property
    def names(self) -> tuple[str, ...]:
        """Names in declaration order."""
        return tuple(self._order)

    def closure(self, name: str) -> frozenset[str]:
        """All models ``name`` depends on, directly or transitively (not itself)."""
        return self._closure[name]

    def depends(self, a: str, b: str) -> bool:
        """True when ``a`` depends (transitively) on ``b``."""
        return b in self._closure[a]

    def comparable(self, a: str, b: str) -> bool:
        """True when ``a == b`` or one depends on the other."""
        return a == b or self.depends(a, b) or self.depends(b, a)

    def topological(self, names: Iterable[str], *, tie: Mapping[str, object]) -> list[str]:
        """Dependencies first; among ready models the smallest ``tie[name]`` first.

        Only edges inside ``names`` are considered (the caller passes sets closed
        under dependencies).
        """
        chosen = set(names)
        pending = {n: {d for d in self._closure[n] if d in chosen} for n in chosen}
        ready = [(tie[n], n) for n, deps in pending.items() if not deps]
        heapq.heapify(ready)
        out: list[str] = []
        while ready:
            _, n = heapq.heappop(ready)
            out.append(n)
            for other, deps in pending.items():
                if n in deps:
                    deps.discard(n)
                    if not deps:
                        heapq.heappush(ready, (tie[other], other))
        return out

    def canonical_order(self, names: Iterable[str]) -> list[str]:
        """A node-independent order of ``names``: dependencies first, ties by name."""
        names = list(names)
        return self.topological(names, tie={n: n for n in names})
