"""Merge defences of one push-sum core: what one lying holder can do to a merge.

Sans-IO: plain Python state keyed by sender id, fed the time the core is given.
A :class:`PushSum` built with ``guard=GuardSettings()`` consults a
:class:`MergeGuard` before and during every merge (push, request or reply):
weight share and ceiling, net weight balance per peer, sinks (reciprocity),
``masked``/``noisy`` flags, value clipping around this node's own model (the
radius from partners' and its own training, jittered, with a clip debt per
sender), the sender share (:class:`SenderShares`, off by default) and the creep
budget (:mod:`gossip.drift_budget`). Every refusal raises
:class:`RefusedByGuard` (a ``RejectedPush`` naming its ``rule``) before any
state changes.

Each rule, its defaults and why: docs/design/trust.md ("Merge guard" and its
sections).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass

import numpy as np

from gossip.drift_budget import DriftBudget
from gossip.errors import InvalidValues, RejectedPush

#: Peers remembered per core (least recently heard from out first).  An
#: evicted peer starts again from a zero balance: forcing an eviction takes
#: this many identities.
GUARD_SENDERS = 4096

#: The rules a :class:`RefusedByGuard` names.
RULES = ("weight_share", "weight_balance", "weight_ceiling", "clip_debt", "flag_mode",
         "flag_budget", "clip", "drift", "sender_share")


class RefusedByGuard(RejectedPush):
    """A push refused by a merge defence; ``rule`` is one of :data:`RULES`."""

    def __init__(self, rule: str, reason: str) -> None:
        super().__init__(f"{rule}: {reason}")
        self.rule = rule


#: Clip checks of each sender after a masking epoch's fold during which the radius
#: keeps the fold's floor (GuardSettings.fold_floor_merges; measured:
#: scripts/bench/privacy.py --real, "clip floor": the honest updates that need the
#: floor are the first clear pushes after the swarm's folds).
FOLD_FLOOR_MERGES = 3


@dataclass(frozen=True)
class GuardSettings:
    """The merge defences' parameters (see the module docstring for each rule)."""

    share_ratio: float = 4.0
    weight_floor: float = 1.0
    balance_cap: float = 3.0  # net weight per peer, each way
    balance_halflife: float = 30.0  # seconds (daemon) or rounds (simulator)
    sink_pause: float = 100.0  # no push to a peer that did not reciprocate, this long
    clip_factor: float = 4.0  # 0 turns clipping off
    clip_floor: float = 1e-3
    clip_senders: int = 16
    clip_warmup: int = 1
    clip_start: float = 0.5  # the radius before clip_warmup partners: this x ||own x||
    reply_clip_factor: float = 4.0  # replies carry up to the responder's tau (returned excess)
    clip_debt_cap: float = 1.0  # clipped-away weight per sender, decaying with ...
    clip_debt_halflife: float = 10.0  # ... this half-life
    clip_debt_decades: float = 4.0  # an update this many decades beyond tau pays in full
    flag_budget: int = 400  # flagged pushes per sender: a burst of this many ...
    flag_period: float = 10.0  # ... refilled over this long (masking epochs mix continuously)
    # after a masking epoch's fold the radius is at least clip_factor x the training the
    # fold added, for this many clip checks of each sender seen before the fold (see
    # ClipRadius.note_fold); 0: no such floor
    fold_floor_merges: int = FOLD_FLOOR_MERGES
    # no push that leaves weight here may take this node's weight above this
    # (honest: 1.8 with push-pull, 5.4 with one-way pushes, 64 nodes): bounds what
    # any number of made-up identities inject, each within its balance_cap
    weight_ceiling: float = 16.0
    # the movement all merges made here, own training taken back, stays within this
    # many times the norm of this node's own training over the same horizon (decaying
    # with drift_halflife own pushes; 0: no such bound); see gossip.drift_budget
    drift_cap: float = 1.0
    drift_halflife: float = 20.0  # pushes this node makes (not time: its own exchange rate)
    drift_floor: float = 0.03  # the budget is at least this x the norm of own estimate
    # the budget applies from the first merge; until this node has made drift_warmup
    # own training steps or drift_warmup_pushes own pushes (neither set by a sender)
    # it is at least drift_catchup x the norm of its own model before any merge, so
    # that a newcomer catches up with a trained swarm (see MergeGuard.fit_drift)
    drift_warmup: int = 10
    drift_warmup_pushes: int = 40
    drift_catchup: float = 1.0
    # each clip check draws the radius in [1 - j, 1 + j] x itself, privately
    clip_jitter: float = 0.1
    own_steps: int = 8  # own training steps whose median norm floors the radius
    # one sender (each identity, partner or not) may hold at most this many times
    # a fair share of the pushes this node merged recently; see SenderShares.  Off
    # by default (0): a liar with 8 made-up identities gets its kicks through all
    # the same, made-up identities can pull the bar down onto honest senders, and
    # honest nodes pushing at different rates were refused (3-8 holders, one node
    # 4x as often: 39-50 of 300-550 pushes).  3 stops a one-identity kicker
    sender_share: float = 0.0
    sender_allowance: float = 6.0  # merges any sender may hold in any case
    sender_halflife: float = 20.0  # pushes this node makes, as drift_halflife

    def __post_init__(self) -> None:
        positive = ("share_ratio", "weight_floor", "balance_cap", "balance_halflife",
                    "sink_pause", "reply_clip_factor", "clip_debt_cap",
                    "clip_debt_halflife", "clip_debt_decades", "flag_period",
                    "weight_ceiling", "drift_halflife", "sender_halflife")
        for name in positive:
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise InvalidValues(f"guard.{name}: expected a positive finite number, "
                                    f"got {value!r}")
        for name in ("clip_factor", "clip_floor", "clip_start", "drift_cap", "sender_share",
                     "sender_allowance", "drift_floor", "drift_catchup"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise InvalidValues(f"guard.{name}: expected a finite number >= 0, got {value!r}")
        for name in ("clip_senders", "clip_warmup", "flag_budget", "own_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidValues(f"guard.{name}: expected an int >= 1, got {value!r}")
        for name in ("fold_floor_merges", "drift_warmup", "drift_warmup_pushes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidValues(f"guard.{name}: expected an int >= 0, got {value!r}")
        if not (isinstance(self.clip_jitter, int | float) and 0 <= self.clip_jitter < 1):
            raise InvalidValues(f"guard.clip_jitter: expected a number in [0, 1), got "
                                f"{self.clip_jitter!r}")

    @property
    def max_share(self) -> float:
        """The largest share this node's own pushes carry (2 by default): half of
        what a guarded receiver takes from one push at least (``share_ratio x
        weight_floor``), and within ``balance_cap``, so that a node a liar made
        heavy still sheds its excess (honest shares are about half a node's
        weight, under 1 with push-pull)."""
        return min(self.share_ratio * self.weight_floor / 2.0, self.balance_cap)

    @property
    def clipping(self) -> bool:
        """Whether updates are clipped at all."""
        return self.clip_factor > 0


class NetBalances:
    """Per peer: net weight it handed us minus net weight we handed it, decaying to 0.

    The value halves every ``halflife`` time units; peers beyond
    :data:`GUARD_SENDERS` are forgotten least recently used first.
    """

    def __init__(self, halflife: float) -> None:
        self._rate = math.log(2.0) / halflife
        self._b: OrderedDict[bytes, tuple[float, float]] = OrderedDict()  # peer -> (value, at)

    def value(self, peer: bytes, now: float) -> float:
        """The balance with ``peer`` at ``now`` (positive: it gave us more than it got)."""
        entry = self._b.get(peer)
        if entry is None:
            return 0.0
        value, at = entry
        return value * math.exp(-self._rate * max(0.0, now - at))

    def add(self, peer: bytes, amount: float, now: float) -> None:
        """``peer`` handed us ``amount`` net (negative: we handed it ``-amount``)."""
        value = self.value(peer, now) + amount
        self._b.pop(peer, None)
        self._b[peer] = (value, now)
        if len(self._b) > GUARD_SENDERS:
            self._b.popitem(last=False)

    def extremes(self, now: float) -> tuple[float, float]:
        """The lowest and highest balance held at ``now`` (0, 0 with none)."""
        values = [self.value(p, now) for p in self._b]
        return (min(values, default=0.0), max(values, default=0.0))


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


#: Below this many (decayed) merges from the other senders there is no typical
#: count to compare with, and :class:`SenderShares` sets no bound (4 instead: 42
#: honest refusals in tests/test_merge_guard_honest.py's grid of 3 to 8 nodes,
#: 3 with 8).
SHARE_EVIDENCE = 8.0
#: Keys whose decayed merge count fell under this are forgotten when the table
#: passes GUARD_SENDERS keys.
FORGET_COUNT = 0.05


class SenderShares:
    """How many of the pushes merged here recently came from each sender: a bound
    on one sender's share.

    The counts decay with this node's own pushes (halving every ``halflife``
    of them), so a sender cannot raise its allowance by pushing faster.  A
    push is merged only if its sender's count, with it, stays within
    ``share`` times the typical count of the other senders, ``sum c_j^2 /
    sum c_j`` over them (the count of the sender of a typical merge), and in
    any case up to ``allowance``.  The sender's own count is left out, so
    it cannot raise its own bar.  An honest sender picks each of its
    partners at random from its view, so it reaches a given node about once
    per view size of its rounds, as the others do; a liar that pushed every
    holder every round was a third to a half of each holder's merges (16
    holders), which let in-radius random kicks grow the honest models'
    spread without bound (docs/design/trust.md, "Random kicks inside the
    radius").  With no other sender merged (a swarm of two) there is no
    bound; with two or three others, an honest sender's count is about
    theirs.

    Keys are senders, partners or not.  Not Sybil-proof: a liar that makes up
    a new identity per push is not bounded here.  One key shared by all
    non-partners (as the creep budget does) refused honest pushes: early on
    most senders are not yet partners (16 nodes: 80 honest pushes per
    60-round run, all under the shared key).
    """

    def __init__(self, share: float, allowance: float, halflife: float) -> None:
        self._share, self._allowance = share, allowance
        self._rate = math.log(2.0) / halflife
        self._counts: dict[bytes, tuple[float, float]] = {}  # key -> (count, at)
        # sum c and sum c^2 over every key, as of ``_at``: every count decays at
        # one rate, so the sums decay as a whole (c at the rate, c^2 at twice
        # it) and a check costs O(1), not a pass over every sender
        self._s1 = self._s2 = self._at = 0.0

    def _decayed(self, entry: tuple[float, float], now: float) -> float:
        value, at = entry
        return value * math.exp(-self._rate * max(0.0, now - at))

    def _sums(self, now: float) -> tuple[float, float]:
        if now > self._at:
            f = math.exp(-self._rate * (now - self._at))
            self._s1, self._s2, self._at = self._s1 * f, self._s2 * f * f, now
        return self._s1, self._s2

    def count(self, key: bytes, now: float) -> float:
        """``key``'s decayed merge count at ``now`` (own pushes)."""
        entry = self._counts.get(key)
        return 0.0 if entry is None else self._decayed(entry, now)

    def limit(self, key: bytes, now: float) -> float:
        """The count ``key`` may reach with one more merge at ``now``: ``share``
        times the typical count of the *other* senders (weighted by their
        counts: the count of the sender of a typical merge), at least
        ``allowance``; unbounded while no other sender was merged."""
        s1, s2 = self._sums(now)
        c = self.count(key, now)
        s1, s2 = s1 - c, max(0.0, s2 - c * c)
        if s1 < SHARE_EVIDENCE:
            # too few merges from the others to tell a typical count (a new node,
            # a swarm of three): no bound yet
            return math.inf
        return max(self._allowance, self._share * s2 / s1)

    def check(self, key: bytes, now: float) -> None:
        """Raise :class:`RefusedByGuard` ("sender_share") if one more merge from
        ``key`` at ``now`` would take its count over :meth:`limit`."""
        after, limit = self.count(key, now) + 1.0, self.limit(key, now)
        if after > limit:
            raise RefusedByGuard(
                "sender_share", f"this sender would hold {after:.3g} of the pushes merged here "
                f"recently, over {limit:.3g} ({self._share:g} x a fair share)")

    def add(self, key: bytes, now: float) -> None:
        """One push from ``key`` was merged at ``now``."""
        self._sums(now)
        old = self.count(key, now)
        self._counts[key] = (old + 1.0, now)
        self._s1 += 1.0
        self._s2 += (old + 1.0) ** 2 - old * old
        if len(self._counts) > GUARD_SENDERS:
            # forget the faded counts, or else the smallest tenth, in one pass: a
            # flood of fresh identities then costs a pass per GUARD_SENDERS / 10 keys
            ranked = sorted(self._counts, key=lambda k: self.count(k, now))
            faded = [k for k in ranked if self.count(k, now) < FORGET_COUNT]
            for k in faded or ranked[: max(1, len(ranked) // 10)]:
                self._forget(k, now)

    def _forget(self, key: bytes, now: float) -> None:
        c = self.count(key, now)
        del self._counts[key]
        self._s1, self._s2 = max(0.0, self._s1 - c), max(0.0, self._s2 - c * c)


class ClipRadius:
    """The clipping radius from the latest update norm of each recent partner
    (a peer that acknowledged a push of ours or got a one-way push of ours, see
    :meth:`note_partner`), at least this node's own recent training steps."""

    def __init__(self, settings: GuardSettings) -> None:
        self._s = settings
        self._latest: OrderedDict[bytes, float] = OrderedDict()
        self._steps: deque[float] = deque(maxlen=settings.own_steps)  # own step norms
        # peers that acknowledged a push of ours (we chose them): only their norms count
        self._partners: OrderedDict[bytes, None] = OrderedDict()
        self._fold_jump = 0.0  # norm of the training our last fold added
        self._fold_checks: dict[bytes, int] = {}  # each sender's clip checks since that fold

    def note_partner(self, peer: bytes) -> None:
        """``peer`` acknowledged a push of ours, or we sent it a one-way push: a
        holder this node chose itself.

        Only partners' update norms set the radius (see :meth:`record`): a
        sender can make up identities for free, but it cannot make this node
        choose them beyond their share of the peer-sampling views.
        """
        self._partners.pop(peer, None)
        self._partners[peer] = None
        if len(self._partners) > GUARD_SENDERS:
            self._partners.popitem(last=False)

    def warmed_up(self, sender: bytes | None = None) -> bool:
        """Whether the radius for ``sender`` comes from partners' updates (else it is
        the warm-up radius, ``clip_start`` x our own norm)."""
        return sum(1 for s in self._latest if s != sender) >= self._s.clip_warmup

    def is_partner(self, peer: bytes) -> bool:
        """Whether ``peer`` is a partner (see :meth:`note_partner`)."""
        return peer in self._partners

    def note_step(self, norm: float) -> None:
        """This node trained a step of norm ``norm`` (0: no training, not kept)."""
        if norm > 0 and math.isfinite(norm):
            self._steps.append(norm)

    def own_step(self) -> float:
        """The median norm of this node's recent training steps (0 before any)."""
        if not self._steps:
            return 0.0
        ranked = sorted(self._steps)
        return ranked[(len(ranked) - 1) // 2]

    def note_fold(self, jump: float) -> None:
        """Our masking epoch folded, adding training of norm ``jump`` to the estimate.

        Each holder trains alone for a whole epoch and folds that training in
        at once, so the first clear pushes after the swarm's folds move by an
        epoch of training, while the recent senders' updates the radius
        follows were a round's drift: one-way, such pushes could only be
        refused (issue 12).  For each sender's next ``fold_floor_merges``
        clip checks the radius is at least ``clip_factor * jump`` (our own
        epoch's training: no peer sets it).  Only senders already among the
        recent ones at the fold get it (at most ``clip_senders``: identities
        made up afterwards get none), counted per sender so that one peer
        cannot spend the honest holders' floor with a burst of pushes; a
        poisoner gets the wider radius only for its own first clear pushes
        after our fold (bench_privacy.py --real, "clip floor": the honest
        updates only the floor lets through come within the first few merges
        after the fold).
        """
        if not (math.isfinite(jump) and jump >= 0):
            raise InvalidValues(f"jump: expected a finite float >= 0, got {jump!r}")
        self._fold_jump = jump
        self._fold_checks = dict.fromkeys(self._latest, 0) if jump > 0 else {}

    def fold_floor(self, sender: bytes | None) -> float:
        """The radius's floor from our last fold for ``sender`` now (0 for a
        sender not seen before the fold, or once its checks are spent)."""
        used = self._fold_checks.get(sender) if sender is not None else None
        if used is None or used >= self._s.fold_floor_merges:
            return 0.0
        return self._s.clip_factor * self._fold_jump

    def radius(self, own_norm: float, sender: bytes | None = None, *,
               with_fold_floor: bool = True) -> float:
        """The radius for an update from ``sender`` (infinite with clipping off).

        The sender's own entry does not count: a liar alone must not set the
        bar it is measured against.  The median is the lower one (of an even
        count, the smaller middle norm), at least this node's own training
        step (:meth:`own_step`: partners answering with nothing cannot collapse
        it).  ``with_fold_floor``: at least :meth:`fold_floor` for ``sender``
        (see :meth:`note_fold`).
        """
        if not self._s.clipping:
            return math.inf
        floor = self.fold_floor(sender) if with_fold_floor else 0.0
        norms = sorted(n for s, n in self._latest.items() if s != sender)
        if len(norms) < self._s.clip_warmup:
            # nothing to compare with yet: no single push moves us by more
            # than clip_start times our own size (a zero push moves us by 1x)
            return max(self._s.clip_start * own_norm, self._s.clip_floor * own_norm, floor)
        median = max(norms[(len(norms) - 1) // 2], self.own_step())
        return max(self._s.clip_factor * median, self._s.clip_floor * own_norm, floor)

    def record(self, sender: bytes, norm: float, *, fold_check: bool = True) -> None:
        """Remember ``norm`` as ``sender``'s latest proposed update (accepted or clipped).

        Ignored unless ``sender`` is a partner (:meth:`note_partner`): an
        unsolicited sender's norm would let made-up identities set the bar.
        ``fold_check``: this was a push's clip check, which counts towards the
        end of ``sender``'s fold floor (a reply answers a request we chose to
        send: it may use the floor without spending it).
        """
        if sender not in self._partners:
            return
        if fold_check and sender in self._fold_checks:
            self._fold_checks[sender] += 1
        self._latest.pop(sender, None)
        self._latest[sender] = norm
        while len(self._latest) > self._s.clip_senders:
            self._latest.popitem(last=False)


class MergeGuard:
    """Per-core state of the merge defences: net balances, flag budgets, clipping radius.

    Not checkpointed: a restarted node starts from zero balances (its peers'
    balances with it decay with ``balance_halflife``), which forgives at most
    one ``balance_cap`` per peer and restart.
    """

    def __init__(self, settings: GuardSettings, length: int = 0,
                 rng: np.random.Generator | None = None) -> None:
        """``length``: values per model (0: no creep budget); ``rng`` draws the
        budget's secret sketch (see :mod:`gossip.drift_budget`)."""
        self.settings = settings
        self.drift = (DriftBudget(length, settings.drift_cap, settings.drift_halflife,
                                  settings.drift_floor, rng)
                      if length > 0 and settings.drift_cap > 0 and settings.clipping else None)
        self.drift_steps = 0  # own training steps the creep budget saw (its warm-up)
        self._catchup_norm: float | None = None  # own model's norm before any merge
        # the radius's private jitter (a generator of its own: the draws never leave it)
        self._jitter = np.random.default_rng(
            None if rng is None else int(rng.integers(2**63)))
        self.balances = NetBalances(settings.balance_halflife)
        self.clip_debt = NetBalances(settings.clip_debt_halflife)
        self._flags = _Keyed(float(settings.flag_budget), settings.flag_period)
        self._shunned: OrderedDict[bytes, float] = OrderedDict()  # peer -> until
        self.clip = ClipRadius(settings)
        self.shares = (SenderShares(settings.sender_share, settings.sender_allowance,
                                    settings.sender_halflife)
                       if settings.sender_share > 0 else None)
        self.held_back = 0  # pushes not sent: the peer's balance was at -balance_cap

    def check_push(self, sender: bytes, weight: float, kept: float, own_weight: float,
                   flagged: bool, masked_mode: bool, now: float,
                   clipped_away: float = 0.0) -> None:
        """Raise :class:`RefusedByGuard` if a push may not be merged; change nothing.

        ``weight`` is the share the push carries, ``kept`` what of it stays
        here (the share minus our reply's weight), ``flagged`` whether it is
        marked masked or noisy, ``masked_mode`` whether this node runs one,
        ``clipped_away`` the part of the share clipping handed back.
        """
        s = self.settings
        bound = s.share_ratio * max(own_weight, s.weight_floor)
        if weight > bound:
            raise RefusedByGuard(
                "weight_share", f"share {weight:g} exceeds {s.share_ratio:g} x "
                f"max(own weight {own_weight:g}, {s.weight_floor:g}) = {bound:g}")
        if kept > 0 and own_weight + kept > s.weight_ceiling:
            raise RefusedByGuard(
                "weight_ceiling", f"net weight {kept:g} would take this node's weight "
                f"{own_weight:g} over {s.weight_ceiling:g}")
        if kept > 0:
            balance = self.balances.value(sender, now)
            if balance + kept > s.balance_cap:
                raise RefusedByGuard(
                    "weight_balance", f"net weight {kept:g} would take this sender's balance "
                    f"{balance:g} over {s.balance_cap:g}")
        if clipped_away > 0:
            debt = self.clip_debt.value(sender, now)
            if debt + clipped_away > s.clip_debt_cap:
                raise RefusedByGuard(
                    "clip_debt", f"a clipped merge of {clipped_away:g} clipped away would take "
                    f"this sender's clip debt {debt:g} over {s.clip_debt_cap:g}")
        if flagged:
            if not masked_mode:
                raise RefusedByGuard(
                    "flag_mode", "a push marked masked or noisy, but this node runs no masked "
                    "mode (is gossip.privacy the same on every node?)")
            if self._flags.level(sender, now) < 1.0:
                raise RefusedByGuard(
                    "flag_budget", f"more than {s.flag_budget} masked or noisy pushes from "
                    f"this sender per {s.flag_period:g}")

    def check_share(self, sender: bytes, own_pushes: float) -> None:
        """Raise :class:`RefusedByGuard` ("sender_share") if merging one more push of
        ``sender`` would give it more than its share of the pushes merged here
        recently (:class:`SenderShares`; decaying with ``own_pushes``, how many
        pushes this node made so far).  Only clear pushes are counted (the
        caller's business): pushes carrying mask noise are not clipped, so no
        radius loop runs through them, and masking epochs exchange with a few
        fixed partners, each a large share by design."""
        if self.shares is not None:
            self.shares.check(sender, own_pushes)

    def jittered(self, tau: float) -> float:
        """``tau`` within ``clip_jitter`` of itself, drawn privately (each clip check)."""
        j = self.settings.clip_jitter
        if not j or not math.isfinite(tau):
            return tau
        return tau * (1.0 + j * (2.0 * float(self._jitter.random()) - 1.0))

    def drift_sketch(self, vector: np.ndarray) -> np.ndarray | None:
        """``vector`` as the creep budget sums it (None: the budget is off)."""
        return None if self.drift is None else self.drift.sketch(vector)

    def fit_drift(self, movement: np.ndarray, own_norm: float, own_pushes: float) -> float:
        """The share of a merge's ``movement`` (sketched: the change it would make to our
        estimate) the creep budget lets through, in [0, 1] (the way back shrinks the
        sum, so it always fits).

        Until this core has made ``drift_warmup`` own training steps or
        ``drift_warmup_pushes`` own pushes, the budget is at least ``drift_catchup``
        x the norm of its own model before any merge: a newcomer catches up with a
        trained swarm, and liars present from its start get that much about once
        or twice (the warm-up lasts at most two half-lives), not more: neither the
        steps, the pushes nor that norm are theirs to set.  The sums decay with
        this node's own pushes (``own_pushes``: how many it made so far), not with
        time: honest pushes arrive at about the rate a node makes its own, however
        fast the swarm exchanges."""
        if self.drift is None:
            return 1.0
        if self._catchup_norm is None:
            self._catchup_norm = own_norm  # the first merge: nothing merged yet
        s = self.settings
        warm = self.drift_steps < s.drift_warmup and own_pushes < s.drift_warmup_pushes
        extra = s.drift_catchup * self._catchup_norm if warm else 0.0
        return self.drift.fit(movement, own_norm, own_pushes, extra)

    def add_drift(self, movement: np.ndarray, own_pushes: float) -> None:
        """A merge (or a roll-back) moved our estimate by ``movement`` (sketched)."""
        if self.drift is not None:
            self.drift.add(movement, own_pushes)

    def note_training(self, step: np.ndarray, values: np.ndarray, own_pushes: float) -> None:
        """This node trained ``step``, to ``values``: it floors the radius, sets the creep
        budget's bound, and merges may take it back without spending the budget."""
        norm = float(np.linalg.norm(step))
        self.clip.note_step(norm)
        if self.drift is not None and norm > 0:
            if self._catchup_norm is None:  # trained before any merge: its own model
                self._catchup_norm = float(np.linalg.norm(values - step))
            self.drift.note_training(self.drift.sketch(step), own_pushes)
            self.drift_steps += 1

    def clip_charge(self, share: float, clipped_away: float) -> float:
        """The clip debt a clipped merge of ``share`` that handed back ``clipped_away``
        costs its sender (see the module docstring)."""
        if clipped_away <= 0 or share <= 0:
            return 0.0
        # clipped_away = share (1 - tau / |update|): recover |update| / tau
        inside = max(1.0 - clipped_away / share, 1e-300)
        decades = math.log10(1.0 / inside)
        return clipped_away * min(1.0, decades / self.settings.clip_debt_decades)

    def merged(self, sender: bytes, kept: float, flagged: bool, now: float,
               clipped_away: float = 0.0, own_pushes: float = 0.0, shared: bool = False) -> None:
        """A push passed :meth:`check_push` and was merged: ``kept`` joins the balance,
        ``clipped_away`` the sender's clip debt; ``shared``: it passed
        :meth:`check_share` and counts towards the sender's share (at ``own_pushes``).
        Its movement goes to the creep budget apart (:meth:`add_drift`)."""
        self.balances.add(sender, kept, now)
        if shared and self.shares is not None:
            self.shares.add(sender, own_pushes)
        if clipped_away > 0:
            self.clip_debt.add(sender, clipped_away, now)
        if flagged:
            self._flags.bucket(sender, now).spend(1.0, now)

    def may_push(self, peer: bytes, now: float, share: float = 0.0) -> bool:
        """Whether a push of ``share`` may go to ``peer``: not paused, and what we
        gave it net, with this whole share, stays within ``balance_cap``."""
        until = self._shunned.get(peer)
        if until is not None:
            if now < until:
                return False
            del self._shunned[peer]
        if self.balances.value(peer, now) - share < -self.settings.balance_cap:
            self.held_back += 1
            return False
        return True

    def acked(self, peer: bytes, net: float, now: float, shun: bool) -> None:
        """``peer`` took ``net`` weight of ours (share minus its reply).

        ``shun``: it did not reciprocate (a plain ack to a push-pull request,
        or a reply under 1 / ``share_ratio`` of the share; see the module
        docstring, reciprocity): no push to it for ``sink_pause``.
        """
        if net != 0.0:
            self.balances.add(peer, -net, now)
        if shun:
            self._shunned[peer] = now + self.settings.sink_pause
            self._shunned.move_to_end(peer)
            if len(self._shunned) > GUARD_SENDERS:
                self._shunned.popitem(last=False)
