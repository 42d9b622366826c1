"""The outgoing side of a push-sum core: this node's pushes, and the acks they get.

A push carries a share ``s = available / (fanout + 1)`` (at most the guard's
``max_share``) and the estimate encoded (:mod:`gossip.wire_format`): masked
in a masked phase, a delta against the pair's reference when one is held
(:mod:`gossip.references`).  The sender keeps exactly the decoded values it
sent and removes ``s`` times them when the ack arrives; a push-pull reply
``(r, q_B)`` in the ack adds ``r q_B``, after its checks (a bad reply is
dropped, the ack still applied: the responder did merge our share).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence

import numpy as np

from gossip.core_parts import CoreParts, offender
from gossip.errors import InvalidValues, RejectedAck, RejectedReply
from gossip.in_flight import Outstanding, short
from gossip.masking.noise import MaskSource
from gossip.messages import Push, PushAck
from gossip.references import ReferenceKey, rebuild, reference_of
from gossip.validation import check_magnitude, decode_values
from gossip.wire_format import decoded, rms

#: What a merged reply was worth to the partner choice (:attr:`Outgoing.last_reply`):
#: "useful"; "echo", its values our own (a delta under ECHO_SHARE of our own
#: training step: weight back, nothing to average); "clipped", less than half of it
#: merged for the creep budget (which an honest reply may meet, spent by a liar);
#: "far", over twice the reply radius away (no honest reply is: a poisoner's)
REPLY_VERDICTS = ("useful", "echo", "clipped", "far")
#: A reply whose delta is under this share of our own recent training step is an echo.
ECHO_SHARE = 0.02

#: (the push, its ack) -> the reply's weight and decoded delta, or InvalidValues:
#: :meth:`Outgoing.check_reply`, or a core's own rule built on it
ReplyCheck = Callable[[Outstanding, PushAck], tuple[float, np.ndarray]]


class Outgoing:
    """Makes one core's pushes and takes their acks (see the module docstring)."""

    def __init__(self, parts: CoreParts, *, masks: MaskSource, masked_pushes: int,
                 mask_std: float, first_id: int, max_in_flight: int, max_share: float | None,
                 check_reply: ReplyCheck) -> None:
        self.p = parts
        self.masks = masks
        self.mask_std = mask_std
        self.masked_left = masked_pushes  # pushes still to mask (masked mode)
        self.next_id = first_id
        self.max_in_flight = max_in_flight
        self.max_share = max_share  # the guard's (None: no guard)
        self.last_gap: float | None = None  # RMS(q_B - q_A) / RMS(q_A), last reply
        self.last_reply: str | None = None  # REPLY_VERDICTS (None without the guard)
        self._check_reply = check_reply

    def share(self) -> float:
        """The weight of each new push: ``available / (fanout + 1)``, at most the
        guard's :attr:`~gossip.merge_guard.GuardSettings.max_share`.

        A liar can hand a node weight (one-way pushes of its own estimate pass
        every check, up to the net balance per peer); uncapped, a node whose
        weight passed about 6 made shares its own guard held back (and beyond
        8 every guarded receiver refused): it never pushed again, and weight
        only leaves by pushes.  Capped, it sheds the excess over a few
        exchanges.
        """
        share = self.p.available_weight / (self.p.fanout + 1)
        if self.max_share is not None:
            share = min(share, self.max_share)
        return share

    def targets(self, peers: Sequence[bytes], now: float) -> list[bytes]:
        """The peers of ``peers`` this round's pushes go to (nothing while ``max_in_flight``
        pushes await acks; not a peer that awaits one, nor one the guard holds back)."""
        blocking = self.p.flight.blocking()
        if not peers or len(blocking) >= self.max_in_flight:
            return []
        busy = {o.peer for o in blocking}
        targets = [p for p in dict.fromkeys(peers) if p not in busy]
        if self.p.checks is not None:
            # a peer that took more than it gave back (a sink) gets nothing more;
            # the next candidate takes its place (see PushSum.holders_wanted)
            targets = self.p.checks.targets(targets, self.share(), now)
        return targets[: self.p.fanout]

    def push(self, peer: bytes, share: float, now: float) -> tuple[bytes, Push]:
        """A new push of ``share`` to ``peer``, now awaiting its ack."""
        p = self.p
        est, c = p.est, p.counters
        masked = self.masked_left > 0
        if masked:
            payload = est.x + self.masks.normal(est.n, self.mask_std)
            self.masked_left -= 1
            c["masked_sent"] += 1
        else:
            payload = est.x
        noisy = masked or est.noisy
        # masked mode and held-apart noise use one-way pushes (see Incoming.receive)
        want_reply = p.exchange == "push-pull" and p.privacy == "none" and not noisy
        held = p.references.latest(peer) if want_reply else None
        base, base_by_sender = 0, False
        if held is not None:
            # a delta against the pair's reference: rounding relative to
            # the disagreement, not to the values
            key, ref = held
            encoded, d = p.wire.request(payload, est.buffer(), ref)
            sent = rebuild(ref, d)
            base, base_by_sender = key.push_id, key.started_here
            c["delta_pushes_sent"] += 1
        elif want_reply:
            encoded, sent = p.wire.request(payload, est.buffer())
        else:
            encoded = p.wire.one_way(payload, noisy)
            sent = decoded(encoded)
        push = Push(model=p.fingerprint, push_id=self.next_id, values=encoded, weight=share,
                    masked=masked, noisy=noisy, noise_age=0 if masked else est.noise_age,
                    want_reply=want_reply, base=base, base_by_sender=base_by_sender)
        self.next_id += 1
        if p.checks is not None and not want_reply:
            # a holder we chose ourselves: a partner from a one-way push on, acked
            # or not.  A one-way push beyond the peer's radius is refused with no
            # ack, and while no peer acks, no radius leaves the warm-up one: from
            # independent starts every push was refused, for good.  (A push-pull
            # request beyond it is clipped and answered: the ack makes the partner)
            p.checks.guard.clip.note_partner(peer)
        p.flight.pushes[push.push_id] = Outstanding(peer, push, sent, masked, now, 1,
                                                    weight_at_push=est.w)
        c["pushes_sent"] += 1
        p.own_pushes += 1
        c["bytes_sent"] += push.nbytes
        return peer, push

    def receive_ack(self, sender: bytes, ack: PushAck, now: float) -> None:
        """Apply an ack (see :meth:`PushSum.on_ack`); RejectedAck, or RejectedReply after
        the ack was applied."""
        p = self.p
        c = p.counters
        try:
            if not isinstance(ack, PushAck):
                raise RejectedAck(f"expected a PushAck, got {type(ack).__name__}")
            if ack.model != p.fingerprint:
                raise RejectedAck(
                    f"ack model fingerprint {bytes(ack.model)[:8].hex()}... does not match "
                    f"{p.fingerprint[:8].hex()}..."
                )
            o = p.flight.awaiting(sender, ack)
        except RejectedAck as exc:
            c["rejected"] += 1
            p.offences.warning(now, offender(sender), "rejected ack from %s for model %s: %s",
                               short(sender) if isinstance(sender, bytes) else sender,
                               short(p.fingerprint), exc.reason)
            raise
        bad: str | None = None
        reply: tuple[float, np.ndarray] | None = None
        if ack.reply is not None or ack.reply_weight != 0.0:
            try:
                reply = self._check_reply(o, ack)
            except InvalidValues as exc:
                bad = str(exc)
        checks = p.checks
        if checks is not None:
            # a holder we chose ourselves: its update norms may set the clip radius
            checks.guard.clip.note_partner(o.peer)
        p.flight.acked(ack.push_id)
        if checks is not None and checks.unreciprocated(o, reply is not None, p.privacy, now):
            # a sink: the share stays here (see MergeChecks.unreciprocated), nothing changes
            c["acks"] += 1
            if bad is not None:
                c["rejected"] += 1
                c["bad_replies"] += 1
            p.offences.warning(
                now, offender(sender),
                "%s answered push-pull request %d for model %s without a reply: share kept, "
                "no pushes to it for %gs", short(sender), ack.push_id, short(p.fingerprint),
                checks.guard.settings.sink_pause)
            return
        if reply is None:
            p.est.give(o.sent, o.push.weight, o.masked)
        else:
            self._take_reply(o, ack, *reply)
        c["acks"] += 1
        if checks is not None:
            checks.acked(o, None if reply is None else reply[0], now)
        if bad is not None:
            c["rejected"] += 1
            c["bad_replies"] += 1
            p.offences.warning(now, offender(sender),
                               "dropped the reply from %s for model %s (its ack was applied): %s",
                               short(sender), short(p.fingerprint), bad)
            raise RejectedReply(f"reply to push {ack.push_id} dropped: {bad}")

    def _take_reply(self, o: Outstanding, ack: PushAck, r: float, d: np.ndarray) -> None:
        """Merge a checked reply (weight ``r``, decoded delta ``d = q_B - q_A``, ours)."""
        p = self.p
        est = p.est
        disagreement = p.wire.disagreement = rms(d)
        self.last_gap = disagreement / max(rms(o.sent), 1e-12)
        p.references.record(ReferenceKey(o.peer, ack.push_id, True),
                            reference_of(o.sent, d, out=est.buffer()))
        checks = p.checks
        if checks is not None:
            size = disagreement * math.sqrt(est.n)
            echo = size < ECHO_SHARE * checks.guard.clip.own_step()
            checks.clip_reply(o, d, r, est.x, est.w, est.noisy, est.buffer(),
                              float(p.own_pushes))
            self.last_reply = ("far" if checks.reply_in_radius < 0.5
                               else "clipped" if checks.reply_kept < 0.5
                               else "echo" if echo else "useful")
        est.swap(o.sent, d, o.push.weight, r)
        p.counters["replies_received"] += 1
        p.counters["bytes_received"] += ack.nbytes

    def check_reply(self, o: Outstanding, ack: PushAck) -> tuple[float, np.ndarray]:
        """The reply's weight and decoded delta (``q_B - q_A``), or InvalidValues naming what
        is wrong."""
        if not o.push.want_reply:
            raise InvalidValues("a reply to a push that asked for none")
        if ack.reply is None:
            raise InvalidValues(f"reply_weight {ack.reply_weight!r} without reply values")
        r = ack.reply_weight
        if isinstance(r, bool) or not isinstance(r, numbers.Real) or not math.isfinite(r):
            raise InvalidValues(f"reply_weight: expected a finite float, got {r!r}")
        r = float(r)
        # An honest responder gives back at most the share it took (see
        # Incoming.reply_weight), so a reply can never raise our weight nor the
        # total weight.
        if not 0.0 < r <= o.push.weight:
            raise InvalidValues(
                f"reply_weight {r:g} outside (0, {o.push.weight:g}]: more than the share "
                "we sent"
            )
        d = decode_values(ack.reply, self.p.est.n, "reply")
        # the reply's values q_B = q_A + d, bounded (an overflow shows as infinity)
        check_magnitude(np.add(o.sent, d, out=self.p.est.buffer()), "reply values")
        return r, d
