"""Which sampled holders a node pushes to: peers that gave weight back come first.

Sans-IO: plain Python state keyed by peer id, fed the outcome of every exchange
and the driver's time. A Sybil-resistant view gives fakes their share of the
identities, which may be most of a model view; what tells them apart is
behaviour. :class:`PartnerChoice`: a peer whose reply to our push-pull request
gave back at least ``min_reply_ratio`` of the share, with values the merge guard
found useful, is *proven*; a plain ack, a rejected reply or a poisoner's reply
is a *strike* (no push for ``strike_pause``, doubling up to ``max_pause``). Each
target goes to an unproven candidate with probability
``q = max(explore, u * trust)``, else to a proven one: uniform with no attacker.
One-way pushes prove nothing. Candidates come from peer sampling.

How it works: docs/design/trust.md ("Partner choice: holders that give back").
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .messages import Push, PushAck

#: What :meth:`PartnerChoice.on_answer` makes of an answer.
OUTCOMES = ("reciprocated", "took", "neutral", "echo", "clipped", "far")


@dataclass(frozen=True)
class PartnerSettings:
    """The knobs of :class:`PartnerChoice` (see the module docstring)."""

    explore: float = 0.25
    trust_step: float = 0.1
    # as the merge guard's sink rule (1 / share_ratio): a reply the guard shuns
    # as a token must not prove a peer here
    min_reply_ratio: float = 0.25
    strike_pause: float = 60.0
    max_pause: float = 960.0
    candidates: int = 32  # sampled holders offered per choice
    max_peers: int = 4096  # peers remembered (least recently heard from out first)

    def __post_init__(self) -> None:
        for name in ("explore", "trust_step"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
                raise ValueError(f"partners.{name}: expected a number in [0, 1], got {value!r}")
        for name in ("min_reply_ratio", "strike_pause", "max_pause"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"partners.{name}: expected a positive finite number, "
                                 f"got {value!r}")
        if self.max_pause < self.strike_pause:
            raise ValueError(f"partners.max_pause ({self.max_pause!r}) must be >= "
                             f"strike_pause ({self.strike_pause!r})")
        for name in ("candidates", "max_peers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"partners.{name}: expected an int >= 1, got {value!r}")


class _Record:
    __slots__ = ("proven", "strikes", "paused_until")

    def __init__(self) -> None:
        self.proven = False
        self.strikes = 0
        self.paused_until = -math.inf


class PartnerChoice:
    """Per-peer exchange outcomes and the push-target choice they drive.

    ``rng`` (seeded by the caller) makes the choice; times are whatever clock
    the caller uses (seconds in the daemon). ``on_strike(peer, pause)`` is
    told of every strike, so that peer sampling can drop the peer from its
    views for as long (the node passes :meth:`peersampling.PeerSampler.distrust`).
    """

    def __init__(self, rng: random.Random, settings: PartnerSettings | None = None, *,
                 on_strike: Callable[[bytes, float], None] | None = None) -> None:
        if not isinstance(rng, random.Random):
            raise TypeError(f"rng must be a random.Random, got {type(rng).__name__}")
        self.settings = settings if settings is not None else PartnerSettings()
        self._rng = rng
        self._on_strike = on_strike
        self._peers: OrderedDict[bytes, _Record] = OrderedDict()
        #: how exchanges with unproven peers turned out (moving average, 1 = all reciprocated)
        self.trust = 1.0
        #: choices made to a proven / an unproven peer, answers by outcome
        self.counters: dict[str, int] = {"proven_picks": 0, "unproven_picks": 0,
                                         "paused_skipped": 0, **dict.fromkeys(OUTCOMES, 0)}

    # ---------------------------------------------------------------- queries

    def is_proven(self, peer: bytes) -> bool:
        rec = self._peers.get(peer)
        return rec is not None and rec.proven

    def is_paused(self, peer: bytes, now: float) -> bool:
        rec = self._peers.get(peer)
        return rec is not None and rec.paused_until > now

    def proven_count(self) -> int:
        return sum(r.proven for r in self._peers.values())

    # ----------------------------------------------------------------- choice

    def choose(self, candidates: Sequence[bytes], k: int, now: float) -> list[bytes]:
        """Up to ``k`` distinct targets among ``candidates``, in the order to try them.

        Paused peers are left out; each slot goes to an unproven candidate
        with probability ``max(explore, share of unproven * trust)`` (one never
        struck if any, so that every new holder is tried before a sink whose
        pause ended is tried again), else to a proven one.
        """
        proven: list[bytes] = []
        fresh: list[bytes] = []  # never struck
        suspect: list[bytes] = []  # struck before, pause over: tried after the fresh ones
        for peer in dict.fromkeys(candidates):
            rec = self._peers.get(peer)
            if rec is None:
                fresh.append(peer)
            elif rec.paused_until > now:
                self.counters["paused_skipped"] += 1
            elif rec.proven:
                proven.append(peer)
            elif rec.strikes:
                suspect.append(peer)
            else:
                fresh.append(peer)
        out: list[bytes] = []
        share = (len(fresh) + len(suspect)) / max(1, len(proven) + len(fresh) + len(suspect))
        q = max(self.settings.explore, share * self.trust)
        while len(out) < k and (proven or fresh or suspect):
            unproven = fresh or suspect
            pool = proven
            if not proven or (unproven and self._rng.random() < q):
                pool = unproven
            i = self._rng.randrange(len(pool))
            pool[i], pool[-1] = pool[-1], pool[i]
            out.append(pool.pop())
            self.counters["proven_picks" if pool is proven else "unproven_picks"] += 1
        return out

    # --------------------------------------------------------------- outcomes

    def on_answer(self, peer: bytes, push: Push, ack: PushAck, now: float,
                  reply: str | None = None) -> str:
        """Record the answer the core accepted to ``push``; returns its outcome (:data:`OUTCOMES`).

        A push-pull request answered with a reply of weight at least
        ``min_reply_ratio`` times the share is a reciprocation, unless the
        core judged the reply's values (``reply``, :attr:`gossip.PushSum.last_reply`)
        an "echo" or "clipped" (see the module docstring); one answered
        without a reply, or with one "far" off, is a strike; anything else (a
        one-way push, a small reply) tells nothing.
        """
        if not push.want_reply:
            outcome = "neutral"
        elif ack.reply is None:
            outcome = "took"
        elif ack.reply_weight >= self.settings.min_reply_ratio * push.weight:
            outcome = "reciprocated" if reply in (None, "useful") else reply
        else:
            outcome = "neutral"
        if outcome == "reciprocated":
            self.reciprocated(peer)
        elif outcome in ("took", "far"):
            self.strike(peer, now)
            if outcome == "far":
                self.counters["far"] += 1
        elif outcome in ("echo", "clipped"):
            rec = self._record(peer)
            if not rec.proven:
                self._learn(0.0)  # an exploration that brought nothing
            elif outcome == "clipped":
                rec.proven = False
            self.counters[outcome] += 1
        else:
            self.counters["neutral"] += 1
        return outcome

    def reciprocated(self, peer: bytes) -> None:
        """``peer`` gave weight back: proven, strikes cleared."""
        rec = self._record(peer)
        if not rec.proven:
            self._learn(1.0)
        rec.proven = True
        rec.strikes = 0
        rec.paused_until = -math.inf
        self.counters["reciprocated"] += 1

    def strike(self, peer: bytes, now: float) -> float:
        """``peer`` took a share and gave nothing back (or lied in its reply).

        It loses its proof and is paused; returns the pause in seconds.
        """
        rec = self._record(peer)
        if not rec.proven:
            self._learn(0.0)
        rec.proven = False
        rec.strikes += 1
        s = self.settings
        pause = min(s.max_pause, s.strike_pause * 2.0 ** min(rec.strikes - 1, 30))
        rec.paused_until = now + pause
        self.counters["took"] += 1
        if self._on_strike is not None:
            self._on_strike(peer, pause)
        return pause

    def _learn(self, outcome: float) -> None:
        """An exchange with an unproven peer turned out ``outcome`` (1 gave back, 0 took)."""
        self.trust += self.settings.trust_step * (outcome - self.trust)

    def _record(self, peer: bytes) -> _Record:
        rec = self._peers.pop(peer, None)
        if rec is None:
            rec = _Record()
        self._peers[peer] = rec  # newest last
        while len(self._peers) > self.settings.max_peers:
            self._peers.popitem(last=False)
        return rec


__all__ = ["OUTCOMES", "PartnerChoice", "PartnerSettings"]
