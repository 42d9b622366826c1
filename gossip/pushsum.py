"""Sans-IO push-sum core for one shared partial model (docs/design/gossip.md).

:class:`PushSum` takes pushes, acks, time and a seeded RNG and returns what to
send.  Its parts: the state and its arithmetic (:mod:`gossip.estimate`: values
``z``, estimate ``x``, weight ``w``, held mask noise), the pushes awaiting acks
(:mod:`gossip.in_flight`), the encodings (:mod:`gossip.wire_format`), the
references delta requests are sent against (:mod:`gossip.references`), the
replies kept for retransmitted requests (:mod:`gossip.reply_store`), the push
ids merged per sender (:mod:`gossip.dup_window`) and, with ``guard=``, the
merge defences (:mod:`gossip.merge_checks`, :mod:`gossip.merge_guard`).
Over the holders of a model, sum(w) and sum(w * x) are unchanged by
exchanges, whatever the encoding, losses and retransmissions: both ends use
exactly the decoded values, a share leaves only when its ack arrives, and a
push is forgotten only when surely not merged.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TypedDict, Unpack

import numpy as np

from gossip.compression import ENCODINGS
from gossip.core_parts import CoreParts
from gossip.counters import PushSumCounters
from gossip.dup_window import DUP_SPAN
from gossip.errors import InvalidValues, RejectedPush
from gossip.estimate import Estimate
from gossip.in_flight import InFlight, Outstanding, UndeliveredOutcome
from gossip.incoming import Incoming
from gossip.log_limit import LogLimiter
from gossip.masking.noise import MaskSource, mask_source_from
from gossip.merge_checks import MergeChecks
from gossip.merge_guard import GuardSettings, MergeGuard
from gossip.messages import FINGERPRINT_BYTES, Push, PushAck
from gossip.outgoing import Outgoing
from gossip.references import REFERENCE_STORE_BYTES, PairReferences, ReferenceKey
from gossip.reply_store import REPLY_STORE_BYTES
from gossip.validation import MAX_ABS_VALUE, check_vector, check_weight
from gossip.wire_format import REQUEST_ERROR_SHARE, WireFormat, rms

log = logging.getLogger(__name__)

__all__ = ["EXCHANGES", "PRIVACY_MODES", "REPLY_STORE_BYTES", "REQUEST_ERROR_SHARE", "PushSum",
           "PushSumOptions", "PushSumSnapshot", "PushSumTuning", "RejectedPush",
           "UndeliveredOutcome"]

PRIVACY_MODES = ("none", "masked")
EXCHANGES = ("push-pull", "push")


class PushSumTuning(TypedDict, total=False):
    """Keyword options of :class:`PushSum` that tune its behaviour (all optional)."""

    fanout: int
    max_weight: float
    masked_pushes: int
    mask_std: float
    unmask_after: int
    max_attempts: int
    give_up_after: int
    mask_source: MaskSource | None
    exchange: str
    encoding: str
    delta_encoding: str
    max_in_flight: int
    reply_store_bytes: int
    reference_store_bytes: int
    guard: GuardSettings | None
    dup_span: int
    max_abs_value: float


class PushSumOptions(PushSumTuning, total=False):
    """Every keyword option of :class:`PushSum` but ``weight`` (see :meth:`PushSum.from_snapshot`)."""

    privacy: str
    rng: np.random.Generator | None


@dataclass(frozen=True, eq=False)
class PushSumSnapshot:
    """Plain checkpoint data of one push-sum core (restoring re-enters the masked phase)."""

    fingerprint: bytes
    values: np.ndarray  # trained values z, float64
    estimate: np.ndarray  # push-sum estimate x, float64
    weight: float
    noisy: bool
    noise_age: int
    # merged push ids per sender (DupWindow.export); empty in checkpoints from before it
    seen: tuple[tuple[bytes, int, int, int], ...] = ()


def _check_options(fanout: int, max_weight: float, masked_pushes: int, unmask_after: int,
                   max_attempts: int, give_up_after: int, mask_std: float, exchange: str,
                   encodings: dict[str, str], max_in_flight: int, sizes: dict[str, int],
                   guard: GuardSettings | None, dup_span: int, max_abs_value: float) -> None:
    """Raise InvalidValues naming the first of :class:`PushSum`'s options that is wrong."""
    if not _is_int(fanout) or fanout < 1:
        raise InvalidValues(f"fanout: expected an int >= 1, got {fanout!r}")
    if not (max_weight > 0 and np.isfinite(max_weight)):
        raise InvalidValues(f"max_weight: expected a positive finite float, got {max_weight}")
    if masked_pushes < 0 or unmask_after < 0 or not 1 <= max_attempts <= give_up_after:
        raise InvalidValues(
            "masked_pushes and unmask_after must be >= 0 and 1 <= max_attempts <= "
            f"give_up_after, got {masked_pushes}, {unmask_after}, {max_attempts}, "
            f"{give_up_after}"
        )
    if not (mask_std > 0 and np.isfinite(mask_std)):
        raise InvalidValues(f"mask_std: expected a positive finite float, got {mask_std}")
    if exchange not in EXCHANGES:
        raise InvalidValues(f"exchange: expected one of {EXCHANGES}, got {exchange!r}")
    for name, enc in encodings.items():
        if enc not in ENCODINGS:
            raise InvalidValues(f"{name}: expected one of {ENCODINGS}, got {enc!r}")
    if not _is_int(max_in_flight) or max_in_flight < 1:
        raise InvalidValues(f"max_in_flight: expected an int >= 1, got {max_in_flight!r}")
    for name, size in sizes.items():
        if not _is_int(size) or size < 0:
            raise InvalidValues(f"{name}: expected an int >= 0, got {size!r}")
    if guard is not None and not isinstance(guard, GuardSettings):
        raise InvalidValues(f"guard: expected GuardSettings or None, got {guard!r}")
    if not _is_int(dup_span) or dup_span < 1:
        raise InvalidValues(f"dup_span: expected an int >= 1, got {dup_span!r}")
    if not 0 < max_abs_value <= MAX_ABS_VALUE:
        raise InvalidValues(f"max_abs_value: expected a float in (0, {MAX_ABS_VALUE:g}], "
                            f"got {max_abs_value!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class PushSum:
    """Push-sum averaging of one partial model among the nodes that hold it."""

    def __init__(
        self,
        fingerprint: bytes,
        values: np.ndarray,
        *,
        weight: float = 1.0,
        fanout: int = 1,
        max_weight: float = 1e6,
        privacy: str = "none",
        masked_pushes: int = 3,
        mask_std: float = 10.0,
        unmask_after: int = 40,
        max_attempts: int = 5,
        give_up_after: int = 30,
        rng: np.random.Generator | None = None,
        mask_source: MaskSource | None = None,
        exchange: str = "push-pull",
        encoding: str = "f32",
        delta_encoding: str = "int8",
        max_in_flight: int = 1,
        reply_store_bytes: int = REPLY_STORE_BYTES,
        reference_store_bytes: int = REFERENCE_STORE_BYTES,
        guard: GuardSettings | None = None,
        dup_span: int = DUP_SPAN,
        max_abs_value: float = MAX_ABS_VALUE,
    ) -> None:
        """Create the core (docs/design/gossip.md says what each option does).

        ``privacy="masked"`` masks the first ``masked_pushes`` pushes (and the
        first ones after ``restore``) with N(0, mask_std^2) noise, one-way;
        ``encoding``/``delta_encoding``: the wire formats of absolute values and
        of deltas (:mod:`gossip.wire_format`); ``guard``: the merge defences
        (:mod:`gossip.merge_guard`; None: off); ``max_abs_value``: the bound on
        received values.  ``rng`` only seeds push ids and, without a
        ``mask_source``, the mask key (None in production: os.urandom).
        """
        if not isinstance(fingerprint, bytes) or len(fingerprint) != FINGERPRINT_BYTES:
            raise InvalidValues(f"fingerprint: expected {FINGERPRINT_BYTES} bytes")
        if privacy not in PRIVACY_MODES:
            raise InvalidValues(f"privacy: expected one of {PRIVACY_MODES}, got {privacy!r}")
        _check_options(fanout, max_weight, masked_pushes, unmask_after, max_attempts,
                       give_up_after, mask_std, exchange,
                       {"encoding": encoding, "delta_encoding": delta_encoding}, max_in_flight,
                       {"reply_store_bytes": reply_store_bytes,
                        "reference_store_bytes": reference_store_bytes},
                       guard, dup_span, max_abs_value)
        self.fingerprint = fingerprint
        z = check_vector(values, None, "values")
        self._n = int(z.shape[0])
        self._est = Estimate(z, check_weight(weight, max_weight, "weight"))
        # the settings, read-only once the core is built
        self.fanout, self.exchange, self.privacy = fanout, exchange, privacy
        self.encoding, self.delta_encoding = encoding, delta_encoding
        self.max_weight, self.max_abs_value = float(max_weight), float(max_abs_value)
        self.masked_pushes, self.mask_std = int(masked_pushes), float(mask_std)
        self.unmask_after, self.max_in_flight = int(unmask_after), int(max_in_flight)
        self.max_attempts, self.give_up_after = int(max_attempts), int(give_up_after)
        # Masking epochs (set by the node's masking glue; None: off): a merge between a
        # noisy and a folded side with noise at least this old folds at once.  Such old
        # noise has mixed; the estimate it leaves carries values it no longer hides
        # (merged from a folded holder, or the receiver's own after its fold), while
        # the push would still be flagged noisy.
        self.boundary_fold_age: int | None = None
        masks = mask_source if mask_source is not None else mask_source_from(rng)
        # push ids start at 1 or more: ``Push.base == 0`` means "no reference"
        first_id = int(rng.integers(1, 2**62)) if rng is not None else secrets.randbits(62) | 1
        self._c = {f.name: 0 for f in fields(PushSumCounters)}
        self._guard = MergeGuard(guard, self._n, rng) if guard is not None else None
        self._parts = parts = CoreParts(
            fingerprint, self._est, WireFormat(encoding, delta_encoding, self._c),
            PairReferences(reference_store_bytes),
            InFlight(fingerprint, self.max_attempts, self.give_up_after),
            MergeChecks(self._guard, exchange, self._c) if self._guard is not None else None,
            self._c, LogLimiter(log), privacy, exchange, fanout)
        # the rules a subclass may refine (see "rules" below), looked up at each call
        self._in = Incoming(parts, max_weight=self.max_weight,
                            max_abs_value=self.max_abs_value, dup_span=dup_span,
                            reply_store_bytes=reply_store_bytes,
                            reply=lambda *a: self._reply(*a),
                            clip=lambda *a: self._clip_factor(*a),
                            rebuild=lambda *a: self._rebuild_request(*a))
        self._out = Outgoing(parts, masks=masks, masked_pushes=self.masked_pushes
                             if privacy == "masked" else 0, mask_std=self.mask_std,
                             first_id=first_id, max_in_flight=self.max_in_flight,
                             max_share=None if guard is None else guard.max_share,
                             check_reply=lambda *a: self._check_reply(*a))
        self._outstanding = parts.flight.pushes  # push id -> Outstanding
        self._seen = self._in.seen  # push ids merged per sender (checkpointed)
        self._replies = self._in.replies
        self._offences = parts.offences
        self._round_drift: float | None = None

    # ------------------------------------------------------------------ views
    @property
    def values(self) -> np.ndarray:
        """The de-biased trained values z (a float64 copy)."""
        return self._est.z.copy()

    @property
    def estimate(self) -> np.ndarray:
        """The push-sum estimate x (equals ``values`` unless mask noise is held apart)."""
        return self._est.x.copy()

    def estimate_view(self) -> np.ndarray:
        """The push-sum estimate x without a copy: a read-only view of the core's array.

        Valid until the next call that changes the state (a merge, an ack,
        :meth:`set_values`): the core updates its array in place, so an
        observer sees the new values or, after a reassignment, keeps the old
        ones.  :attr:`estimate` copies instead (8 MB per million values).
        """
        view = self._est.x.view()
        view.flags.writeable = False
        return view

    @property
    def weight(self) -> float:
        """The push-sum weight w."""
        return self._est.w

    @property
    def mass(self) -> np.ndarray:
        """w * x: the quantity whose sum over holders exchanges conserve."""
        return self._est.w * self._est.x

    @property
    def length(self) -> int:
        """Length of the model's vector."""
        return self._n

    @property
    def in_masked_phase(self) -> bool:
        """True while the next push will be masked."""
        return self._out.masked_left > 0

    @property
    def noisy(self) -> bool:
        """True while mask noise is held apart from the trained values."""
        return self._est.noisy

    @property
    def noise_age(self) -> int:
        """Merges received since the youngest noise held apart arrived (meaningful while noisy)."""
        return self._est.noise_age

    @property
    def next_push_id(self) -> int:
        """The id the next new push will carry (pushes made before have smaller ids)."""
        return self._out.next_id

    def push_fraction(self, push_id: int) -> float | None:
        """The fraction of this node's mass that push ``push_id`` takes once acknowledged
        (:meth:`gossip.in_flight.InFlight.fraction`)."""
        return self._parts.flight.fraction(push_id)

    @property
    def outstanding(self) -> int:
        """Number of pushes waiting for an acknowledgement (including unresolved ones)."""
        return len(self._outstanding)

    @property
    def in_flight(self) -> int:
        """Pushes awaiting an ack that still block new ones (``max_in_flight`` of them at most)."""
        return len(self._parts.flight.blocking())

    @property
    def holders_wanted(self) -> int:
        """How many candidate holders a driver offers :meth:`make_pushes` per round:
        ``fanout``, plus two spares under the guard (a peer it pauses, a sink, must not
        cost the round)."""
        return self.fanout + (2 if self._guard is not None else 0)

    @property
    def reserved_weight(self) -> float:
        """Weight of unresolved pushes (maybe merged, ack lost): kept out of new shares."""
        return self._parts.flight.reserved()

    @property
    def available_weight(self) -> float:
        """The weight not promised to pushes awaiting acks: what new shares are cut from."""
        return self._parts.available_weight

    @property
    def last_gap(self) -> float | None:
        """After the last merged push-pull reply: RMS(q_B - q_A) / RMS(q_A) (None before
        any): how far apart the two ends of the exchange were, near 0 once they agree."""
        return self._out.last_gap

    @property
    def round_drift(self) -> float | None:
        """After the last :meth:`set_values`: RMS(z_new - z_old) / RMS(z_old) (None before):
        how far local training moved the model since the previous update."""
        return self._round_drift

    @property
    def reference_bytes(self) -> int:
        """Bytes held by the references kept for delta requests."""
        return self._parts.references.nbytes

    def held_reference(self, peer: bytes, push_id: int, started_here: bool) -> np.ndarray | None:
        """A copy of the reference held with ``peer`` from exchange ``push_id`` (None if not
        held); ``started_here``: this node started that exchange.  Both ends of a completed
        exchange hold bit-identical references."""
        ref = self._parts.references.get(ReferenceKey(peer, push_id, started_here))
        return None if ref is None else ref.copy()

    @property
    def counters(self) -> PushSumCounters:
        """A frozen snapshot of the counters."""
        return PushSumCounters(**self._c)

    # ------------------------------------------------------------ local side
    def set_values(self, z: np.ndarray) -> None:
        """Replace the trained values after local SGD steps (between exchanges)."""
        est = self._est
        new = check_vector(z, self._n, "set_values")  # a copy: ours
        step = np.subtract(new, est.z, out=est.buffer())
        self._round_drift = rms(step) / max(rms(est.z), 1e-12)
        if self._guard is not None:
            # merges may take back our own training without spending the creep budget
            self._guard.note_training(step, new, float(self._parts.own_pushes))
        est.train(new, step)

    def roll_back(self, values: np.ndarray) -> None:
        """Set the trained values back to ``values`` (this node's own-trained model before
        merges it judged bad, :mod:`gossip.recovery`): not training, the weight stays,
        and the creep budget counts the way back as any merge's movement."""
        est = self._est
        new = check_vector(values, self._n, "roll_back")
        if self._guard is not None:
            sketched = self._guard.drift_sketch(new - est.z)
            if sketched is not None:
                self._guard.add_drift(sketched, float(self._parts.own_pushes))
        est.reset(new)
        self._c["rolled_back"] += 1

    def take_moved(self) -> dict[bytes, float]:
        """How far each peer's merges (pushes, requests, replies) moved the estimate since
        the last call: whom a roll-back blames (empty without the guard)."""
        return {} if self._parts.checks is None else self._parts.checks.take_moved()

    @property
    def last_reply(self) -> str | None:
        """What the latest merged reply was worth (:data:`gossip.outgoing.REPLY_VERDICTS`;
        None without the guard): partner choice proves only useful ones."""
        return self._out.last_reply

    def add_noise_mass(self, mass: np.ndarray, *, fresh: bool = True) -> None:
        """Add ``mass`` to the held-apart noise (a masking pair's side, or its removal).

        Privacy "masked" only (:mod:`gossip.masking.epochs`).  The trained values
        stay untouched; the estimate moves by ``mass / w``.  ``fresh`` (a new
        pair) restarts the noise's age, so the fold waits for it to mix; a
        removal passes False.
        """
        if self.privacy != "masked":
            raise InvalidValues("add_noise_mass: only a core with privacy 'masked' holds noise")
        self._est.add_noise(check_vector(mass, self._n, "noise mass"), fresh)

    def make_pushes(self, peers: Sequence[bytes], now: float) -> list[tuple[bytes, Push]]:
        """One round: pushes to the first ``fanout`` of ``peers``, each with share a/(fanout+1).

        ``a`` is :attr:`available_weight`.  Returns nothing while
        ``max_in_flight`` pushes await acks; peers that already await one of
        our pushes are skipped.
        """
        targets = self._out.targets(peers, now)
        if not targets:
            return []
        # Noise ages with merges received (see Estimate.merge), not with pushes made:
        # a one-way push leaves the sender's estimate as it was, so a node that
        # pushes but hears from nobody has mixed nothing into its own noise.
        self._maybe_unmask()
        # unacknowledged shares may still be taken: they must stay available
        share = self._out.share()
        return [self._out.push(peer, share, now) for peer in targets]

    def expire(self, now: float, timeout: float) -> list[tuple[bytes, Push]]:
        """Handle pushes unacknowledged for ``timeout``: the retransmissions to send (same
        push id, same payload).  After ``max_attempts`` sends a push is *unresolved* (it no
        longer blocks new ones, its share stays reserved); after ``give_up_after`` it is
        given up with the weight kept."""
        resend, count, given_up = self._parts.flight.expire(now, timeout)
        self._c["retransmissions"] += count
        self._c["bytes_sent"] += sum(push.nbytes for _, push in resend)
        self._c["failures"] += given_up
        return resend

    def on_undelivered(self, push_id: int, maybe_delivered: bool) -> UndeliveredOutcome:
        """The transport reports that a send of ``push_id`` got no acknowledgement.

        ``maybe_delivered``: it may have been merged with only the ack lost.  A
        first attempt that surely did not arrive is forgotten with the weight
        kept; anything else stays outstanding for :meth:`expire` (forgetting a
        merged push would duplicate its mass; docs/design/gossip.md, "Delivery").
        """
        outcome, o = self._parts.flight.undelivered(push_id, maybe_delivered)
        if outcome is UndeliveredOutcome.FORGOTTEN and o is not None:
            self._c["failures"] += 1
            if o.push.base:
                # the peer may have refused it for want of the reference (restart,
                # eviction): our next request to it carries absolute values
                self._parts.references.forget(o.peer)
        return outcome

    def on_failure(self, push_id: int) -> bool:
        """Shorthand for ``on_undelivered(push_id, maybe_delivered=False)``: True if the
        push was forgotten (the weight kept; a retransmitted one stays outstanding)."""
        outcome = self.on_undelivered(push_id, maybe_delivered=False)
        return outcome is UndeliveredOutcome.FORGOTTEN

    # ---------------------------------------------------------- remote side
    def on_push(self, sender: bytes, push: Push, now: float) -> PushAck:
        """Validate and merge a push; return the acknowledgement to send back
        (:meth:`gossip.incoming.Incoming.receive`).

        A push-pull request gets a share of this node's mass in the ack (privacy
        "none", no mask noise on either side).  RejectedPush: nothing changed (a
        retransmission whose stored reply is gone, a delta naming a reference
        not held, and every failed check included).
        """
        ack, boundary = self._in.receive(sender, push, now)
        if boundary and self.boundary_fold_age is not None \
                and self._est.noise_age >= self.boundary_fold_age:
            # the swarm is folding (see boundary_fold_age): fold now rather than push
            # estimates whose old noise no longer hides the values they carry
            self._maybe_unmask(force=True)
        return ack

    def on_ack(self, sender: bytes, ack: PushAck, now: float) -> None:
        """The receiver merged our push: remove the share it took, merge its reply if any.

        RejectedAck (nothing changed): a wrong, duplicate or unexpected ack.
        :class:`~gossip.errors.RejectedReply`: the ack was applied (the
        responder merged our share), its bad reply dropped, as a plain ack.
        """
        self._out.receive_ack(sender, ack, now)

    # ------------------------------------------------------------ checkpoints
    def snapshot(self) -> PushSumSnapshot:
        """Plain data to checkpoint this core."""
        est = self._est
        # the training held out of the estimate is kept (pushes after a restore carry it)
        return PushSumSnapshot(fingerprint=self.fingerprint, values=est.z.copy(),
                               estimate=est.pushed_estimate(), weight=est.w, noisy=est.noisy,
                               noise_age=est.noise_age, seen=tuple(self._seen.export()))

    def restore(self, snapshot: PushSumSnapshot) -> None:
        """Load a checkpoint; outstanding pushes are dropped and the masked phase restarts."""
        if snapshot.fingerprint != self.fingerprint:
            raise InvalidValues("snapshot.fingerprint does not match this model")
        z = check_vector(snapshot.values, self._n, "snapshot.values")
        x = check_vector(snapshot.estimate, self._n, "snapshot.estimate")
        w = check_weight(snapshot.weight, self.max_weight, "snapshot.weight")
        noisy = bool(snapshot.noisy)
        if not noisy and not np.array_equal(z, x):
            raise InvalidValues("snapshot: estimate must equal values when noisy is False")
        est = self._est
        est.z, est.x, est.w = z, x if noisy else z, w
        est.noisy, est.noise_age = noisy, int(snapshot.noise_age)
        est.held_steps = None
        if snapshot.seen:
            try:
                self._seen.load(list(snapshot.seen))
            except ValueError as exc:
                raise InvalidValues(f"snapshot.seen: {exc}") from None
        self._outstanding.clear()
        self._parts.references.clear()  # not checkpointed, as after a restart
        self._out.masked_left = self.masked_pushes if self.privacy == "masked" else 0

    @classmethod
    def from_snapshot(cls, snapshot: PushSumSnapshot, **kwargs: Unpack[PushSumOptions]) -> PushSum:
        """A new core initialised from ``snapshot`` (keyword arguments as the constructor)."""
        core = cls(snapshot.fingerprint, snapshot.values, weight=snapshot.weight, **kwargs)
        core.restore(snapshot)
        return core

    # ---------------------------------------------------------------- rules
    # The steps a subclass may refine (p2p's CheckedPushSum) or a lab bench watch.

    def _clip_factor(self, sender: bytes, y: np.ndarray, s: float, r: float,
                     flagged: bool) -> float:
        """The reply's scale of ``x - q_A`` (1.0: not clipped), or RefusedByGuard
        (:meth:`gossip.merge_checks.MergeChecks.clip_factor`)."""
        checks = self._parts.checks
        if checks is None:
            return 1.0
        est = self._est
        return checks.clip_factor(sender, y, est.x, s, r, est.w, flagged, est.noisy,
                                  est.buffer(), float(self._parts.own_pushes))

    def _rebuild_request(self, sender: bytes, push: Push, delta: np.ndarray,
                         now: float) -> np.ndarray:
        """A delta request's values (:meth:`Incoming.rebuild_request`)."""
        return self._in.rebuild_request(sender, push, delta, now)

    def _reply(self, sender: bytes, q_a: np.ndarray, push: Push, r: float,
               clip: float = 1.0) -> PushAck:
        """Merge a push-pull request, giving ``r`` of our mass back (:meth:`Incoming.answer`)."""
        return self._in.answer(sender, q_a, push, r, clip)

    def _check_reply(self, o: Outstanding, ack: PushAck) -> tuple[float, np.ndarray]:
        """A reply's weight and decoded delta, or InvalidValues (:meth:`Outgoing.check_reply`)."""
        return self._out.check_reply(o, ack)

    def fold_noise(self) -> bool:
        """Fold the held noise into the trained values now, whatever its age.

        For a bounded epoch (:mod:`gossip.masking.epochs`: a peer that keeps
        claiming young noise must not hold the fold back for good).  Returns
        False when no noise is held or a masked push's compensation is pending.
        """
        if not self._est.noisy:
            return False
        self._maybe_unmask(force=True)
        return not self._est.noisy

    def _maybe_unmask(self, force: bool = False) -> None:
        est = self._est
        if not est.noisy or (est.noise_age < self.unmask_after and not force):
            return
        if self._parts.flight.any_masked():
            return  # its compensation must land before the noise is folded in
        jump = est.fold()
        if self._guard is not None:
            # the first clear pushes after the swarm's folds move by an epoch of
            # training: the clip radius follows for a few merges (ClipRadius.note_fold)
            self._guard.clip.note_fold(jump)
        self._c["unmasks"] += 1
