"""The merge guard applied to one core's merges: one path for pushes and replies.

:class:`~gossip.merge_guard.MergeGuard` keeps the per-sender state (balances,
debts, radius, budgets); :class:`MergeChecks` applies it to everything the
core merges.  A received push or request passes :meth:`MergeChecks.admit`
(weights, flags, shares), then every merge, a push, a request or a reply to
one of our requests, is scaled by the same rule: clipped to the radius
around our own model, then to what the creep budget has left
(:meth:`MergeChecks.clip_factor`, :meth:`MergeChecks.clip_reply`).  What is
not merged is refused (a one-way push), handed back (a request: exact for
mass) or dropped (a reply).  The rules are in docs/design/trust.md.
"""

from __future__ import annotations

import math

import numpy as np

from gossip.in_flight import Outstanding
from gossip.merge_guard import MergeGuard, RefusedByGuard
from gossip.messages import Push
from gossip.validation import MAX_ABS_VALUE


class MergeChecks:
    """One core's use of its :class:`MergeGuard`."""

    def __init__(self, guard: MergeGuard, exchange: str, counters: dict[str, int]) -> None:
        self.guard = guard
        self.exchange = exchange
        self._c = counters  # the core's: clipped_replies, unreciprocated
        # (tau, |y - x|) of the latest clip check of a push (None: not clip-checked)
        self.seen: tuple[float, float] | None = None
        self._kept = 1.0  # the radius's share of the update last checked (1.0: within)
        # the movement of the push being checked (our estimate's change: sketched for
        # the creep budget, and its norm)
        self._movement: tuple[np.ndarray | None, float] | None = None
        #: how far each peer's merges moved our estimate since :meth:`take_moved`
        self.moved_by: dict[bytes, float] = {}
        #: the share of the latest reply's update that was merged (1.0: all of it), and
        #: the share the radius alone let through
        self.reply_kept = self.reply_in_radius = 1.0

    def admit(self, sender: bytes, push: Push, r: float, own_weight: float, flagged: bool,
              masked_mode: bool, noisy: bool, own_pushes: float, now: float) -> None:
        """The checks before a push's values are looked at (RefusedByGuard: refused)."""
        self.guard.check_push(sender, push.weight, push.weight - r, own_weight, flagged,
                              masked_mode, now)
        if not (flagged or noisy):  # what the radius applies to
            self.guard.check_share(sender, own_pushes)
        self.seen = None
        self._movement = None

    def charge(self, sender: bytes, push: Push, r: float, clip: float, own_weight: float,
               flagged: bool, masked_mode: bool, now: float) -> float:
        """The clip debt a clipped merge costs (0.0 unclipped), or RefusedByGuard.

        A merge clipped to the radius costs the sender (part of) what was
        clipped away, ``s (1 - tau / |update|)``: little when an honest node is
        a little off, the whole share for a liar's kick, which would otherwise
        be free (the reply gives it back).  What the creep budget held back
        costs nothing (an honest sender may meet a budget a liar spent).
        """
        if clip == 1.0:
            return 0.0
        # only the radius's part costs: what the creep budget held back is no kick
        clipped_away = self.guard.clip_charge(push.weight, push.weight * (1.0 - self._kept))
        self.guard.check_push(sender, push.weight, push.weight - r, own_weight, flagged,
                              masked_mode, now, clipped_away)
        return clipped_away

    def moved(self, sender: bytes, own_pushes: float) -> None:
        """The push last checked by :meth:`clip_factor` was merged: its movement joins the
        creep budget and the sender's share of what moved us."""
        movement, self._movement = self._movement, None
        if movement is not None:
            self._note(sender, *movement, own_pushes)

    def _note(self, sender: bytes, sketched: np.ndarray | None, size: float,
              own_pushes: float) -> None:
        if sketched is not None:
            self.guard.add_drift(sketched, own_pushes)
        self.moved_by[sender] = self.moved_by.get(sender, 0.0) + size

    def take_moved(self) -> dict[bytes, float]:
        """How far each peer's merges moved our estimate since the last call (recovery)."""
        moved, self.moved_by = self.moved_by, {}
        return moved

    def clip_factor(self, sender: bytes, y: np.ndarray, x: np.ndarray, s: float, r: float,
                    w: float, flagged: bool, noisy: bool, scratch: np.ndarray,
                    own_pushes: float) -> float:
        """The reply's scale of ``x - q_A`` (1.0: no clipping) or RefusedByGuard.

        ClippedGossip with exact mass (docs/design/trust.md, "Clipping"): the
        update ``y - x`` is clipped to the guard's radius tau, then to the share
        of it the creep budget lets through (its movement of our estimate,
        ``s / (w + s - r)`` of the update, is what the budget counts).  A
        one-way push that would be clipped is refused (the sender keeps its
        weight: a rule exact for mass).  A push-pull responder merges the
        clipped ``q_A' = x + c (q_A - x)`` and hands the clipped-away part back
        in its reply: the reply's values become ``x + (s / r) (q_A - q_A')``,
        i.e. ``q_A + k (x - q_A)`` with ``k = 1 - (s / r) (1 - c)``, so the
        initiator, removing ``s q_A`` and adding ``r q_B``, keeps the part we
        did not merge and the sums stay exact.  A core that itself pushes
        one-way refuses such a request instead: its slow mixing cannot absorb
        clipped kicks, whose spread raised the radius they are clipped to.
        Updates carrying mask noise (a flagged push, or this node holding
        noise apart) are not clipped: masks are large by design.
        """
        self._movement, self._kept = None, 1.0
        if not self.guard.settings.clipping or flagged or noisy:
            return 1.0
        diff = np.subtract(y, x, out=scratch)
        norm = math.sqrt(float(np.einsum("i,i->", diff, diff)))
        clip = self.guard.clip
        own_norm = math.sqrt(float(np.einsum("i,i->", x, x)))
        # (right after a masking epoch's fold, at least the fold's floor: see
        # ClipRadius.note_fold, set when the core folds)
        tau = self.guard.jittered(clip.radius(own_norm, sender))
        clip.record(sender, norm)  # statistics only: also when refused
        self.seen = (tau, norm)
        kept = self._kept = 1.0 if norm <= tau else tau / norm
        alpha = s / (w + s - r)  # the share of the update that moves our estimate
        sketched = self.guard.drift_sketch(diff)
        budget = (1.0 if sketched is None
                  else self.guard.fit_drift(sketched * (alpha * kept), own_norm, own_pushes))
        c = kept * budget
        self._movement = (None if sketched is None else sketched * (alpha * c),
                          alpha * c * norm)
        if c >= 1.0:
            return 1.0
        if kept < 1.0:
            rule, why = "clip", f"update norm {norm:.3g} exceeds the radius {tau:.3g}"
        else:
            rule, why = "drift", (f"the merges here would move this node more than "
                                  f"{self.guard.settings.drift_cap:g} x its own training "
                                  f"(the update fits {budget:.2g} of it)")
        if r <= 0.0:
            raise RefusedByGuard(rule, why)
        if self.exchange == "push":
            # a one-way holder clips nothing, a request included: its slow mixing
            # cannot absorb the kicks, whose spread raises the radius they are
            # clipped to (docs/design/trust.md, "Clipping")
            raise RefusedByGuard(rule, f"{why} (one-way holder: no clipped merges)")
        k = 1.0 - (s / r) * (1.0 - c)
        # the reply's values q_A + k (x - q_A) must stay within the magnitude bound
        largest = float(np.abs(y).max()) + abs(k) * float(np.abs(diff).max())
        if largest > MAX_ABS_VALUE:
            raise RefusedByGuard(
                rule, f"{why} and the part to hand back would exceed the magnitude bound "
                f"({largest:.3g})")
        return k

    def clip_reply(self, o: Outstanding, d: np.ndarray, r: float, x: np.ndarray, w: float,
                   noisy: bool, scratch: np.ndarray, own_pushes: float) -> None:
        """Clip a reply's update ``q_B - x`` in place of its delta ``d = q_B - q_A``.

        The same rule as a push's (:meth:`clip_factor`): the radius is
        ``reply_clip_factor`` times ours (an honest responder that clipped our
        request hands the clipped-away part back, so its reply may
        legitimately sit up to its own radius away), then the creep budget
        scales it (replies spend it like pushes: a liar answering our requests
        is bounded as one pushing to us).  The part clipped here is not merged
        (the responder already gave it away): the one place the defences lose
        mass, counted in ``clipped_replies``; :attr:`reply_kept` says how much
        was merged, :attr:`reply_in_radius` how much the radius let through.
        """
        self.reply_kept = self.reply_in_radius = 1.0
        if not self.guard.settings.clipping or noisy:
            return
        v = np.add(o.sent, d, out=scratch)
        v -= x
        norm = math.sqrt(float(np.einsum("i,i->", v, v)))
        clip = self.guard.clip
        own_norm = math.sqrt(float(np.einsum("i,i->", x, x)))
        # before a partner was seen, reply_clip_factor x clip_start ||x|| (2 ||x||): an
        # honest first reply lands half way between two initial models, well within it,
        # while a liar answering a newcomer's (or a restarted node's) first request
        # must not move it without bound
        # (a reply right after the responder's fold may carry its epoch: the fold
        # floor applies, unspent by replies)
        tau = self.guard.jittered(self.guard.settings.reply_clip_factor
                                  * clip.radius(own_norm, o.peer))
        clip.record(o.peer, norm, fold_check=False)
        kept = self.reply_in_radius = 1.0 if norm <= tau else tau / norm
        alpha = r / (w - o.push.weight + r)  # the share of the update that moves us
        sketched = self.guard.drift_sketch(v)
        c = kept * (1.0 if sketched is None
                    else self.guard.fit_drift(sketched * (alpha * kept), own_norm, own_pushes))
        self._note(o.peer, None if sketched is None else sketched * (alpha * c),
                   alpha * c * norm, own_pushes)
        self.reply_kept = c
        if c >= 1.0:
            return
        # q_B' = x + c (q_B - x), so d' = q_B' - q_A
        v *= c
        np.subtract(x, o.sent, out=d)
        d += v
        self._c["clipped_replies"] += 1

    def unreciprocated(self, o: Outstanding, replied: bool, privacy: str, now: float) -> bool:
        """Whether an ack answers our push-pull request without a (valid) reply: then the
        share is *kept* and the peer gets no push for ``sink_pause``.

        The sink rule (docs/design/trust.md, "Weight"): an honest responder of a
        privacy "none" swarm always replies to a request (it replies unless it
        holds mask noise, and with the guard a "none" node refuses every masked
        or noisy push, so it never holds any).  A plain ack to a request
        therefore comes from a liar claiming to have merged our share while
        giving nothing back; keeping the share leaves the honest nodes' sums of
        weight and mass exactly as if the push had been refused.
        """
        if replied or not o.push.want_reply or privacy != "none":
            return False
        self._c["unreciprocated"] += 1
        self.guard.acked(o.peer, 0.0, now, shun=True)
        return True

    def acked(self, o: Outstanding, r: float | None, now: float) -> None:
        """``o`` was acknowledged with a reply of weight ``r`` (None: none); a reply far
        below the share (a taking sink) earns the same pause as no reply."""
        share = o.push.weight
        short = r is not None and r * self.guard.settings.share_ratio < share
        self.guard.acked(o.peer, share - (r if r is not None else 0.0), now, shun=short)

    def targets(self, peers: list[bytes], share: float, now: float) -> list[bytes]:
        """The candidates a push of ``share`` may go to: a peer that took more than it
        gave back (a sink) gets nothing more (counted in ``guard_held``)."""
        held_before = self.guard.held_back
        out = [p for p in peers if self.guard.may_push(p, now, share)]
        self._c["guard_held"] += self.guard.held_back - held_before
        return out
