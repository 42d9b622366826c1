"""Seeded, cycle-driven, in-process simulation of many :class:`PeerSampler` cores.

No sockets and no trio: in every period each live node, in a random order,
starts its shuffles and each exchange completes at once (request, answer,
merge), as in PeerSim's cycle-driven mode used by the Cyclon paper. Crashed
nodes stop answering; lost messages look like timeouts to the initiator.
Everything is reproducible from ``seed``.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Sequence
from typing import Unpack

from .core import PeerSampler, SamplerTuning
from .descriptor import Descriptor
from .graph import (
    DegreeStats,
    dead_links,
    in_degree_stats,
    largest_strong_component,
    largest_weak_component,
)


def sim_address(index: int) -> str:
    """Address of the ``index``-th simulated node."""
    return f"node{index}:7400"


def sim_node_id(index: int) -> bytes:
    return hashlib.sha256(b"sim-node-%d" % index).digest()[:16]


class Simulator:
    """A population of peer-sampling cores exchanging messages in memory.

    ``loss`` is the probability that a request, and independently its reply,
    is lost (the initiator then sees a failure, as it would see a timeout).
    Extra keyword arguments go to every :class:`PeerSampler`.
    """

    def __init__(
        self,
        *,
        c: int = 20,
        l: int = 5,  # noqa: E741 - the protocol's name
        seed: int = 0,
        loss: float = 0.0,
        **sampler_options: Unpack[SamplerTuning],
    ) -> None:
        if not 0.0 <= loss < 1.0:
            raise ValueError(f"loss must be in [0, 1), got {loss}")
        self.c = c
        self.l = l
        self.loss = loss
        self.rng = random.Random(seed)
        self._seed = seed
        self._options = sampler_options
        self._next_index = 0
        self.period = 0
        self.nodes: dict[str, PeerSampler] = {}  # live nodes only
        self.crashed: set[str] = set()
        self.messages = 0
        self.failures = 0

    # --------------------------------------------------------------- population

    def add_node(self, tags: Iterable[bytes] = (), bootstrap: Sequence[str] = ()) -> str:
        """Start a new node (empty view) and return its address."""
        i = self._next_index
        self._next_index += 1
        address = sim_address(i)
        me = Descriptor(sim_node_id(i), address, 0, frozenset(tags))
        rng = random.Random(self.rng.getrandbits(64))
        sampler = PeerSampler(me, c=self.c, l=self.l, rng=rng, **self._options)
        if bootstrap:
            sampler.bootstrap(list(bootstrap))
        self.nodes[address] = sampler
        return address

    def add_nodes(self, n: int, tags: Iterable[bytes] = (),
                  bootstrap: Sequence[str] = ()) -> list[str]:
        """Start ``n`` nodes like :meth:`add_node`; returns their addresses."""
        tags = tuple(tags)  # used once per node
        return [self.add_node(tags, bootstrap) for _ in range(n)]

    def fill_random_views(self) -> None:
        """Give every live node a full view of random other live nodes.

        The usual starting point of Cyclon experiments (a random graph).
        """
        addresses = list(self.nodes)
        for address, sampler in self.nodes.items():
            picks: list[str] = []
            while len(picks) < min(self.c, len(addresses) - 1):
                other = addresses[self.rng.randrange(len(addresses))]
                if other != address and other not in picks:
                    picks.append(other)
            sampler.restore([self.nodes[a].self_descriptor for a in picks])

    def crash(self, addresses: Iterable[str]) -> None:
        for address in addresses:
            if self.nodes.pop(address, None) is not None:
                self.crashed.add(address)

    def crash_fraction(self, fraction: float, *, spare: Iterable[str] = ()) -> list[str]:
        """Crash a random ``fraction`` of the live nodes (never those in ``spare``)."""
        keep = set(spare)
        candidates = [a for a in self.nodes if a not in keep]
        victims = self.rng.sample(candidates, round(fraction * len(self.nodes)))
        self.crash(victims)
        return victims

    def reseed(self, seed: int) -> None:
        """Restart every random stream (simulator and nodes) from ``seed``.

        Lets several trials branch from one (deep-copied) warmed-up overlay.
        """
        self.rng.seed(seed)
        for sampler in self.nodes.values():
            sampler.rng.seed(self.rng.getrandbits(64))

    # -------------------------------------------------------------------- time

    def run_period(self) -> None:
        """One period: every live node runs its shuffles, in a random order."""
        self.period += 1
        now = float(self.period)
        order = list(self.nodes)
        self.rng.shuffle(order)
        rnd = self.rng.random
        loss = self.loss
        nodes = self.nodes
        for address in order:
            sampler = nodes.get(address)
            if sampler is None:
                continue
            queue = sampler.start_shuffles(now)
            while queue:
                target, req = queue.pop(0)
                self.messages += 1
                peer = nodes.get(target)
                if peer is None or (loss and rnd() < loss):
                    self.failures += 1
                    queue.extend(sampler.on_failure(target, req))
                    continue
                reply = peer.on_request(req, now)
                if loss and rnd() < loss:
                    self.failures += 1
                    queue.extend(sampler.on_failure(target, req))
                    continue
                sampler.on_reply(target, req, reply, now)

    def run(self, periods: int) -> None:
        for _ in range(periods):
            self.run_period()

    # ----------------------------------------------------------------- metrics

    def graph(self, model: bytes | None = None) -> dict[str, list[str]]:
        """Live nodes and the addresses in their main (or ``model``) view."""
        if model is None:
            return {a: [d.address for d in s.view()] for a, s in self.nodes.items()}
        return {
            a: [d.address for d in s.model_view(model)]
            for a, s in self.nodes.items()
            if model in s.models
        }

    def in_degree_stats(self) -> DegreeStats:
        return in_degree_stats(self.graph())

    def largest_component_fraction(self, *, strong: bool = False) -> float:
        """Fraction of live nodes in the largest (weakly or strongly) connected component."""
        g = self.graph()
        if not g:
            return 0.0
        size = largest_strong_component(g) if strong else largest_weak_component(g)
        return size / len(g)

    def dead_links(self) -> int:
        """Links in live main views that point at crashed nodes."""
        return dead_links(self.graph())
