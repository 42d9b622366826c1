"""Seeded in-process simulator of push-sum gossip among N nodes.

Every round each live node runs, for each model it holds, expiry
(retransmissions) and one ``make_pushes`` to peers chosen by a sampler among
the other holders.  Messages travel through a time-ordered queue with
injectable loss (each push and each ack dropped independently), latency
(uniform extra delay, in rounds) and crashes (a crashed node stops, its mass is
lost, pushes to it fail when they arrive).  No real time and no sockets: the
same ``PushSum`` cores the daemon runs, with the same exchange (push-pull
replies travel in the ack, as in the daemon) and the same delivery rules: a
lost push or ack is retransmitted by ``expire``, and a push refused by a
crashed node (or by a receiver, ``RejectedPush``) is handed to
``PushSum.on_undelivered`` exactly as the daemon's driver does (a first attempt
is forgotten with the weight kept; a retransmission is kept outstanding).

Adversaries (``adversaries={node: Adversary}``): a lying holder keeps its core
(so honest nodes see a normal holder) but its pushes and answers come from
its :class:`Adversary`; ``honest()`` and ``total_weight(honest_only=True)``
leave it out.  :mod:`lab.sim.adversaries` holds the ones the benchmark uses.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, Unpack

import numpy as np

from gossip.errors import RejectedAck, RejectedPush
from gossip.messages import Push, PushAck
from gossip.pushsum import PushSum, PushSumTuning

# (node, candidate peers (may include the node itself), how many, rng) -> distinct peers,
# never the node itself
Sampler = Callable[[int, Sequence[int], int, np.random.Generator], Sequence[int]]
# (round, sender, receiver, push, sender core) for every new push sent
SendObserver = Callable[[int, int, int, Push, PushSum], None]


class Adversary(Protocol):
    """How a lying holder behaves in the simulator (its core only holds its id's place)."""

    def pushes(self, round: int, core: PushSum, peers: Sequence[int],
               rng: np.random.Generator) -> list[tuple[int, Push]]:
        """The pushes it sends this round: (receiver, push)."""
        ...

    def answer(self, core: PushSum, sender: int, push: Push) -> PushAck | None:
        """Its answer to an honest push (None: no answer at all)."""
        ...


def uniform_sampler(
    node: int, candidates: Sequence[int], k: int, rng: np.random.Generator
) -> list[int]:
    """k distinct peers other than ``node`` chosen uniformly among ``candidates``."""
    others = len(candidates) - (1 if node in candidates else 0)
    k = min(k, others)
    chosen: list[int] = []
    while len(chosen) < k:
        peer = candidates[int(rng.integers(len(candidates)))]
        if peer != node and peer not in chosen:
            chosen.append(peer)
    return chosen


class LeastRecentSampler:
    """Chooses, among the candidates, the peers this node exchanged with least recently.

    Stateful (one instance per simulation): an exchange counts for both ends,
    as a node also sees the pushes it answers.  Ties are broken at random.
    """

    def __init__(self) -> None:
        self._last: dict[tuple[int, int], int] = {}
        self._calls = 0

    def __call__(self, node: int, candidates: Sequence[int], k: int,
                 rng: np.random.Generator) -> list[int]:
        self._calls += 1
        others = [p for p in dict.fromkeys(candidates) if p != node]
        order = rng.permutation(len(others))
        ranked = sorted((others[i] for i in order),
                        key=lambda p: self._last.get((node, p), -1))
        chosen = ranked[:k]
        for peer in chosen:
            self._last[(node, peer)] = self._last[(peer, node)] = self._calls
        return chosen


def model_fingerprint(name: str) -> bytes:
    """A 32-byte fingerprint for a simulated model name."""
    return hashlib.sha256(b"sim-model:" + name.encode()).digest()


def node_id(index: int) -> bytes:
    """The peer id of simulated node ``index``."""
    return index.to_bytes(8, "big")


@dataclass(frozen=True)
class ModelSpec:
    """A simulated partial model: its holders and their initial values (one row each)."""

    name: str
    holders: tuple[int, ...]
    initial: np.ndarray  # shape (len(holders), dim)


@dataclass(frozen=True)
class Faults:
    """Injected faults: message loss probability, extra latency, crashes."""

    loss: float = 0.0  # probability each push / ack is dropped
    max_delay: float = 0.0  # extra latency uniform in [0, max_delay] rounds
    crashes: tuple[tuple[int, int], ...] = ()  # (node, round it crashes at)
    detect_after: int = 2  # rounds before peers stop choosing a crashed node


@dataclass(order=True)
class _Event:
    time: float
    seq: int
    src: int = field(compare=False)
    dst: int = field(compare=False)
    model: str = field(compare=False)
    message: Push | PushAck = field(compare=False)


class Simulation:
    """Push-sum among simulated nodes, one ``PushSum`` per (node, model held)."""

    BASE_LATENCY = 0.05  # rounds

    def __init__(
        self,
        models: Sequence[ModelSpec],
        *,
        faults: Faults | None = None,
        sampler: Sampler | None = None,
        seed: int = 0,
        ack_timeout: float = 2.0,
        privacy: Mapping[int, str] | str = "none",
        on_send: SendObserver | None = None,
        adversaries: Mapping[int, Adversary] | None = None,
        **pushsum_kwargs: Unpack[PushSumTuning],
    ) -> None:
        self.models = {m.name: m for m in models}
        self.adversaries = dict(adversaries or {})
        self.faults = faults or Faults()
        self.sampler = sampler or uniform_sampler
        self.rng = np.random.default_rng(seed)
        self.ack_timeout = ack_timeout
        self.on_send = on_send
        self.round = 0
        self._seq = 0
        self._queue: list[_Event] = []
        self.crashed: dict[int, int] = {}
        self.cores: dict[tuple[int, str], PushSum] = {}
        for spec in models:
            if spec.initial.shape[0] != len(spec.holders):
                raise ValueError(f"model {spec.name}: one initial row per holder expected")
            fp = model_fingerprint(spec.name)
            for row, node in enumerate(spec.holders):
                mode = privacy if isinstance(privacy, str) else privacy.get(node, "none")
                self.cores[(node, spec.name)] = PushSum(
                    fp, spec.initial[row], privacy=mode, rng=self.rng, **pushsum_kwargs
                )
        self.nodes = sorted({n for m in models for n in m.holders})
        self._crash_at = dict(self.faults.crashes)
        self._candidate_cache: dict[str, list[int]] = {}

    # -------------------------------------------------------------- metrics
    def alive(self, node: int) -> bool:
        return node not in self.crashed

    def survivors(self, model: str) -> list[int]:
        return [n for n in self.models[model].holders if self.alive(n)]

    def honest(self, model: str) -> list[int]:
        """The live holders of ``model`` that are not adversaries."""
        return [n for n in self.survivors(model) if n not in self.adversaries]

    def target(self, model: str, survivors_only: bool = False) -> np.ndarray:
        """Mean of the initial values over the holders (or over the survivors)."""
        spec = self.models[model]
        rows = [i for i, n in enumerate(spec.holders) if not survivors_only or self.alive(n)]
        mean: np.ndarray = spec.initial[rows].mean(axis=0)
        return mean

    def values(self, model: str) -> np.ndarray:
        """Trained values (z) of the live holders, one row each."""
        return np.array([self.cores[(n, model)].values for n in self.survivors(model)])

    def errors(self, model: str, target: np.ndarray | None = None) -> np.ndarray:
        """Relative L2 error of each live holder's values against ``target``."""
        t = self.target(model) if target is None else target
        errors: np.ndarray = np.linalg.norm(self.values(model) - t, axis=1) / np.linalg.norm(t)
        return errors

    def deviation(self, model: str, target: np.ndarray | None = None) -> float:
        """Worst max|z - m| / max|m| over the live holders (m the target, by default the mean)."""
        t = self.target(model) if target is None else target
        return float(np.abs(self.values(model) - t).max() / np.abs(t).max())

    def bytes_sent(self, model: str) -> list[int]:
        """Encoded bytes each live holder has sent for ``model`` (pushes and replies)."""
        return [self.cores[(n, model)].counters.bytes_sent for n in self.survivors(model)]

    def total_weight(self, model: str, honest_only: bool = False) -> float:
        """Sum of the live holders' weights (``honest_only``: adversaries left out)."""
        nodes = self.honest(model) if honest_only else self.survivors(model)
        return float(sum(self.cores[(n, model)].weight for n in nodes))

    def total_mass(self, model: str, honest_only: bool = False) -> np.ndarray:
        """Sum of the live holders' mass ``w * x`` (``honest_only``: adversaries left out)."""
        nodes = self.honest(model) if honest_only else self.survivors(model)
        mass: np.ndarray = np.sum([self.cores[(n, model)].mass for n in nodes], axis=0)
        return mass

    # ----------------------------------------------------------------- run
    def run(self, rounds: int) -> None:
        for _ in range(rounds):
            self.step()

    def run_until(self, model: str, tolerance: float, max_rounds: int, *,
                  worst_coordinate: bool = False) -> int | None:
        """Rounds until the worst live holder's relative error is below ``tolerance``.

        The error is the relative L2 error, or with ``worst_coordinate``
        :meth:`deviation` (max|z - m| / max|m|, reached at ``<= tolerance``).
        """
        for _ in range(max_rounds):
            self.step()
            if worst_coordinate:
                if self.deviation(model) <= tolerance:
                    return self.round
            elif float(self.errors(model).max()) < tolerance:
                return self.round
        return None

    def step(self) -> None:
        """One round: crashes, pushes from every live node, then deliveries."""
        r = self.round
        for node, when in self._crash_at.items():
            if when == r and node not in self.crashed:
                self.crashed[node] = r
        self._candidate_cache.clear()
        order = [n for n in self.nodes if self.alive(n)]
        self.rng.shuffle(order)
        now = float(r)
        for node in order:
            for name in self.models:
                core = self.cores.get((node, name))
                if core is None:
                    continue
                liar = self.adversaries.get(node)
                if liar is not None:
                    others = [p for p in self._candidates(name) if p != node]
                    for dst, push in liar.pushes(r, core, others, self.rng):
                        self._send(node, dst, name, push, now)
                    continue
                for peer, push in core.expire(now, self.ack_timeout):
                    self._send(node, int.from_bytes(peer, "big"), name, push, now)
                candidates = self._candidates(name)
                chosen = self.sampler(node, candidates, core.holders_wanted, self.rng)
                for peer, push in core.make_pushes([node_id(p) for p in chosen], now):
                    dst = int.from_bytes(peer, "big")
                    if self.on_send is not None:
                        self.on_send(r, node, dst, push, core)
                    self._send(node, dst, name, push, now)
        self._deliver_until(now + 1.0)
        self.round += 1

    def drain(self) -> None:
        """Deliver everything in flight (no new pushes)."""
        self._deliver_until(float("inf"))

    def quiesce(self, max_iterations: int = 50) -> None:
        """Without new pushes, retransmit and deliver until no push is outstanding.

        Afterwards only mass duplicated or lost for good (pushes given up) remains.
        """
        now = float(self.round)
        for _ in range(max_iterations):
            self.drain()
            now += self.ack_timeout
            pending = False
            for (node, name), core in self.cores.items():
                if not self.alive(node) or not core.outstanding or node in self.adversaries:
                    continue
                pending = True
                for peer, push in core.expire(now, self.ack_timeout):
                    self._send(node, int.from_bytes(peer, "big"), name, push, now)
            if not pending:
                return

    def _candidates(self, model: str) -> list[int]:
        cached = self._candidate_cache.get(model)
        if cached is None:
            holders = self.models[model].holders
            cached = self._candidate_cache[model] = [p for p in holders if self._choosable(p)]
        return cached

    def _choosable(self, node: int) -> bool:
        when = self.crashed.get(node)
        return when is None or self.round - when < self.faults.detect_after

    def _send(self, src: int, dst: int, model: str, msg: Push | PushAck,
              now: float) -> None:
        if self.faults.loss > 0 and self.rng.random() < self.faults.loss:
            return
        delay = self.BASE_LATENCY
        if self.faults.max_delay > 0:
            delay += float(self.rng.uniform(0.0, self.faults.max_delay))
        self._seq += 1
        heapq.heappush(self._queue, _Event(now + delay, self._seq, src, dst, model, msg))

    def _deliver_until(self, limit: float) -> None:
        while self._queue and self._queue[0].time < limit:
            ev = heapq.heappop(self._queue)
            if isinstance(ev.message, Push):
                sender_core = self.cores[(ev.src, ev.model)]
                liar = self.adversaries.get(ev.dst)
                if liar is not None and self.alive(ev.dst):
                    answer = liar.answer(self.cores[(ev.dst, ev.model)], ev.src, ev.message)
                    if answer is not None:
                        self._send(ev.dst, ev.src, ev.model, answer, ev.time)
                    continue
                if ev.src in self.adversaries:
                    try:  # the liar hears nothing back: its acks would go nowhere
                        self.cores[(ev.dst, ev.model)].on_push(
                            node_id(ev.src), ev.message, ev.time)
                    except RejectedPush:
                        pass
                    continue
                if not self.alive(ev.dst):
                    if self.alive(ev.src):  # connection refused: surely not merged
                        sender_core.on_undelivered(ev.message.push_id, maybe_delivered=False)
                    continue
                try:
                    ack = self.cores[(ev.dst, ev.model)].on_push(
                        node_id(ev.src), ev.message, ev.time)
                except RejectedPush:
                    # the daemon answers an error: the sender hears "refused"
                    if self.alive(ev.src):
                        sender_core.on_undelivered(ev.message.push_id, maybe_delivered=False)
                    continue
                self._send(ev.dst, ev.src, ev.model, ack, ev.time)
            elif self.alive(ev.dst) and ev.dst not in self.adversaries:
                try:
                    self.cores[(ev.dst, ev.model)].on_ack(node_id(ev.src), ev.message, ev.time)
                except RejectedAck:
                    pass  # a late ack of a push given up, or a dropped reply (counted)


def random_models(
    n_nodes: int, dim: int, rng: np.random.Generator, holders: Mapping[str, Sequence[int]] | None = None
) -> list[ModelSpec]:
    """Models with N(1, 1) initial values; by default one model "G" held by all nodes."""
    holders = holders or {"G": range(n_nodes)}
    return [
        ModelSpec(name, tuple(h), rng.normal(1.0, 1.0, size=(len(h), dim)))
        for name, h in holders.items()
    ]
