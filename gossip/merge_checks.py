"""The merge guard applied to one core's merges: shares, clipping, creep, reciprocity.

:class:`~gossip.merge_guard.MergeGuard` keeps the per-sender state (balances,
debts, radius, budgets); :class:`MergeChecks` applies it to what the core
merges: a received push or request (:meth:`MergeChecks.admit`, clipped by
:meth:`MergeChecks.clip_factor`), a reply to one of our requests
(:meth:`MergeChecks.clip_reply`), and an ack that brought no reply
(:meth:`MergeChecks.unreciprocated`).  How a clipped request keeps mass exact
is in :meth:`MergeChecks.clip_factor`; the rules are in docs/design/trust.md.
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

    def admit(self, sender: bytes, push: Push, r: float, own_weight: float, flagged: bool,
              masked_mode: bool, noisy: bool, own_pushes: float, now: float) -> None:
        """The checks before a push's values are looked at (RefusedByGuard: refused)."""
        self.guard.check_push(sender, push.weight, push.weight - r, own_weight, flagged,
                              masked_mode, now)
        if not (flagged or noisy):  # what the radius applies to
            self.guard.check_share(sender, own_pushes)
        self.seen = None

    def charge(self, sender: bytes, push: Push, r: float, clip: float, own_weight: float,
               flagged: bool, masked_mode: bool, now: float) -> float:
        """The clip debt a clipped merge costs (0.0 unclipped), or RefusedByGuard.

        A clipped merge costs the sender (part of) what was clipped away,
        ``(1 - clip) r = s (1 - tau / |update|)``: little when an honest node is
        a little off, the whole share for a liar's kick, which would otherwise
        be free (the reply gives it back).
        """
        if clip == 1.0:
            return 0.0
        clipped_away = self.guard.clip_charge(push.weight, (1.0 - clip) * r)
        self.guard.check_push(sender, push.weight, push.weight - r, own_weight, flagged,
                              masked_mode, now, clipped_away)
        return clipped_away

    def creep_check(self, sender: bytes, y: np.ndarray, x: np.ndarray,
                    own_pushes: float) -> np.ndarray | None:
        """The update a push would merge (clipped), as the creep budget sums it, or
        RefusedByGuard ("drift"; see :mod:`gossip.drift_budget`); None when the
        push was not clip-checked (clipping off, mask noise) or the radius is
        still the warm-up one (no partner's update seen: a node that only
        answers has no radius to count in, nor own pushes to decay with)."""
        guard = self.guard
        if guard.drift is None or self.seen is None or not guard.clip.warmed_up(sender):
            return None
        tau, norm = self.seen
        # in radii at the time of the merge: as an honest swarm converges its
        # radius shrinks, and the past larger steps must not count for more
        update = np.subtract(y, x)
        update *= 1.0 / max(norm, tau) if norm > 0 else 0.0
        sketched = guard.drift.sketch(update)
        guard.check_drift(sender, sketched, own_pushes)
        return sketched

    def clip_factor(self, sender: bytes, y: np.ndarray, x: np.ndarray, s: float, r: float,
                    flagged: bool, noisy: bool, scratch: np.ndarray) -> float:
        """The reply's scale of ``x - q_A`` (1.0: no clipping) or RefusedByGuard.

        ClippedGossip with exact mass (docs/design/trust.md, "Clipping"): the
        update ``y - x`` is clipped to the guard's radius tau.  A one-way push
        whose update is longer is refused (the sender keeps its weight: a rule
        exact for mass).  A push-pull responder merges the clipped
        ``q_A' = x + clip(q_A - x)`` and hands the clipped-away part back in
        its reply: the reply's values become ``x + (s / r) (q_A - q_A')``, i.e.
        ``q_A + k (x - q_A)`` with ``k = 1 - (s / r) (1 - tau / |q_A - x|)``,
        so the initiator, removing ``s q_A`` and adding ``r q_B``, keeps the
        part we did not merge and the sums stay exact.  A core that itself
        pushes one-way refuses such a request instead: its slow mixing cannot
        absorb clipped kicks, whose spread raised the radius they are clipped
        to.  Updates carrying mask noise (a flagged push, or this node holding
        noise apart) are not clipped: masks are large by design.
        """
        if not self.guard.settings.clipping or flagged or noisy:
            return 1.0
        diff = np.subtract(y, x, out=scratch)
        norm = math.sqrt(float(np.einsum("i,i->", diff, diff)))
        clip = self.guard.clip
        # (right after a masking epoch's fold, at least the fold's floor: see
        # ClipRadius.note_fold, set when the core folds)
        tau = clip.radius(math.sqrt(float(np.einsum("i,i->", x, x))), sender)
        clip.record(sender, norm)  # statistics only: also when refused
        self.seen = (tau, norm)
        if norm <= tau:
            return 1.0
        if r <= 0.0:
            raise RefusedByGuard("clip", f"update norm {norm:.3g} exceeds the radius {tau:.3g}")
        if self.exchange == "push":
            raise RefusedByGuard("clip", f"update norm {norm:.3g} exceeds the radius "
                                 f"{tau:.3g} (one-way holder: no clipped merges)")
        k = 1.0 - (s / r) * (1.0 - tau / norm)
        # the reply's values q_A + k (x - q_A) must stay within the magnitude bound
        largest = float(np.abs(y).max()) + abs(k) * float(np.abs(diff).max())
        if largest > MAX_ABS_VALUE:
            raise RefusedByGuard(
                "clip", f"update norm {norm:.3g} exceeds the radius {tau:.3g} and the part "
                f"to hand back would exceed the magnitude bound ({largest:.3g})")
        return k

    def clip_reply(self, o: Outstanding, d: np.ndarray, x: np.ndarray, noisy: bool,
                   scratch: np.ndarray) -> None:
        """Clip a reply's update ``q_B - x`` in place of its delta ``d = q_B - q_A``.

        The radius is ``reply_clip_factor`` times ours: an honest responder that
        clipped our request hands the clipped-away part back, so its reply
        may legitimately sit up to its own radius away.  The part clipped here
        is not merged (the responder already gave it away): the only place the
        defences lose mass, counted in ``clipped_replies``.
        """
        if not self.guard.settings.clipping or noisy:
            return
        v = np.add(o.sent, d, out=scratch)
        v -= x
        norm = math.sqrt(float(np.einsum("i,i->", v, v)))
        clip = self.guard.clip
        # before a partner was seen, reply_clip_factor x clip_start ||x|| (2 ||x||): an
        # honest first reply lands half way between two initial models, well within it,
        # while a liar answering a newcomer's (or a restarted node's) first request
        # must not move it without bound
        # (a reply right after the responder's fold may carry its epoch: the fold
        # floor applies, unspent by replies)
        tau = (self.guard.settings.reply_clip_factor
               * clip.radius(math.sqrt(float(np.einsum("i,i->", x, x))), o.peer))
        clip.record(o.peer, norm, fold_check=False)
        if norm <= tau:
            return
        # q_B' = x + (tau / norm) (q_B - x), so d' = q_B' - q_A
        v *= tau / norm
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
