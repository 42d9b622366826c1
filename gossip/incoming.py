"""The incoming side of a push-sum core: merging a received push, replying to a request.

Every received push is validated before anything changes (fingerprint, id,
length, finite values within the bound, weight), recognised if it was merged
before (the push ids merged per sender, :mod:`gossip.dup_window`: a
retransmission gets the very ack it got the first time, a stored reply
included, and is never merged twice), rebuilt if it is a delta against a
pair's reference, checked by the merge defences, then merged: a one-way push
into the estimate, a push-pull request with a share of this node's mass
given back in the ack (docs/design/gossip.md, "The exchange").
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from gossip.core_parts import CoreParts, offender
from gossip.dup_window import DupWindow, Seen
from gossip.errors import InvalidValues, RejectedPush
from gossip.in_flight import short
from gossip.merge_guard import RefusedByGuard
from gossip.messages import Push, PushAck
from gossip.references import ReferenceKey, rebuild, reference_of
from gossip.reply_store import ReplyStore
from gossip.validation import MAX_ABS_VALUE, check_magnitude, validate_push
from gossip.wire_format import REPLY_RESIDUAL

#: (sender, request values q_A, request, reply weight r, clip factor) -> the ack with the
#: reply: :meth:`Incoming.answer`, or a core's own rule built on it
ReplyRule = Callable[[bytes, np.ndarray, Push, float, float], PushAck]
#: (sender, values, share, reply weight, flagged) -> the reply's clip factor (1.0: none)
ClipRule = Callable[[bytes, np.ndarray, float, float, bool], float]
#: (sender, delta request, its decoded delta, now) -> its values: :meth:`Incoming.rebuild_request`
RebuildRule = Callable[[bytes, Push, np.ndarray, float], np.ndarray]


class MissingReference(RejectedPush):
    """A delta request names a reference this core does not hold (refused, not an offence)."""


class Incoming:
    """Receives pushes for one core (see the module docstring)."""

    def __init__(self, parts: CoreParts, *, max_weight: float, max_abs_value: float,
                 dup_span: int, reply_store_bytes: int, reply: ReplyRule,
                 clip: ClipRule, rebuild: RebuildRule) -> None:
        self.p = parts
        self.max_weight = max_weight
        self.max_abs_value = max_abs_value
        # push ids merged per sender, and whether we answered with a reply
        self.seen = DupWindow(dup_span)
        self.replies = ReplyStore(reply_store_bytes)
        # the steps a core may refine (see PushSum's "rules")
        self._reply, self._clip, self._rebuild = reply, clip, rebuild

    def receive(self, sender: bytes, push: Push, now: float) -> tuple[PushAck, bool]:
        """Validate and merge ``push`` (see :meth:`PushSum.on_push`): the ack, and whether
        the merge joined a noisy side with a folded one (see ``boundary_fold_age``).

        RejectedPush: refused, nothing changed.
        """
        p = self.p
        est, checks, c = p.est, p.checks, p.counters
        masked_mode = p.privacy == "masked"
        try:
            y = validate_push(push, p.fingerprint, est.n, self.max_weight)
            if self.max_abs_value < MAX_ABS_VALUE and y.size:
                largest = max(float(y.max()), -float(y.min()))
                if largest > self.max_abs_value:
                    raise RejectedPush(f"values: magnitude {largest:.3g} exceeds the bound "
                                       f"{self.max_abs_value:.4g} the mask scale allows")
            if not isinstance(sender, bytes):
                raise RejectedPush(f"sender: expected bytes, got {type(sender).__name__}")
            seen = self.seen.lookup(sender, push.push_id)
            if seen is Seen.MERGED or seen is Seen.REPLIED:
                return self._answer_again(sender, push.push_id, seen is Seen.REPLIED), False
            if seen is Seen.TOO_OLD:
                raise RejectedPush(
                    f"push_id {push.push_id}: older than the {self.seen.span} ids remembered "
                    "for this sender, so it may have been merged; refusing to merge it twice"
                )
            if est.w + push.weight > self.max_weight:
                raise RejectedPush(
                    f"weight: merging {push.weight:g} would raise the weight to "
                    f"{est.w + push.weight:g} > max_weight {self.max_weight:g}"
                )
            flagged = push.masked or push.noisy
            replying = (push.want_reply and p.privacy == "none" and not est.noisy
                        and not flagged)
            r = self.reply_weight(push.weight) if replying else 0.0
            if checks is not None:
                checks.admit(sender, push, r, est.w, flagged, masked_mode, est.noisy,
                             float(p.own_pushes), now)
            if push.base:
                y = self._rebuild(sender, push, y, now)
            clip = self._clip(sender, y, push.weight, r, flagged)
            clipped_away = 0.0
            if checks is not None:
                clipped_away = checks.charge(sender, push, r, clip, est.w, flagged,
                                             masked_mode, now)
        except MissingReference:
            raise  # not an offence: counted and logged in rebuild_request
        except RejectedPush as exc:
            c["rejected"] += 1
            if isinstance(exc, RefusedByGuard):
                c["guard_refused"] += 1
            p.offences.warning(now, offender(sender), "rejected push from %s for model %s: %s",
                               short(sender) if isinstance(sender, bytes) else sender,
                               short(p.fingerprint), exc.reason)
            raise
        c["pushes_received"] += 1
        c["bytes_received"] += push.nbytes
        if checks is not None:
            checks.guard.merged(sender, push.weight - r, flagged, now, clipped_away,
                                float(p.own_pushes), shared=not (flagged or est.noisy))
            checks.moved(sender, float(p.own_pushes))
            if clip != 1.0:
                c["clipped"] += 1
        if not replying:
            boundary = est.merge(y, push.weight, noisy=flagged,
                                 noise_age=0 if push.masked else push.noise_age)
            self.seen.record(sender, push.push_id, False)
            return PushAck(p.fingerprint, push.push_id), boundary
        ack = self._reply(sender, y, push, r, clip)
        self.seen.record(sender, push.push_id, True)
        self.replies.put((sender, push.push_id), ack)
        c["replies_sent"] += 1
        c["bytes_sent"] += ack.nbytes
        return ack, False

    def reply_weight(self, s: float) -> float:
        """The weight we give back to a push-pull request of share ``s``."""
        # The textbook symmetric rule gives r = a / (fanout + 1) (a: our weight
        # not promised to our own pushes in flight); we also never give back
        # more than the share we take: with equal weights (the usual case) the
        # two agree and both ends land on the pairwise average, and r <= s
        # makes a reply unable to raise the initiator's or the total weight, a
        # bound the initiator checks exactly (see Outgoing.check_reply).
        return min(s, self.p.available_weight / (self.p.fanout + 1))

    def answer(self, sender: bytes, q_a: np.ndarray, push: Push, r: float,
               clip: float = 1.0) -> PushAck:
        """Merge a push-pull request and give away a share ``r`` of our mass in the ack.

        Precondition: privacy "none", no held-apart noise on either side, so
        ``x == z`` before and after.  ``clip`` scales the reply's delta
        against ``q_a`` (1.0 but when the update was clipped, see
        :meth:`gossip.merge_checks.MergeChecks.clip_factor`).
        """
        p = self.p
        est = p.est
        # the reply is a delta against what the initiator sent: small once the
        # two agree, so a coarse encoding loses little; both ends use exactly
        # the decoded delta, so mass stays exact.
        delta = np.subtract(est.x, q_a, out=est.buffer())
        # a clipped reply's rounding stays in our estimate: a small share of the radius
        seen = None if p.checks is None else p.checks.seen
        encoded, d = p.wire.reply(delta, clip, 0.0 if seen is None else REPLY_RESIDUAL * seen[0])
        # the initiator derives the same reference from the same decoded inputs
        key = ReferenceKey(sender, push.push_id, False)
        est.answer(delta, d, push.weight, r,
                   lambda free: p.references.record(key, reference_of(q_a, d, out=free)))
        return PushAck(p.fingerprint, push.push_id, reply=encoded, reply_weight=r)

    def rebuild_request(self, sender: bytes, push: Push, delta: np.ndarray,
                         now: float) -> np.ndarray:
        """The values of a delta request: the named reference plus ``delta`` (ours, float64)."""
        p = self.p
        ref = p.references.get(ReferenceKey(sender, push.base, not push.base_by_sender))
        if ref is None:
            p.counters["references_missing"] += 1
            started = "the sender" if push.base_by_sender else "this node"
            reason = (f"base: no reference from exchange {push.base} (started by {started}) "
                      "is held for this sender; send absolute values")
            # Rate-limited per sender: any peer may name a reference never held; a
            # protocol detail (the sender falls back to absolute values), so debug.
            p.offences.log(now, offender(sender), logging.DEBUG,
                           "refused a delta push from %s for model %s: %s", short(sender),
                           short(p.fingerprint), reason)
            raise MissingReference(reason)
        q = rebuild(ref, delta)
        try:
            check_magnitude(q, "values (reference plus delta)")
        except InvalidValues as exc:
            raise RejectedPush(str(exc)) from None
        return q

    def _answer_again(self, sender: bytes, push_id: int, replied: bool) -> PushAck:
        """The ack for a retransmission of a push merged before (no second merge)."""
        c = self.p.counters
        if not replied:
            c["duplicates"] += 1
            return PushAck(self.p.fingerprint, push_id)
        ack = self.replies.reuse((sender, push_id))
        if ack is None:
            c["replies_evicted"] += 1
            raise RejectedPush(
                f"push {push_id} was merged and answered with a reply that is no longer "
                "stored; refusing to merge it twice"
            )
        c["duplicates"] += 1
        c["bytes_sent"] += ack.nbytes
        return ack
