"""Overlay metrics over a directed graph ``node -> nodes it points to``.

Pure functions over plain dicts so they serve the simulator, tests and
benchmarks alike. Links to nodes that are not keys of the graph are *dead*.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

N = TypeVar("N", bound=Hashable)


@dataclass(frozen=True)
class DegreeStats:
    """In-degree distribution over live nodes (links from live nodes only)."""

    mean: float
    std: float
    min: int
    max: int


def in_degrees(graph: Mapping[N, Sequence[N]]) -> dict[N, int]:
    """In-degree of every live node, counting links from live nodes."""
    deg = dict.fromkeys(graph, 0)
    for targets in graph.values():
        for t in targets:
            if t in deg:
                deg[t] += 1
    return deg


def in_degree_stats(graph: Mapping[N, Sequence[N]]) -> DegreeStats:
    """Mean, population standard deviation, min and max of in-degrees."""
    values = list(in_degrees(graph).values())
    if not values:
        return DegreeStats(0.0, 0.0, 0, 0)
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / len(values)
    return DegreeStats(mean, math.sqrt(var), min(values), max(values))


def dead_links(graph: Mapping[N, Sequence[N]]) -> int:
    """Number of links from live nodes to nodes that are not live."""
    return sum(1 for targets in graph.values() for t in targets if t not in graph)


def largest_weak_component(graph: Mapping[N, Sequence[N]]) -> int:
    """Size of the largest weakly connected component among live nodes."""
    parent: dict[N, N] = {n: n for n in graph}

    def find(x: N) -> N:
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    for a, targets in graph.items():
        for b in targets:
            if b in parent:
                ra, rb = find(a), find(b)
                if ra != rb:
                    parent[ra] = rb
    sizes: dict[N, int] = {}
    for n in graph:
        r = find(n)
        sizes[r] = sizes.get(r, 0) + 1
    return max(sizes.values(), default=0)


def largest_strong_component(graph: Mapping[N, Sequence[N]]) -> int:
    """Size of the largest strongly connected component (iterative Tarjan)."""
    index: dict[N, int] = {}
    low: dict[N, int] = {}
    on_stack: set[N] = set()
    stack: list[N] = []
    best = 0
    for root in graph:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work: list[tuple[N, Iterator[N]]] = [(root, iter(graph[root]))]
        while work:
            node, targets = work[-1]
            descended = False
            for t in targets:
                if t not in graph:
                    continue
                if t not in index:
                    index[t] = low[t] = len(index)
                    stack.append(t)
                    on_stack.add(t)
                    work.append((t, iter(graph[t])))
                    descended = True
                    break
                if t in on_stack:
                    low[node] = min(low[node], index[t])
            if descended:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                size = 0
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    size += 1
                    if w == node:
                        break
                best = max(best, size)
    return best
