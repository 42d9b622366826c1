"""Lying holders for the simulator (:class:`lab.sim.pushsum.Adversary`).

Each speaks the protocol well: valid messages, within every static bound the
receiver checks (values within 1e6, weight within ``max_weight``).  Used by
``scripts/bench/attacks.py`` and the merge-defence tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gossip.compression import encode
from gossip.errors import RejectedPush
from gossip.messages import Push, PushAck
from gossip.pushsum import PushSum
from gossip.validation import MAX_ABS_VALUE
from lab.sim.pushsum import Adversary, node_id


class LateLiar:
    """``inner`` from round ``start`` on; before, an honest holder that answers pushes
    and sends nothing: a partner of every holder by then, as a member that turns."""

    def __init__(self, inner: Adversary, start: int) -> None:
        self.inner, self.start, self.round = inner, start, 0

    def pushes(self, round: int, core: PushSum, peers: Sequence[int],
               rng: np.random.Generator) -> list[tuple[int, Push]]:
        self.round = round
        return self.inner.pushes(round, core, peers, rng) if round >= self.start else []

    def answer(self, core: PushSum, sender: int, push: Push) -> PushAck | None:
        if self.round >= self.start:
            return self.inner.answer(core, sender, push)
        try:
            return core.on_push(node_id(sender), push, float(self.round))
        except RejectedPush:
            return None


@dataclass
class _Ids:
    next_id: int = 1

    def take(self) -> int:
        self.next_id += 1
        return self.next_id


class _PlainAcks:
    """Answers every push with a plain ack: takes the share, gives nothing back."""

    def answer(self, core: PushSum, sender: int, push: Push) -> PushAck | None:
        return PushAck(core.fingerprint, push.push_id)


@dataclass
class HeavyPusher(_PlainAcks):
    """Pushes zero values with ``weight`` to every other holder each round, asking no reply."""

    weight: float
    ids: _Ids = field(default_factory=_Ids)

    def pushes(self, round: int, core: PushSum, peers: Sequence[int],
               rng: np.random.Generator) -> list[tuple[int, Push]]:
        zeros = encode(np.zeros(core.length), "f32")
        return [(p, Push(core.fingerprint, self.ids.take(), zeros, self.weight)) for p in peers]


@dataclass
class WeightInjector(_PlainAcks):
    """Pushes its own (plausible) estimate with ``weight`` to every other holder each round.

    Its values pass any clipping (they are where the swarm is); what it adds is
    weight, which dilutes the honest mass with its (stale) values.
    """

    weight: float = 1.0
    ids: _Ids = field(default_factory=_Ids)

    def pushes(self, round: int, core: PushSum, peers: Sequence[int],
               rng: np.random.Generator) -> list[tuple[int, Push]]:
        values = encode(core.estimate, "f64")
        return [(p, Push(core.fingerprint, self.ids.take(), values, self.weight)) for p in peers]


@dataclass
class Poisoner(_PlainAcks):
    """Push-pull requests of ``scale`` x N(0, 1) values (within the 1e6 bound), honest weight."""

    scale: float = 1e5
    weight: float = 0.5
    ids: _Ids = field(default_factory=_Ids)

    def pushes(self, round: int, core: PushSum, peers: Sequence[int],
               rng: np.random.Generator) -> list[tuple[int, Push]]:
        out = []
        for p in peers:
            v = np.clip(self.scale * rng.standard_normal(core.length), -MAX_ABS_VALUE,
                        MAX_ABS_VALUE)
            out.append((p, Push(core.fingerprint, self.ids.take(), encode(v, "f32"),
                                self.weight, want_reply=True)))
        return out


@dataclass
class MaskLookalike(_PlainAcks):
    """Pushes ``scale`` x N(0, 1) values flagged ``masked`` (and ``noisy``) to every holder."""

    scale: float = 10.0
    weight: float = 0.5
    ids: _Ids = field(default_factory=_Ids)

    def pushes(self, round: int, core: PushSum, peers: Sequence[int],
               rng: np.random.Generator) -> list[tuple[int, Push]]:
        out = []
        for p in peers:
            v = self.scale * rng.standard_normal(core.length)
            out.append((p, Push(core.fingerprint, self.ids.take(), encode(v, "f32"),
                                self.weight, masked=True, noisy=True)))
        return out


@dataclass
class TakingSink:
    """Never pushes; answers push-pull requests with a token reply (``ratio`` x the share).

    The reply's values are the request's own (a zero delta), so nothing but
    the weight it keeps gives it away; plain pushes get a plain ack.
    """

    ratio: float = 0.01

    def answer(self, core: PushSum, sender: int, push: Push) -> PushAck | None:
        if not push.want_reply:
            return PushAck(core.fingerprint, push.push_id)
        zero = encode(np.zeros(core.length), "f32")
        return PushAck(core.fingerprint, push.push_id, reply=zero,
                       reply_weight=self.ratio * push.weight)

    def pushes(self, round: int, core: PushSum, peers: Sequence[int],
               rng: np.random.Generator) -> list[tuple[int, Push]]:
        return []


@dataclass
class Sink(_PlainAcks):
    """Never pushes; acknowledges every push without a reply (takes weight, gives none)."""

    def pushes(self, round: int, core: PushSum, peers: Sequence[int],
               rng: np.random.Generator) -> list[tuple[int, Push]]:
        return []


@dataclass
class Creeper(_PlainAcks):
    """Walks honest models along one direction with push-pull requests just inside
    their clip radius, ``per_round`` of them to every holder each round.

    It reads each receiver's estimate and radius (:meth:`watch`): in a swarm it
    reads the estimate off the receiver's previous reply (``q_B = q_A + d``
    exactly) and the radius from the updates it sees.  Request ``k`` of a round
    aims ``fraction`` x (1 + k / 2) radii away, as the earlier ones moved the
    receiver by about half a radius each.  The first is merged unclipped at no
    cost (the reply gives its share back, no clip debt), the others clipped
    at a small clip debt (a few times the radius is a fraction of a decade).
    The guard's creep budget (:mod:`gossip.drift_budget`) refuses it once its
    updates add up to ``drift_cap`` radii (docs/design/trust.md, "The creep
    budget").  Without a guard a radius is taken as 1e-2 ||x||.
    """

    per_round: int = 20
    fraction: float = 0.9
    weight: float = 0.5
    ids: _Ids = field(default_factory=_Ids)
    _cores: dict[int, PushSum] = field(default_factory=dict)
    _me: bytes = b""
    _direction: np.ndarray | None = None

    def watch(self, cores: dict[int, PushSum], me: bytes) -> None:
        """The honest holders' cores by node index, and the liar's own id."""
        self._cores, self._me = dict(cores), me

    def _aim(self, peer: int) -> tuple[np.ndarray, float] | None:
        """Holder ``peer``'s estimate and the radius it clips this liar to (None: not
        watched)."""
        target = self._cores.get(peer)
        if target is None:
            return None
        x = target.estimate
        size = float(np.linalg.norm(x))
        guard = target._guard
        return x, (guard.clip.radius(size, self._me) if guard is not None else 1e-2 * size)

    def _offset(self, k: int, length: int, rng: np.random.Generator) -> np.ndarray:
        """Where request ``k`` of a round aims, in radii from the receiver: ever
        further along one direction."""
        if self._direction is None:
            u = rng.standard_normal(length)
            self._direction = u / np.linalg.norm(u)
        return (1.0 + 0.5 * k) * self._direction

    def pushes(self, round: int, core: PushSum, peers: Sequence[int],
               rng: np.random.Generator) -> list[tuple[int, Push]]:
        out = []
        for p in peers:
            aim = self._aim(p)
            if aim is None:
                continue
            x, tau = aim
            for k in range(self.per_round):
                q = x + self.fraction * tau * self._offset(k, core.length, rng)
                out.append((p, Push(core.fingerprint, self.ids.take(), encode(q, "f64"),
                                    self.weight, want_reply=True)))
        return out


@dataclass
class RandomKicker(Creeper):
    """A :class:`Creeper` that kicks in a fresh random direction with every request:
    ``per_round`` push-pull requests to every holder each round, each landing
    ``fraction`` x the receiver's radius away from its estimate.

    Inside the radius, so no clipping and no clip debt; random directions add
    up like an honest random walk, so the creep budget does not see them
    either.  What they do: each kick spreads the honest models, the partners'
    update norms grow with the spread, the radius (their median) follows, and
    the next kicks are larger (docs/design/trust.md, "Random kicks inside the
    radius").  The defence is the sender's share of the receiver's merges
    (``GuardSettings.sender_share``).
    """

    def _offset(self, k: int, length: int, rng: np.random.Generator) -> np.ndarray:
        """A fresh random direction for every request, one radius long."""
        u = rng.standard_normal(length)
        out: np.ndarray = u / np.linalg.norm(u)
        return out



class Direction:
    """Where reply poisoners push, shared by all the identities of one attacker: a fixed
    unit vector, or one turning by ``turn`` radians per round in a random plane."""

    def __init__(self, length: int, seed: int, turn: float = 0.0) -> None:
        rng = np.random.default_rng(seed)
        u, v = rng.standard_normal(length), rng.standard_normal(length)
        u /= np.linalg.norm(u)
        v -= (v @ u) * u
        v /= np.linalg.norm(v)
        self.u, self.v, self.turn = u, v, turn

    def at(self, round: int) -> np.ndarray:
        """The unit direction at ``round``."""
        if not self.turn:
            return self.u
        angle = self.turn * round
        out: np.ndarray = np.cos(angle) * self.u + np.sin(angle) * self.v
        return out


@dataclass
class ReplyPoisoner:
    """Answers honest push-pull requests with a reply ``norm`` away from the request along
    ``direction`` (fixed or turning), giving the request's whole share back: a
    reciprocating partner whose values lie (issue 31).  Pushes nothing itself; answers
    one-way pushes with a plain ack.  ``honest_for``: answers its first so many requests
    honestly (merged by its own core, as a member that turns); ``norm`` 0 is a generous
    fake that echoes the request (a zero delta, the weight given back)."""

    direction: Direction
    norm: float = 30.0
    honest_for: int = 0
    answered: int = 0
    round: int = 0

    def pushes(self, round: int, core: PushSum, peers: Sequence[int],
               rng: np.random.Generator) -> list[tuple[int, Push]]:
        self.round = round
        return []

    def answer(self, core: PushSum, sender: int, push: Push) -> PushAck | None:
        if not push.want_reply:
            return PushAck(core.fingerprint, push.push_id)
        self.answered += 1
        if self.answered <= self.honest_for:
            try:
                return core.on_push(node_id(sender), push, float(self.round))
            except RejectedPush:
                return None
        delta = self.norm * self.direction.at(self.round)
        return PushAck(core.fingerprint, push.push_id, reply=encode(delta, "f32"),
                       reply_weight=push.weight)
