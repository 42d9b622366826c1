"""Seeded, cycle-driven, in-process simulation of many :class:`PeerSampler` cores.

No sockets and no trio: in every period each live node, in a random order,
starts its shuffles and each exchange completes at once (request, answer,
merge), as in PeerSim's cycle-driven mode used by the Cyclon paper. Crashed
nodes stop answering; lost messages look like timeouts to the initiator.
Everything is reproducible from ``seed``.

:meth:`Simulator.set_adversary` adds a Sybil adversary (:class:`Adversary`).
With Sybil rules (``sybil=SybilRules()``) the simulated nodes sign their
descriptors and check every signature they receive, with a keyed-BLAKE2b
stand-in for Ed25519 (:func:`~peersampling.signed.simulated_signer`), each
distinct descriptor computed once per run (one cache shared by all nodes); see
:attr:`Simulator.signature_note`.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, Unpack

from peersampling.core import PeerSampler, SamplerTuning
from peersampling.descriptor import Descriptor
from peersampling.graph import (
    DegreeStats,
    dead_links,
    in_degree_stats,
    largest_strong_component,
    largest_weak_component,
)
from peersampling.messages import ShuffleReply, ShuffleRequest
from peersampling.signed import SignatureCheck, simulated_signer, simulated_verify


def sim_address(index: int) -> str:
    """Address of the ``index``-th simulated node."""
    return f"node{index}:7400"


def sim_node_id(index: int) -> bytes:
    return hashlib.sha256(b"sim-node-%d" % index).digest()[:16]


class Adversary(Protocol):
    """What the simulator asks of a Sybil adversary (one lives in the lab's attack code)."""

    ids: frozenset[bytes]  # the fakes' node ids

    def injections(self, honest: Sequence[str]) -> list[tuple[str, ShuffleRequest]]:
        """This period's unsolicited requests, as (target address, request)."""

    def is_fake(self, address: str) -> bool: ...

    def answer(self, address: str, req: ShuffleRequest) -> ShuffleReply:
        """What the fake at ``address`` answers to ``req``."""


@dataclass(frozen=True)
class SybilReport:
    """How far fakes got into the honest nodes' main views."""

    honest: int  # live honest nodes
    entries: int  # entries in their main views
    fake_entries: int
    only_fakes: int  # honest nodes whose (non-empty) view holds fakes only
    without_honest: int  # honest nodes with no honest entry at all (empty or only fakes)
    honest_strong: float  # largest strongly connected component over honest links / honest
    honest_weak: float  # same, weakly connected

    @property
    def fake_share(self) -> float:
        return self.fake_entries / self.entries if self.entries else 0.0

    @property
    def honest_connected(self) -> bool:
        """Every honest node reaches every other through honest links."""
        return self.honest_strong == 1.0


class Simulator:
    """A population of peer-sampling cores exchanging messages in memory.

    ``loss`` is the probability that a request, and independently its reply,
    is lost (the initiator then sees a failure, as it would see a timeout).
    Extra keyword arguments go to every :class:`PeerSampler`. ``signatures``
    (default: on when ``sybil`` rules are given) makes nodes sign and check
    descriptors with the simulated stand-in signature, checked through one
    cache shared by all simulated nodes, or with ``shared_signature_cache=False``
    through a bounded cache per node, as a daemon checks them.
    """

    def __init__(
        self,
        *,
        c: int = 20,
        l: int = 5,  # noqa: E741 - the protocol's name
        seed: int = 0,
        loss: float = 0.0,
        signatures: bool | None = None,
        shared_signature_cache: bool = True,
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
        self.signatures = (sampler_options.get("sybil") is not None
                           if signatures is None else signatures)
        self.attack: Adversary | None = None
        # One cache for all simulated nodes: a check's answer depends only on
        # the descriptor, so each distinct descriptor is checked once per run.
        self.shared_signature_cache = shared_signature_cache
        self._signature_check = SignatureCheck(simulated_verify, capacity=1 << 20)

    @property
    def signature_note(self) -> str:
        """How this run treats signatures (benchmarks print it)."""
        if not self.signatures:
            return "signatures: not used (unsigned simulated descriptors)"
        if not self.shared_signature_cache:
            return ("signatures: simulated stand-in (keyed BLAKE2b, not Ed25519); every received "
                    "descriptor is checked through each node's own bounded cache, as daemons do")
        return ("signatures: simulated stand-in (keyed BLAKE2b, not Ed25519); every received "
                "descriptor is checked, each distinct one computed once per run (shared cache)")

    # --------------------------------------------------------------- population

    def add_node(self, tags: Iterable[bytes] = (), bootstrap: Sequence[str] = ()) -> str:
        """Start a new node (empty view) and return its address."""
        i = self._next_index
        self._next_index += 1
        address = sim_address(i)
        me = Descriptor(sim_node_id(i), address, 0, frozenset(tags))
        rng = random.Random(self.rng.getrandbits(64))
        options = self._options
        if self.signatures:
            options = SamplerTuning(**options, sign=simulated_signer(me.node_id),
                                    verify=self._signature_check if self.shared_signature_cache
                                    else SignatureCheck(simulated_verify))
        sampler = PeerSampler(me, c=self.c, l=self.l, rng=rng, **options)
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

    def set_adversary(self, adversary: Adversary) -> None:
        """Let ``adversary``'s identities inject requests and answer for themselves."""
        self.attack = adversary

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
        order: list[str | tuple[str, ShuffleRequest]] = list(self.nodes)
        attack = self.attack
        if attack is not None:
            order.extend(attack.injections(list(self.nodes)))
        self.rng.shuffle(order)
        nodes = self.nodes
        for item in order:
            if isinstance(item, tuple):  # the adversary's unsolicited request
                victim = nodes.get(item[0])
                if victim is not None:
                    victim.on_request(item[1], now)
                continue
            sampler = nodes.get(item)
            if sampler is None:
                continue
            self.exchange(sampler, sampler.start_shuffles(now), now)

    def exchange(self, sampler: PeerSampler, queue: list[tuple[str, ShuffleRequest]],
                 now: float) -> None:
        """Deliver ``sampler``'s shuffle requests in ``queue`` (and the retries they
        cause) through the peers' cores, with the simulator's loss and adversary."""
        nodes, loss, rnd, attack = self.nodes, self.loss, self.rng.random, self.attack
        while queue:
            target, req = queue.pop(0)
            self.messages += 1
            peer = nodes.get(target)
            if peer is None and attack is not None and attack.is_fake(target):
                sampler.on_reply(target, req, attack.answer(target, req), now)
                continue
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

    def sybil_report(self) -> SybilReport:
        """Fakes in the honest main views and connectivity over honest links only."""
        fake = self.attack.ids if self.attack is not None else frozenset()
        honest_graph: dict[str, list[str]] = {}
        entries = fakes = only = without = 0
        for a, s in self.nodes.items():
            view = s.view()
            n_fake = sum(1 for d in view if d.node_id in fake)
            entries += len(view)
            fakes += n_fake
            if view and n_fake == len(view):
                only += 1
            if n_fake == len(view):
                without += 1
            honest_graph[a] = [d.address for d in view if d.node_id not in fake]
        n = len(honest_graph)
        return SybilReport(
            honest=n, entries=entries, fake_entries=fakes, only_fakes=only,
            without_honest=without,
            honest_strong=largest_strong_component(honest_graph) / n if n else 0.0,
            honest_weak=largest_weak_component(honest_graph) / n if n else 0.0,
        )

    def model_sybil_report(self, model: bytes) -> tuple[int, int, float]:
        """For the honest holders of ``model``: (holders, holder views without an
        honest holder, share of fake entries in their holder views)."""
        fake = self.attack.ids if self.attack is not None else frozenset()
        holders = without = entries = fakes = 0
        for s in self.nodes.values():
            if model not in s.models:
                continue
            holders += 1
            view = s.model_view(model)
            n_fake = sum(1 for d in view if d.node_id in fake)
            entries += len(view)
            fakes += n_fake
            without += n_fake == len(view)
        return holders, without, fakes / entries if entries else 0.0

    def dead_links(self) -> int:
        """Links in live main views that point at crashed nodes."""
        return dead_links(self.graph())
