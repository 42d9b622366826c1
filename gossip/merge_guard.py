"""Merge defences of one push-sum core: what one lying holder can do to a merge.

Sans-IO: plain Python state keyed by sender id, fed the time the core is given.
A :class:`PushSum` built with ``guard=GuardSettings()`` consults a
:class:`MergeGuard` before and during every merge (issue 11, item 3):

- **Weight share.**  A push may carry at most ``share_ratio`` times the
  receiver's own weight (or ``weight_floor``, the weight every node starts
  with, if that is larger).  An honest push carries ``w_sender / (fanout + 1)``;
  with the default push-pull exchange weights stay within a few times 1 and
  the largest honest share / receiver weight measured is 1.8 (see
  docs/gossip.md), so 4 leaves a margin of 2 while a liar can at most
  multiply a receiver's weight by 5 per accepted push.
- **Weight budgets, both ways.**  Per peer two token buckets of *net*
  weight, each holding up to ``weight_budget`` and refilled ``weight_budget``
  per ``budget_period`` (seconds in the daemon, rounds in the simulator).
  *Taken*: merging a push spends what stays here (``share - reply weight``);
  a push of ours the peer took gives back what it kept.  A push that would
  overdraw it is refused.  *Given*: the mirror image on the sending side; no
  push goes to a peer whose bucket is empty (one push may overdraw it).  Honest
  push-pull flows between two nodes go both ways and nearly cancel; a liar
  that only gives (weight injection) or only takes (a sink) moves at most
  ``weight_budget * (1 + elapsed / budget_period)`` per honest node.
- **Reciprocity (sinks).**  A peer that answers a push-pull request of a
  privacy "none" node with a plain ack (an honest one replies unless it holds
  mask noise, which a guarded "none" node never does) did not give weight
  back: the core keeps the share (as for a refused push, so the honest sums
  stay exact) and sends the peer nothing for ``budget_period``.  A plain sink
  takes no weight at all.  A reply under ``1 / share_ratio`` of the share
  (a sink that returns a token weight) is merged but earns the same pause:
  such a sink takes under one share per honest node and ``budget_period``.
- **Flags.**  A push marked ``masked`` or ``noisy`` carries values that are
  large by design and escape clipping; it is refused unless this node itself
  runs a masked mode, and each sender may send at most ``flag_budget`` such
  pushes per ``flag_period`` (an honest masked phase sends ``masked_pushes``
  masked pushes and about ``unmask_after`` noisy ones, spread over holders).
- **Value clipping** (ClippedGossip, He, Karimireddy, Jaggi 2022): the update
  ``y - x`` a merge applies is clipped to a radius ``tau``: ``clip_factor``
  times the median, over the latest ``clip_senders`` distinct senders, of the
  norm of the last update each of them proposed (one entry per sender, so one
  liar moves the median by at most one rank), at least ``clip_floor`` times
  the norm of our own estimate.  Before ``clip_warmup`` distinct senders
  have been seen the radius is ``clip_start`` times that norm.  How a clipped update keeps mass exact is the
  core's business (see :class:`gossip.pushsum.PushSum`).

Every refusal raises :class:`RefusedByGuard` (a ``RejectedPush`` with the rule
named in ``rule``) before any state changes.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

from gossip.errors import InvalidValues, RejectedPush

#: Senders remembered per core (least recently heard from out first).  An
#: evicted sender starts again with a full bucket: forcing an eviction takes
#: this many identities.
GUARD_SENDERS = 4096

#: The rules a :class:`RefusedByGuard` names.
RULES = ("weight_share", "weight_budget", "flag_mode", "flag_budget", "clip")


class RefusedByGuard(RejectedPush):
    """A push refused by a merge defence; ``rule`` is one of :data:`RULES`."""

    def __init__(self, rule: str, reason: str) -> None:
        super().__init__(f"{rule}: {reason}")
        self.rule = rule


@dataclass(frozen=True)
class GuardSettings:
    """The merge defences' parameters (see the module docstring for each rule)."""

    share_ratio: float = 4.0
    weight_floor: float = 1.0
    weight_budget: float = 2.0
    weight_overdraft: float = 1.0  # how far one push may overdraw a bucket
    budget_period: float = 100.0
    clip_factor: float = 2.0  # 0 turns clipping off
    clip_floor: float = 1e-3
    clip_senders: int = 16
    clip_warmup: int = 1
    clip_start: float = 0.5  # the radius before clip_warmup senders: this x ||own x||
    reply_clip_factor: float = 4.0  # replies carry up to the responder's tau (returned excess)
    flag_budget: int = 48
    flag_period: float = 600.0

    def __post_init__(self) -> None:
        positive = ("share_ratio", "weight_floor", "weight_budget", "weight_overdraft",
                    "budget_period",
                    "reply_clip_factor", "flag_period")
        for name in positive:
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise InvalidValues(f"guard.{name}: expected a positive finite number, "
                                    f"got {value!r}")
        for name in ("clip_factor", "clip_floor", "clip_start"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise InvalidValues(f"guard.{name}: expected a finite number >= 0, got {value!r}")
        for name in ("clip_senders", "clip_warmup", "flag_budget"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidValues(f"guard.{name}: expected an int >= 1, got {value!r}")

    @property
    def clipping(self) -> bool:
        """Whether updates are clipped at all."""
        return self.clip_factor > 0


class _Bucket:
    """A token bucket: ``tokens`` refilled at ``rate`` per time unit up to ``capacity``."""

    __slots__ = ("capacity", "rate", "tokens", "at")

    def __init__(self, capacity: float, rate: float, now: float) -> None:
        self.capacity, self.rate, self.tokens, self.at = capacity, rate, capacity, now

    def level(self, now: float) -> float:
        """The tokens at ``now`` (without changing the bucket)."""
        return min(self.capacity, self.tokens + max(0.0, now - self.at) * self.rate)

    def spend(self, amount: float, now: float) -> None:
        self.tokens = self.level(now) - amount
        self.at = max(self.at, now)

    def give(self, amount: float, now: float) -> None:
        self.spend(-amount, now)
        self.tokens = min(self.tokens, self.capacity)


class _Keyed:
    """Buckets per sender, least recently used out beyond :data:`GUARD_SENDERS`."""

    def __init__(self, capacity: float, period: float) -> None:
        self._capacity, self._rate = capacity, capacity / period
        self._buckets: OrderedDict[bytes, _Bucket] = OrderedDict()

    def level(self, sender: bytes, now: float) -> float:
        b = self._buckets.get(sender)
        return self._capacity if b is None else b.level(now)

    def bucket(self, sender: bytes, now: float) -> _Bucket:
        b = self._buckets.get(sender)
        if b is None:
            b = self._buckets[sender] = _Bucket(self._capacity, self._rate, now)
            if len(self._buckets) > GUARD_SENDERS:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(sender)
        return b


class ClipRadius:
    """The clipping radius from the latest update norm of each recent sender."""

    def __init__(self, settings: GuardSettings) -> None:
        self._s = settings
        self._latest: OrderedDict[bytes, float] = OrderedDict()

    def radius(self, own_norm: float, sender: bytes | None = None) -> float:
        """The radius for an update from ``sender`` (infinite with clipping off).

        The sender's own entry does not count: a liar alone must not set the
        bar it is measured against.  The median is the lower one (of an even
        count, the smaller middle norm).
        """
        if not self._s.clipping:
            return math.inf
        norms = sorted(n for s, n in self._latest.items() if s != sender)
        if len(norms) < self._s.clip_warmup:
            # nothing to compare with yet: no single push moves us by more
            # than clip_start times our own size (a zero push moves us by 1x)
            return max(self._s.clip_start * own_norm, self._s.clip_floor * own_norm)
        median = norms[(len(norms) - 1) // 2]
        return max(self._s.clip_factor * median, self._s.clip_floor * own_norm)

    @property
    def warmed_up(self) -> bool:
        """Whether ``clip_warmup`` distinct senders were seen (the radius follows them)."""
        return len(self._latest) > self._s.clip_warmup

    def record(self, sender: bytes, norm: float) -> None:
        """Remember ``norm`` as ``sender``'s latest proposed update (accepted or clipped)."""
        self._latest.pop(sender, None)
        self._latest[sender] = norm
        while len(self._latest) > self._s.clip_senders:
            self._latest.popitem(last=False)


class MergeGuard:
    """Per-core state of the merge defences: weight and flag budgets, clipping radius."""

    def __init__(self, settings: GuardSettings) -> None:
        self.settings = settings
        self._taken = _Keyed(settings.weight_budget, settings.budget_period)
        self._given = _Keyed(settings.weight_budget, settings.budget_period)
        self._flags = _Keyed(float(settings.flag_budget), settings.flag_period)
        self._shunned: OrderedDict[bytes, float] = OrderedDict()  # peer -> until
        self.clip = ClipRadius(settings)

    def check_push(self, sender: bytes, weight: float, kept: float, own_weight: float,
                   flagged: bool, masked_mode: bool, now: float) -> None:
        """Raise :class:`RefusedByGuard` if a push may not be merged; change nothing.

        ``weight`` is the share the push carries, ``kept`` what of it stays
        here (the share minus our reply's weight), ``flagged`` whether it is
        marked masked or noisy, ``masked_mode`` whether this node runs one.
        """
        s = self.settings
        bound = s.share_ratio * max(own_weight, s.weight_floor)
        if weight > bound:
            raise RefusedByGuard(
                "weight_share", f"share {weight:g} exceeds {s.share_ratio:g} x "
                f"max(own weight {own_weight:g}, {s.weight_floor:g}) = {bound:g}")
        # as on the sending side (may_push), one push may overdraw the bucket,
        # by at most weight_overdraft: a sender whose bucket is empty sends nothing
        left = self._taken.level(sender, now)
        if kept > 0 and (left <= 0.0 or kept > left + s.weight_overdraft):
            raise RefusedByGuard(
                "weight_budget", f"net weight {kept:g} exceeds this sender's budget left "
                f"{left:g} (+ {s.weight_overdraft:g} overdraft; {s.weight_budget:g} per "
                f"{s.budget_period:g})")
        if flagged:
            if not masked_mode:
                raise RefusedByGuard(
                    "flag_mode", "a masked or noisy push, but this node runs no masked mode")
            if self._flags.level(sender, now) < 1.0:
                raise RefusedByGuard(
                    "flag_budget", f"more than {s.flag_budget} masked or noisy pushes from "
                    f"this sender per {s.flag_period:g}")

    def merged(self, sender: bytes, kept: float, flagged: bool, now: float) -> None:
        """A push passed :meth:`check_push` and was merged: spend its budgets."""
        self._taken.bucket(sender, now).spend(kept, now)
        if kept > 0:
            self._given.bucket(sender, now).give(kept, now)
        if flagged:
            self._flags.bucket(sender, now).spend(1.0, now)

    def may_push(self, peer: bytes, now: float) -> bool:
        """Whether a push may go to ``peer``: not shunned, and its given budget not spent."""
        until = self._shunned.get(peer)
        if until is not None:
            if now < until:
                return False
            del self._shunned[peer]
        # a push may overdraw the bucket by its share: the first push to anyone goes
        return self._given.level(peer, now) > 0.0

    def acked(self, peer: bytes, net: float, now: float, shun: bool) -> None:
        """``peer`` took ``net`` weight of ours (share minus its reply).

        ``shun``: it did not reciprocate (a plain ack to a push-pull request,
        or a reply under 1 / ``share_ratio`` of the share; see the module
        docstring, reciprocity): no push to it for ``budget_period``.
        """
        if net > 0:
            self._given.bucket(peer, now).spend(net, now)
            self._taken.bucket(peer, now).give(net, now)
        if shun:
            self._shunned[peer] = now + self.settings.budget_period
            self._shunned.move_to_end(peer)
            if len(self._shunned) > GUARD_SENDERS:
                self._shunned.popitem(last=False)
