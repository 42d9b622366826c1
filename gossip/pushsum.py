"""Sans-IO push-sum core for one shared partial model.

State: the trained values ``z`` (what the trainer sees), the push-sum estimate
``x`` and the float64 weight ``w``.  The node's push-sum *mass* is ``w * x``;
over the holders of a model, sum(w) and sum(w * x) are unchanged by exchanges.
Without masking ``x == z`` at all times.

With masking (see docs/gossip.md) ``x = z + D / w - T``: ``D`` is mask noise
plus averaging deviation held apart from the trained values until the noise has
had ``unmask_after`` merges to cancel, then folded in (``z <- x + T``); ``T``,
the training steps made meanwhile, stays out of the pushed estimate until then.

Wire precision: a push carries ``encode(x, encoding)`` (float32 by default) and
both ends use exactly the decoded vector ``q``: the receiver merges ``share *
q``, the sender removes ``share * q`` on the ack.  The rounding residual
``x - q`` therefore stays in the sender's own estimate (error feedback) and the
sums of mass and weight are conserved exactly whatever the encoding.

Exchange: ``"push-pull"`` (the default, privacy "none" only) asks the receiver
for a share of its own mass in the ack.  The initiator A sends share
``s = a_A / (fanout + 1)`` of values ``q_A`` (``a``: weight not promised to
pushes in flight); the responder B merges ``s * q_A`` and gives away
``r = min(s, a_B / (fanout + 1))`` of values
``q_B = q_A + decode(encode(x_B - q_A, delta_encoding))``; A, on the ack,
removes ``s * q_A`` and adds ``r * q_B``.  With equal weights both ends land on
the pairwise average in one round trip; the reply is a delta against what A
sent, small once the two are close, so a coarse ``delta_encoding`` (int8) costs
little precision.  ``"push"`` is the one-way exchange.

References (:mod:`gossip.references`): once an exchange completes, both ends
hold the same reference derived from ``q_A`` and ``q_B``; the next request
between the two (either way) is sent as ``encode(x_A - ref, delta_encoding)``
with ``Push.base`` naming the reference, and ``q_A = ref + decode(delta)`` at
both ends.  Only the first request to a peer (or one after the peer lost the
reference) carries absolute values in ``encoding``.  A receiver that does not
hold the named reference refuses the request; the sender forgets it (surely
not merged: the weight stays) and drops the peer's references, so the next
request is absolute.

Delivery: a push leaves the sender's weight untouched; the share is removed
only when the acknowledgement arrives.  An unacknowledged push is retransmitted
(same ``push_id``; receivers recognise duplicates and re-acknowledge without
merging, with the same stored reply for a push-pull request) up to
``max_attempts`` times, then given up with the weight kept.  Up to
``max_in_flight`` pushes may await acks at once (to distinct peers); the share
of a new push comes from the weight not already promised to pushes in flight.

Undelivered pushes (:meth:`PushSum.on_undelivered`): a first attempt that
surely did not reach the peer is forgotten with the weight kept; one that may
have been delivered stays outstanding and :meth:`PushSum.expire` retransmits
it; a push that was retransmitted is never forgotten on a failure report,
since an earlier attempt may have been merged with only its ack lost.  The
daemon's driver and the simulator both apply this one rule.

Duplicates: the push ids merged per sender are a sliding window
(:mod:`gossip.dup_window`, exported in :class:`PushSumSnapshot`).  Merge
defences against a lying holder (``guard=``, :mod:`gossip.merge_guard`):
bounded weight shares and net balances per peer, masked flags honoured only by a masking
node, and updates clipped with the clipped part handed back in the push-pull
reply, so mass stays exact (see :meth:`PushSum._clip_factor`).
"""

from __future__ import annotations

import logging
import math
import numbers
import secrets
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, fields
from enum import Enum
from typing import TypedDict, Unpack

import numpy as np

from gossip.compression import ENCODINGS, EncodedVector, decode, encode
from gossip.counters import PushSumCounters
from gossip.dup_window import DUP_SPAN, DupWindow, Seen
from gossip.errors import InvalidValues, RejectedAck, RejectedPush, RejectedReply
from gossip.log_limit import LogLimiter
from gossip.masking.noise import MaskSource, mask_source_from
from gossip.merge_guard import GuardSettings, MergeGuard, RefusedByGuard
from gossip.messages import FINGERPRINT_BYTES, Push, PushAck
from gossip.references import (
    REFERENCE_STORE_BYTES,
    PairReferences,
    ReferenceKey,
    rebuild,
    reference_of,
)
from gossip.validation import (
    MAX_ABS_VALUE,
    check_magnitude,
    check_vector,
    check_weight,
    decode_values,
    validate_push,
)

log = logging.getLogger(__name__)

PRIVACY_MODES = ("none", "masked")
EXCHANGES = ("push-pull", "push")
_RECENT_ACKS = 256
#: Stored push-pull replies (for retransmitted requests): at most this many ...
_STORED_REPLIES = 256
#: ... and at most this many bytes by default (``reply_store_bytes``).
REPLY_STORE_BYTES = 64 * 2**20
# Masked and noisy pushes carry mask-sized values: coarse encodings would add
# rounding of order mask_std / 254 (int8) to the held-apart deviation at every
# push.  It stays conserved but must mix out before the noise can be folded in,
# so such pushes travel with at least float32 precision.
_NOISE_ENCODING = {"f64": "f64", "f32": "f32", "f16": "f32", "bf16": "f32", "int8": "f32"}
# When values exceed what an encoding can hold (f16 beyond 65504), fall back.
_WIDER = {"f16": "f32", "bf16": "f32", "int8": "f32", "f32": "f64"}
# A push-pull request whose rounding would be too coarse (see _encode_request) goes wider.
_WIDER_REQUEST = {"int8": "f16", "bf16": "f32", "f16": "f32"}
#: A push-pull request's rounding error (RMS) stays below this share of the
#: latest measured disagreement between exchange partners (RMS(q_B - q_A)).
REQUEST_ERROR_SHARE = 0.25


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


class UndeliveredOutcome(Enum):
    """What :meth:`PushSum.on_undelivered` did with a push reported undelivered."""

    FORGOTTEN = "forgotten"  # surely not merged: dropped, the weight stays here
    OUTSTANDING = "outstanding"  # maybe merged: kept, expire() retransmits it (same id)
    UNKNOWN = "unknown"  # not an outstanding push of this core: nothing changed


class _MissingReference(RejectedPush):
    """A delta request names a reference this core does not hold (refused, not an offence)."""


@dataclass
class _Outstanding:
    peer: bytes
    push: Push
    sent: np.ndarray  # the decoded payload q (mask included): exactly what the peer merges
    masked: bool
    last_sent: float
    attempts: int
    unresolved: bool = False  # past max_attempts: no longer blocks new pushes
    weight_at_push: float = 1.0  # the sender's weight when the push was made


def _short(b: bytes) -> str:
    return bytes(b)[:4].hex()


def _offender(sender: object) -> str:
    """Whom a rate-limited line is counted against: the whole id, not its short form."""
    return bytes(sender).hex() if isinstance(sender, bytes | bytearray) else str(sender)


def _rms(v: np.ndarray) -> float:
    # einsum's own loop, single-threaded: np.dot hands a large vector to
    # OpenBLAS threads, which are 10x slower when processes share the cores.
    return math.sqrt(float(np.einsum("i,i->", v, v)) / v.size) if v.size else 0.0


def _encode_fitting(values: np.ndarray, encoding: str) -> EncodedVector:
    """``encode(values, encoding)``, widening the format if the values do not fit it."""
    while True:
        try:
            return encode(values, encoding)
        except InvalidValues:
            wider = _WIDER.get(encoding)
            if wider is None:
                raise
            log.debug("values do not fit %s; sending them as %s", encoding, wider)
            encoding = wider


def _decoded(v: EncodedVector) -> np.ndarray:
    # f64 decodes to itself: a read-only view of the payload avoids a copy
    if v.encoding == "f64":
        return np.asarray(v.data, dtype=np.float64)
    return decode(v, v.length)


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
        """Create the core.

        ``privacy="masked"`` obfuscates the first ``masked_pushes`` pushes (and
        the first ones after ``restore``) with N(0, mask_std^2) masks; it always
        uses one-way pushes.  ``exchange`` is ``"push-pull"`` or ``"push"``;
        ``encoding`` names the wire format of absolute values (one-way pushes,
        a first request to a peer) and ``delta_encoding`` that of deltas
        (requests against a pair's reference, push-pull replies), see
        :mod:`gossip.compression`; ``max_in_flight`` pushes may await acks
        before new ones wait; ``reply_store_bytes`` bounds the replies kept for
        retransmitted requests and ``reference_store_bytes`` the references
        kept for delta requests (0: every request absolute).  ``guard`` turns
        on the merge defences (:mod:`gossip.merge_guard`; None: off) and
        ``dup_span`` is the sliding window of push ids remembered per sender
        (:mod:`gossip.dup_window`).  ``rng`` only seeds
        push ids and, if no ``mask_source`` is given, the mask key (pass None in
        production so masks are keyed from os.urandom).
        """
        if not isinstance(fingerprint, bytes) or len(fingerprint) != FINGERPRINT_BYTES:
            raise InvalidValues(f"fingerprint: expected {FINGERPRINT_BYTES} bytes")
        if privacy not in PRIVACY_MODES:
            raise InvalidValues(f"privacy: expected one of {PRIVACY_MODES}, got {privacy!r}")
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
        for name, enc in (("encoding", encoding), ("delta_encoding", delta_encoding)):
            if enc not in ENCODINGS:
                raise InvalidValues(f"{name}: expected one of {ENCODINGS}, got {enc!r}")
        if not _is_int(max_in_flight) or max_in_flight < 1:
            raise InvalidValues(f"max_in_flight: expected an int >= 1, got {max_in_flight!r}")
        for name, size in (("reply_store_bytes", reply_store_bytes),
                           ("reference_store_bytes", reference_store_bytes)):
            if not _is_int(size) or size < 0:
                raise InvalidValues(f"{name}: expected an int >= 0, got {size!r}")
        if guard is not None and not isinstance(guard, GuardSettings):
            raise InvalidValues(f"guard: expected GuardSettings or None, got {guard!r}")
        if not _is_int(dup_span) or dup_span < 1:
            raise InvalidValues(f"dup_span: expected an int >= 1, got {dup_span!r}")
        self.fingerprint = fingerprint
        z = check_vector(values, None, "values")
        self._n = int(z.shape[0])
        # x and z are one array while no noise is held apart (see _hold_noise_apart):
        # updates then change both at once, with no copy per exchange
        self._z = z
        self._x = z
        self._scratch: np.ndarray | None = None  # see _buffer
        self._w = check_weight(weight, max_weight, "weight")
        self.fanout = fanout
        self.max_weight = float(max_weight)
        self.privacy = privacy
        self.masked_pushes = int(masked_pushes)
        self.mask_std = float(mask_std)
        self.unmask_after = int(unmask_after)
        # Masking epochs (set by the node's masking glue; None: off): a merge between a
        # noisy and a folded side with noise at least this old folds at once.  Such old
        # noise has mixed; the estimate it leaves carries values it no longer hides
        # (merged from a folded holder, or the receiver's own after its fold), while
        # the push would still be flagged noisy.
        self.boundary_fold_age: int | None = None
        self.max_attempts = int(max_attempts)
        self.give_up_after = int(give_up_after)
        self.exchange = exchange
        self.encoding = encoding
        self.delta_encoding = delta_encoding
        self.max_in_flight = int(max_in_flight)
        self.reply_store_bytes = int(reply_store_bytes)
        if not 0 < max_abs_value <= MAX_ABS_VALUE:
            raise InvalidValues(f"max_abs_value: expected a float in (0, {MAX_ABS_VALUE:g}], "
                                f"got {max_abs_value!r}")
        # a received value beyond it is refused (masked mode: from the mask scale,
        # gossip.masking.epochs.magnitude_bound)
        self.max_abs_value = float(max_abs_value)
        self._masks = mask_source if mask_source is not None else mask_source_from(rng)
        self._masked_left = self.masked_pushes if privacy == "masked" else 0
        self._noisy = False
        self._noise_age = 0
        # training steps made while noise is held: kept out of the pushed estimate
        # until the fold (see set_values)
        self._held_steps: np.ndarray | None = None
        # push ids start at 1 or more: ``Push.base == 0`` means "no reference"
        start = int(rng.integers(1, 2**62)) if rng is not None else secrets.randbits(62) | 1
        self._next_id = start
        self._outstanding: dict[int, _Outstanding] = {}
        self._recent_acks: OrderedDict[int, None] = OrderedDict()
        # push ids merged per sender, and whether we answered with a reply
        self._seen = DupWindow(dup_span)
        self._guard = MergeGuard(guard, self._n, rng) if guard is not None else None
        self._clip_seen: tuple[float, float] | None = None  # (tau, |y - x|) of the last check
        # the creep budget's clock: pushes this node made (its own exchange rate,
        # which no sender sets), see gossip.drift_budget
        self._own_pushes = 0
        self._replies: OrderedDict[tuple[bytes, int], PushAck] = OrderedDict()
        self._replies_bytes = 0
        self._references = PairReferences(reference_store_bytes)
        self._last_gap: float | None = None
        self._disagreement: float | None = None  # RMS(q_B - q_A) of the latest exchange
        self._round_drift: float | None = None
        self._c = {f.name: 0 for f in fields(PushSumCounters)}
        # a peer chooses how many bad pushes it sends: one line per sender per interval
        self._offences = LogLimiter(log)

    # ------------------------------------------------------------------ views
    @property
    def values(self) -> np.ndarray:
        """The de-biased trained values z (a float64 copy)."""
        return self._z.copy()

    @property
    def estimate(self) -> np.ndarray:
        """The push-sum estimate x (equals ``values`` unless mask noise is held apart)."""
        return self._x.copy()

    def estimate_view(self) -> np.ndarray:
        """The push-sum estimate x without a copy: a read-only view of the core's array.

        Valid until the next call that changes the state (a merge, an ack,
        :meth:`set_values`): the core updates its array in place, so an
        observer sees the new values or, after a reassignment, keeps the old
        ones.  :attr:`estimate` copies instead (8 MB per million values).
        """
        view = self._x.view()
        view.flags.writeable = False
        return view

    @property
    def weight(self) -> float:
        """The push-sum weight w."""
        return self._w

    @property
    def mass(self) -> np.ndarray:
        """w * x: the quantity whose sum over holders exchanges conserve."""
        return self._w * self._x

    @property
    def length(self) -> int:
        """Length of the model's vector."""
        return self._n

    @property
    def in_masked_phase(self) -> bool:
        """True while the next push will be masked."""
        return self._masked_left > 0

    @property
    def noisy(self) -> bool:
        """True while mask noise is held apart from the trained values."""
        return self._noisy

    @property
    def noise_age(self) -> int:
        """Merges received since the youngest noise held apart arrived (meaningful while noisy)."""
        return self._noise_age

    @property
    def next_push_id(self) -> int:
        """The id the next new push will carry (pushes made before have smaller ids)."""
        return self._next_id

    def push_fraction(self, push_id: int) -> float | None:
        """The fraction of this node's mass that push ``push_id`` takes once acknowledged:
        its share over the weight when it was made (None: not outstanding)."""
        o = self._outstanding.get(push_id)
        if o is None or o.weight_at_push <= 0.0:
            return None
        return min(o.push.weight / o.weight_at_push, 1.0 - 1e-12)

    @property
    def outstanding(self) -> int:
        """Number of pushes waiting for an acknowledgement (including unresolved ones)."""
        return len(self._outstanding)

    @property
    def in_flight(self) -> int:
        """Pushes awaiting an ack that still block new ones (``max_in_flight`` of them at most)."""
        return sum(1 for o in self._outstanding.values() if not o.unresolved)

    @property
    def holders_wanted(self) -> int:
        """How many candidate holders a driver offers :meth:`make_pushes` per round.

        ``fanout``, plus two spares under the guard: a peer it pauses (a sink)
        must not cost the round.
        """
        return self.fanout + (2 if self._guard is not None else 0)

    @property
    def reserved_weight(self) -> float:
        """Weight of unresolved pushes (maybe merged, ack lost): kept out of new shares."""
        return sum(o.push.weight for o in self._outstanding.values() if o.unresolved)

    @property
    def available_weight(self) -> float:
        """The weight not promised to pushes awaiting acks: what new shares are cut from."""
        return self._w - sum(o.push.weight for o in self._outstanding.values())

    @property
    def last_gap(self) -> float | None:
        """After the last merged push-pull reply: RMS(q_B - q_A) / RMS(q_A) (None before any).

        How far apart the two ends of the exchange were: near 0 once the
        holders agree.
        """
        return self._last_gap

    @property
    def round_drift(self) -> float | None:
        """After the last :meth:`set_values`: RMS(z_new - z_old) / RMS(z_old) (None before).

        How far local training moved the model since the previous update.
        """
        return self._round_drift

    @property
    def reference_bytes(self) -> int:
        """Bytes held by the references kept for delta requests."""
        return self._references.nbytes

    def held_reference(self, peer: bytes, push_id: int, started_here: bool) -> np.ndarray | None:
        """A copy of the reference held with ``peer`` from exchange ``push_id`` (None if not held).

        ``started_here``: True if this node started that exchange.  Both ends of
        a completed exchange hold bit-identical references.
        """
        ref = self._references.get(ReferenceKey(peer, push_id, started_here))
        return None if ref is None else ref.copy()

    @property
    def counters(self) -> PushSumCounters:
        """A frozen snapshot of the counters."""
        return PushSumCounters(**self._c)

    # ------------------------------------------------------------ local side
    def set_values(self, z: np.ndarray) -> None:
        """Replace the trained values after local SGD steps (between exchanges)."""
        new = check_vector(z, self._n, "set_values")  # a copy: ours
        step = np.subtract(new, self._z, out=self._buffer())
        self._round_drift = _rms(step) / max(_rms(self._z), 1e-12)
        if self._guard is not None:
            # merges may take back our own training without spending the creep budget
            self._guard.note_training(step, new, float(self._own_pushes))
        if self._noisy:
            # Held apart until the fold, not added to x: a push carries x, and two
            # pushes of one epoch with no merge between them carry the same noise,
            # so their difference would be exactly the local update.
            if self._held_steps is None:
                self._held_steps = step.copy()
            else:
                self._held_steps += step
            self._z = new
        else:
            self._x = self._z = new

    def add_noise_mass(self, mass: np.ndarray, *, fresh: bool = True) -> None:
        """Add ``mass`` to the held-apart noise (a masking pair's side, or its removal).

        Privacy "masked" only (:mod:`gossip.masking.epochs`).  The trained values
        stay untouched; the estimate moves by ``mass / w``.  ``fresh`` (a new
        pair) restarts the noise's age, so the fold waits for it to mix; a
        removal passes False.
        """
        if self.privacy != "masked":
            raise InvalidValues("add_noise_mass: only a core with privacy 'masked' holds noise")
        m = check_vector(mass, self._n, "noise mass")
        self._hold_noise_apart()
        m /= self._w
        self._x += m
        if fresh:
            self._noise_age = 0
            self._noisy = True
        elif not self._noisy:
            # a removal after the fold: it lands in the (averaged) trained values
            self._z = self._x

    def make_pushes(self, peers: Sequence[bytes], now: float) -> list[tuple[bytes, Push]]:
        """One round: pushes to the first ``fanout`` of ``peers``, each with share a/(fanout+1).

        ``a`` is :attr:`available_weight`.  Returns nothing while
        ``max_in_flight`` pushes await acks; peers that already await one of
        our pushes are skipped.
        """
        blocking = [o for o in self._outstanding.values() if not o.unresolved]
        if not peers or len(blocking) >= self.max_in_flight:
            return []
        busy = {o.peer for o in blocking}
        targets = [p for p in dict.fromkeys(peers) if p not in busy]
        if self._guard is not None:
            # a peer that took more than it gave back (a sink) gets nothing more;
            # the next candidate takes its place (see holders_wanted)
            guard, whole = self._guard, self._share()
            held_before = guard.held_back
            targets = [p for p in targets if guard.may_push(p, now, whole)]
            self._c["guard_held"] += guard.held_back - held_before
        targets = targets[: self.fanout]
        if not targets:
            return []
        # Noise ages with merges received (see _merge), not with pushes made: a
        # one-way push leaves the sender's estimate as it was, so a node that
        # pushes but hears from nobody has mixed nothing into its own noise.
        self._maybe_unmask()
        # unacknowledged shares may still be taken: they must stay available
        share = self._share()
        out: list[tuple[bytes, Push]] = []
        for peer in targets:
            masked = self._masked_left > 0
            if masked:
                payload = self._x + self._masks.normal(self._n, self.mask_std)
                self._masked_left -= 1
                self._c["masked_sent"] += 1
            else:
                payload = self._x
            noisy = masked or self._noisy
            # masked mode and held-apart noise use one-way pushes (see on_push)
            want_reply = self.exchange == "push-pull" and self.privacy == "none" and not noisy
            held = self._references.latest(peer) if want_reply else None
            if held is not None:
                # a delta against the pair's reference: rounding relative to
                # the disagreement, not to the values
                key, ref = held
                encoded, d = self._encode_request(payload, self.delta_encoding, ref)
                sent = rebuild(ref, d)
                base, base_by_sender = key.push_id, key.started_here
                self._c["delta_pushes_sent"] += 1
            elif want_reply:
                encoded, sent = self._encode_request(payload, self.encoding)
                base, base_by_sender = 0, False
            else:
                encoded = _encode_fitting(
                    payload, _NOISE_ENCODING[self.encoding] if noisy else self.encoding
                )
                sent = _decoded(encoded)
                base, base_by_sender = 0, False
            push = Push(
                model=self.fingerprint,
                push_id=self._next_id,
                values=encoded,
                weight=share,
                masked=masked,
                noisy=noisy,
                noise_age=0 if masked else self._noise_age,
                want_reply=want_reply,
                base=base,
                base_by_sender=base_by_sender,
            )
            self._next_id += 1
            if self._guard is not None and not want_reply:
                # a holder we chose ourselves: a partner from a one-way push on, acked
                # or not.  A one-way push beyond the peer's radius is refused with no
                # ack, and while no peer acks, no radius leaves the warm-up one: from
                # independent starts every push was refused, for good.  (A push-pull
                # request beyond it is clipped and answered: the ack makes the partner)
                self._guard.clip.note_partner(peer)
            self._outstanding[push.push_id] = _Outstanding(peer, push, sent, masked, now, 1,
                                                           weight_at_push=self.weight)
            self._c["pushes_sent"] += 1
            self._own_pushes += 1
            self._c["bytes_sent"] += push.nbytes
            out.append((peer, push))
        return out

    def expire(self, now: float, timeout: float) -> list[tuple[bytes, Push]]:
        """Handle pushes unacknowledged for ``timeout``: retransmit or give up.

        Returns the retransmissions to send (same push id, same payload).  After
        ``max_attempts`` sends a push becomes *unresolved*: it no longer blocks
        new pushes (its share is reserved) and is retransmitted every ``timeout``
        until acknowledged or ``give_up_after`` sends, when it is given up and
        the weight stays here.
        """
        resend: list[tuple[bytes, Push]] = []
        for push_id, o in list(self._outstanding.items()):
            if now - o.last_sent < timeout:
                continue
            if o.attempts >= self.max_attempts:
                o.unresolved = True
            if o.attempts < self.give_up_after:
                o.attempts += 1
                o.last_sent = now
                self._c["retransmissions"] += 1
                self._c["bytes_sent"] += o.push.nbytes
                resend.append((o.peer, o.push))
            else:
                del self._outstanding[push_id]
                self._c["failures"] += 1
                log.debug(  # the driver's "failed (N in a row)" line is the operator's
                    "push %d of model %s to %s unacknowledged after %d attempts; weight kept",
                    push_id, _short(self.fingerprint), _short(o.peer), o.attempts,
                )
        return resend

    def on_undelivered(self, push_id: int, maybe_delivered: bool) -> UndeliveredOutcome:
        """The transport reports that a send of ``push_id`` got no acknowledgement.

        ``maybe_delivered`` is False when the push surely did not reach the
        peer (connection refused, the peer answered with an error) and True
        when it may have been merged with only the ack lost (reply timed out,
        connection lost mid-exchange).  A first attempt that surely was not
        delivered is forgotten and the weight kept; anything else stays
        outstanding for :meth:`expire` to retransmit with the same id (the
        receiver merges once and re-acknowledges), because forgetting a push
        that was merged would duplicate its mass.  A push that has been
        retransmitted is never forgotten here: an earlier attempt may have been
        merged even if this one surely was not.
        """
        o = self._outstanding.get(push_id)
        if o is None:
            log.warning("undelivered push %r of model %s is not outstanding",
                        push_id, _short(self.fingerprint))
            return UndeliveredOutcome.UNKNOWN
        if maybe_delivered or o.attempts > 1:
            return UndeliveredOutcome.OUTSTANDING
        del self._outstanding[push_id]
        self._c["failures"] += 1
        if o.push.base:
            # the peer may have refused it for want of the reference (restart,
            # eviction): our next request to it carries absolute values
            self._references.forget(o.peer)
        return UndeliveredOutcome.FORGOTTEN

    def on_failure(self, push_id: int) -> bool:
        """Shorthand: ``push_id`` surely was not delivered; True if it was forgotten.

        Same rule as ``on_undelivered(push_id, maybe_delivered=False)``: the
        weight is kept; a retransmitted push stays outstanding.  Returns False
        (and changes nothing) if the push is not outstanding.
        """
        outcome = self.on_undelivered(push_id, maybe_delivered=False)
        return outcome is UndeliveredOutcome.FORGOTTEN

    # ---------------------------------------------------------- remote side
    def on_push(self, sender: bytes, push: Push, now: float) -> PushAck:
        """Validate and merge a push; return the acknowledgement to send back.

        A push-pull request (``want_reply``) is answered with a share of this
        node's mass in the ack when this core runs privacy "none" and neither
        side holds mask noise; otherwise with a plain ack.  Raises RejectedPush
        (state unchanged) if anything about the push is wrong.  A
        retransmission of an already merged push is acknowledged again without
        merging, with the very ack sent the first time; if that ack carried a
        reply that is no longer stored, the retransmission is refused
        (RejectedPush) rather than merged twice.  A delta request (``base``)
        naming a reference this core does not hold is refused too (counted in
        ``references_missing``, logged at INFO: a restart or an eviction, not
        an offence).
        """
        try:
            y = validate_push(push, self.fingerprint, self._n, self.max_weight)
            if self.max_abs_value < MAX_ABS_VALUE and y.size:
                largest = max(float(y.max()), -float(y.min()))
                if largest > self.max_abs_value:
                    raise RejectedPush(f"values: magnitude {largest:.3g} exceeds the bound "
                                       f"{self.max_abs_value:.4g} the mask scale allows")
            if not isinstance(sender, bytes):
                raise RejectedPush(f"sender: expected bytes, got {type(sender).__name__}")
            seen = self._seen.lookup(sender, push.push_id)
            if seen is Seen.MERGED or seen is Seen.REPLIED:
                return self._answer_again(sender, push.push_id, seen is Seen.REPLIED)
            if seen is Seen.TOO_OLD:
                raise RejectedPush(
                    f"push_id {push.push_id}: older than the {self._seen.span} ids remembered "
                    "for this sender, so it may have been merged; refusing to merge it twice"
                )
            if self._w + push.weight > self.max_weight:
                raise RejectedPush(
                    f"weight: merging {push.weight:g} would raise the weight to "
                    f"{self._w + push.weight:g} > max_weight {self.max_weight:g}"
                )
            flagged = push.masked or push.noisy
            replying = (push.want_reply and self.privacy == "none" and not self._noisy
                        and not flagged)
            r = self._reply_weight(push.weight) if replying else 0.0
            if self._guard is not None:
                self._guard.check_push(sender, push.weight, push.weight - r, self._w, flagged,
                                       self.privacy == "masked", now)
                if not (flagged or self._noisy):  # what the radius applies to
                    self._guard.check_share(sender, float(self._own_pushes))
            if push.base:
                y = self._rebuild_request(sender, push, y, now)
            self._clip_seen = None
            clip = self._clip_factor(sender, y, push.weight, r, flagged)
            # a clipped merge also costs the sender (part of) what was clipped
            # away, (1 - clip) r = s (1 - tau / |update|), as clip debt: little
            # when an honest node is a little off, the whole share for a liar's
            # kick, which would otherwise be free (the reply gives it back)
            kept, clipped_away = push.weight - r, 0.0
            if self._guard is not None and clip != 1.0:
                clipped_away = self._guard.clip_charge(push.weight, (1.0 - clip) * r)
                self._guard.check_push(sender, push.weight, kept, self._w, flagged,
                                       self.privacy == "masked", now, clipped_away)
            sketched = self._creep_check(sender, y)
        except _MissingReference:
            raise  # not an offence: counted and logged in _rebuild_request
        except RejectedPush as exc:
            self._c["rejected"] += 1
            if isinstance(exc, RefusedByGuard):
                self._c["guard_refused"] += 1
            self._offences.warning(now, _offender(sender),
                                   "rejected push from %s for model %s: %s",
                                   _short(sender) if isinstance(sender, bytes) else sender,
                                   _short(self.fingerprint), exc.reason)
            raise
        self._c["pushes_received"] += 1
        self._c["bytes_received"] += push.nbytes
        if self._guard is not None:
            self._guard.merged(sender, kept, flagged, now, clipped_away, sketched,
                               float(self._own_pushes), shared=not (flagged or self._noisy))
            if clip != 1.0:
                self._c["clipped"] += 1
        if not replying:
            self._merge(y, push.weight, noisy=flagged,
                        noise_age=0 if push.masked else push.noise_age)
            self._seen.record(sender, push.push_id, False)
            return PushAck(self.fingerprint, push.push_id)
        ack = self._reply(sender, y, push, r, clip)
        self._seen.record(sender, push.push_id, True)
        self._store_reply((sender, push.push_id), ack)
        self._c["replies_sent"] += 1
        self._c["bytes_sent"] += ack.nbytes
        return ack

    def on_ack(self, sender: bytes, ack: PushAck, now: float) -> None:
        """The receiver merged our push: remove the share it took, merge its reply if any.

        Raises RejectedAck (state unchanged) for wrong model, duplicate or
        unexpected acknowledgements.  A reply that fails its checks raises
        :class:`RejectedReply` *after* the ack itself was applied: the ack says
        the responder merged our share, so keeping the share here would
        duplicate it; the reply is dropped (counted in ``bad_replies``).  That
        is what a plain ack does, so a lying responder gains nothing by it.
        """
        try:
            if not isinstance(ack, PushAck):
                raise RejectedAck(f"expected a PushAck, got {type(ack).__name__}")
            if ack.model != self.fingerprint:
                raise RejectedAck(
                    f"ack model fingerprint {bytes(ack.model)[:8].hex()}... does not match "
                    f"{self.fingerprint[:8].hex()}..."
                )
            o = self._outstanding.get(ack.push_id)
            if o is None:
                kind = "duplicate" if ack.push_id in self._recent_acks else "unexpected"
                raise RejectedAck(f"{kind} ack for push {ack.push_id!r}")
            if sender != o.peer:
                raise RejectedAck(
                    f"ack for push {ack.push_id} came from {_short(sender)}, "
                    f"but it was sent to {_short(o.peer)}"
                )
        except RejectedAck as exc:
            self._c["rejected"] += 1
            self._offences.warning(now, _offender(sender),
                                   "rejected ack from %s for model %s: %s",
                                   _short(sender) if isinstance(sender, bytes) else sender,
                                   _short(self.fingerprint), exc.reason)
            raise
        bad: str | None = None
        reply: tuple[float, np.ndarray] | None = None
        if ack.reply is not None or ack.reply_weight != 0.0:
            try:
                reply = self._check_reply(o, ack)
            except InvalidValues as exc:
                bad = str(exc)
        if self._guard is not None:
            # a holder we chose ourselves: its update norms may set the clip radius
            self._guard.clip.note_partner(o.peer)
        del self._outstanding[ack.push_id]
        self._recent_acks[ack.push_id] = None
        if len(self._recent_acks) > _RECENT_ACKS:
            self._recent_acks.popitem(last=False)
        share = o.push.weight
        rest = self._w - share
        if self._unreciprocated(o, reply, now):
            # a sink: the share stays here (see _unreciprocated), nothing changes
            self._c["acks"] += 1
            if bad is not None:
                self._c["rejected"] += 1
                self._c["bad_replies"] += 1
            self._offences.warning(
                now, _offender(sender),
                "%s answered push-pull request %d for model %s without a reply: share kept, "
                "no pushes to it for %gs", _short(sender), ack.push_id, _short(self.fingerprint),
                self._guard.settings.sink_pause if self._guard is not None else 0.0)
            return
        if reply is None:
            if o.masked:
                self._hold_noise_apart()  # the compensation stays here, held apart
            # remove exactly the mass that was sent: share * q (mask included)
            step = np.subtract(self._x, o.sent, out=self._buffer())
            step *= share / rest
            self._x += step
            if o.masked:
                self._noisy = True
                self._noise_age = 0
            self._w = rest
        else:
            r, d = reply  # q_B = q_A + d
            self._disagreement = _rms(d)
            self._last_gap = self._disagreement / max(_rms(o.sent), 1e-12)
            self._references.record(ReferenceKey(o.peer, ack.push_id, True),
                                    reference_of(o.sent, d, out=self._buffer()))
            if self._guard is not None:
                self._clip_reply(o, d)
            new_w = rest + r
            a, b = share / new_w, r / new_w
            if self._noisy:  # noise arrived meanwhile: the reply is a clean merge for z
                self._z += b * (o.sent + d - self._z)
            # mass w x - s q_A + r q_B over weight w - s + r:
            # x + (a - b) (x - q_A) + b d, in place
            step = np.subtract(self._x, o.sent, out=self._buffer())
            step *= a - b
            self._x += step
            d *= b  # d is ours (decoded for this call)
            self._x += d
            self._w = new_w
            self._c["replies_received"] += 1
            self._c["bytes_received"] += ack.nbytes
        self._c["acks"] += 1
        if self._guard is not None:
            # a reply far below the share (a taking sink) earns the same pause
            short = (reply is not None
                     and reply[0] * self._guard.settings.share_ratio < share)
            self._guard.acked(o.peer, share - (reply[0] if reply is not None else 0.0), now,
                              shun=short)
        if bad is not None:
            self._c["rejected"] += 1
            self._c["bad_replies"] += 1
            self._offences.warning(
                now, _offender(sender),
                "dropped the reply from %s for model %s (its ack was applied): %s",
                _short(sender), _short(self.fingerprint), bad)
            raise RejectedReply(f"reply to push {ack.push_id} dropped: {bad}")

    # ------------------------------------------------------------ checkpoints
    def snapshot(self) -> PushSumSnapshot:
        """Plain data to checkpoint this core."""
        return PushSumSnapshot(
            fingerprint=self.fingerprint,
            values=self._z.copy(),
            # the training held out of the estimate is kept (pushes after a restore carry it)
            estimate=self._x + self._held_steps if self._held_steps is not None
            else self._x.copy(),
            weight=self._w,
            noisy=self._noisy,
            noise_age=self._noise_age,
            seen=tuple(self._seen.export()),
        )

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
        self._z, self._x, self._w = z, x if noisy else z, w
        self._noisy, self._noise_age = noisy, int(snapshot.noise_age)
        self._held_steps = None
        if snapshot.seen:
            try:
                self._seen.load(list(snapshot.seen))
            except ValueError as exc:
                raise InvalidValues(f"snapshot.seen: {exc}") from None
        self._outstanding.clear()
        self._references.clear()  # not checkpointed, as after a restart
        self._masked_left = self.masked_pushes if self.privacy == "masked" else 0

    @classmethod
    def from_snapshot(cls, snapshot: PushSumSnapshot, **kwargs: Unpack[PushSumOptions]) -> PushSum:
        """A new core initialised from ``snapshot`` (keyword arguments as the constructor)."""
        core = cls(snapshot.fingerprint, snapshot.values, weight=snapshot.weight, **kwargs)
        core.restore(snapshot)
        return core

    # ---------------------------------------------------------------- helpers
    def _merge(self, y: np.ndarray, weight: float, *, noisy: bool, noise_age: int) -> None:
        """Merge ``weight * y`` into the state (a received one-way push; ``y`` is ours)."""
        # One place where received values enter the state: a robust merge rule
        # (clipping y - x, issue 11) would go here and in _reply/on_ack.
        new_w = self._w + weight
        a = weight / new_w
        boundary = noisy != self._noisy  # one side holds noise, the other has folded
        if noisy:
            self._hold_noise_apart()  # z keeps the trained values; the deviation is held in x - z
            self._noise_age = min(self._noise_age, noise_age) if self._noisy else noise_age
            self._noisy = True
        elif self._noisy:
            self._z += a * (y - self._z)
        if self._noisy:
            # the held noise ages with the mass that comes in: only a merge mixes
            # others' estimates into ours (the min_peers collapse of issue 12:
            # counted by pushes made, a node that pushed into idle peers folded
            # its own unmixed noise into its trained values)
            self._noise_age += 1
        step = np.subtract(y, self._x, out=y)
        step *= a
        self._x += step
        self._w = new_w
        if boundary and self.boundary_fold_age is not None \
                and self._noise_age >= self.boundary_fold_age:
            # the swarm is folding (see boundary_fold_age): fold now rather than push
            # estimates whose old noise no longer hides the values they carry
            self._maybe_unmask(force=True)

    def _hold_noise_apart(self) -> None:
        """Give x its own array before it moves away from z (noise arrives)."""
        if self._z is self._x:
            self._z = self._x.copy()

    def _buffer(self) -> np.ndarray:
        """A float64 scratch vector of the model's length, reused by every call.

        Its contents are only valid within one method call; nothing kept
        (stored references, outstanding payloads, replies) may point into it.
        """
        if self._scratch is None:
            self._scratch = np.empty(self._n, dtype=np.float64)
        return self._scratch

    def _encode_request(self, values: np.ndarray, encoding: str,
                        ref: np.ndarray | None = None) -> tuple[EncodedVector, np.ndarray]:
        """Encode a push-pull request in ``encoding``, or wider if too coarse.

        What is encoded is ``values`` or, with a reference ``ref``, the delta
        ``values - ref``.  Returns the encoded vector and its decoded float64
        values (the delta's, with a reference).  Rounding
        that exceeds the disagreement between the ends would re-inject
        disagreement at every exchange and stall the averaging: absolute values
        in a coarse encoding round relative to the values, and a delta against
        a reference from long ago is as large as the disagreement was then.  So
        the rounding error (RMS) is kept below ``REQUEST_ERROR_SHARE`` times the
        latest disagreement measured in an exchange (RMS(q_B - q_A)), else the
        next wider encoding is used (int8 -> f16 -> f32; counted in
        ``requests_widened``).  Before any measurement ``encoding`` is used.
        """
        while True:
            v = values if ref is None else np.subtract(values, ref, out=self._buffer())
            encoded = _encode_fitting(v, encoding)
            d = decode(encoded, self._n)
            wider = _WIDER_REQUEST.get(encoded.encoding)
            if wider is None or self._disagreement is None:
                return encoded, d
            # the rounding error, in the scratch buffer (v is recomputed for a retry)
            error = np.subtract(v, d, out=self._buffer())
            if _rms(error) <= REQUEST_ERROR_SHARE * self._disagreement:
                return encoded, d
            self._c["requests_widened"] += 1
            encoding = wider

    def _rebuild_request(self, sender: bytes, push: Push, delta: np.ndarray,
                         now: float) -> np.ndarray:
        """The values of a delta request: the named reference plus ``delta`` (ours, float64)."""
        ref = self._references.get(ReferenceKey(sender, push.base, not push.base_by_sender))
        if ref is None:
            self._c["references_missing"] += 1
            started = "the sender" if push.base_by_sender else "this node"
            reason = (f"base: no reference from exchange {push.base} (started by {started}) "
                      "is held for this sender; send absolute values")
            # Rate-limited per sender: any peer may name a reference never held; a
            # protocol detail (the sender falls back to absolute values), so debug.
            self._offences.log(now, _offender(sender), logging.DEBUG,
                               "refused a delta push from %s for model %s: %s", _short(sender),
                               _short(self.fingerprint), reason)
            raise _MissingReference(reason)
        q = rebuild(ref, delta)
        try:
            check_magnitude(q, "values (reference plus delta)")
        except InvalidValues as exc:
            raise RejectedPush(str(exc)) from None
        return q

    def _share(self) -> float:
        """The weight of each new push: ``available / (fanout + 1)``, at most the
        guard's :attr:`~gossip.merge_guard.GuardSettings.max_share`.

        A liar can hand a node weight (one-way pushes of its own estimate pass
        every check, up to the net balance per peer); uncapped, a node whose
        weight passed about 6 made shares its own guard held back (and beyond
        8 every guarded receiver refused): it never pushed again, and weight
        only leaves by pushes.  Capped, it sheds the excess over a few
        exchanges.
        """
        share = self.available_weight / (self.fanout + 1)
        if self._guard is not None:
            share = min(share, self._guard.settings.max_share)
        return share

    def _reply_weight(self, s: float) -> float:
        """The weight we give back to a push-pull request of share ``s``."""
        # The textbook symmetric rule gives r = a / (fanout + 1) (a: our weight
        # not promised to our own pushes in flight); we also never give back
        # more than the share we take: with equal weights (the usual case) the
        # two agree and both ends land on the pairwise average, and r <= s
        # makes a reply unable to raise the initiator's or the total weight, a
        # bound the initiator checks exactly (see _check_reply).
        return min(s, self.available_weight / (self.fanout + 1))

    def _creep_check(self, sender: bytes, y: np.ndarray) -> np.ndarray | None:
        """The update a push would merge (clipped), as the creep budget sums it, or
        RefusedByGuard ("drift"; see :mod:`gossip.drift_budget`); None when the
        push was not clip-checked (no guard, clipping off, mask noise) or the
        radius is still the warm-up one (no partner's update seen: a node that
        only answers has no radius to count in, nor own pushes to decay with)."""
        if (self._guard is None or self._guard.drift is None or self._clip_seen is None
                or not self._guard.clip.warmed_up(sender)):
            return None
        tau, norm = self._clip_seen
        # in radii at the time of the merge: as an honest swarm converges its
        # radius shrinks, and the past larger steps must not count for more
        update = np.subtract(y, self._x)
        update *= 1.0 / max(norm, tau) if norm > 0 else 0.0
        sketched = self._guard.drift.sketch(update)
        self._guard.check_drift(sender, sketched, float(self._own_pushes))
        return sketched

    def _clip_factor(self, sender: bytes, y: np.ndarray, s: float, r: float,
                     flagged: bool) -> float:
        """The reply's scale of ``x - q_A`` (1.0: no clipping) or RefusedByGuard.

        ClippedGossip with exact mass (see docs/gossip.md, "Merge defences"):
        the update ``y - x`` is clipped to the guard's radius tau.  A one-way
        push whose update is longer is refused (the sender keeps its weight: a
        rule exact for mass).  A push-pull responder merges the clipped
        ``q_A' = x + clip(q_A - x)`` and hands the clipped-away part back in
        its reply: the reply's values become ``x + (s / r) (q_A - q_A')``, i.e.
        ``q_A + k (x - q_A)`` with ``k = 1 - (s / r) (1 - tau / |q_A - x|)``,
        so the initiator, removing ``s q_A`` and adding ``r q_B``, keeps the
        part we did not merge and the sums stay exact.  A core that itself
        pushes one-way (``exchange="push"``) refuses such a request instead:
        each clipped merge moves it by about half the radius, its one-way
        averaging pulls it back slowly, and the spread those kicks leave
        raises the partners' update norms the radius follows, a loop that
        grew without bound against a poisoner.  Updates carrying mask
        noise (a flagged push, or this node holding noise apart) are not
        clipped: masks are large by design.
        """
        if self._guard is None or not self._guard.settings.clipping or flagged or self._noisy:
            return 1.0
        diff = np.subtract(y, self._x, out=self._buffer())
        norm = math.sqrt(float(np.einsum("i,i->", diff, diff)))
        clip = self._guard.clip
        # (right after a masking epoch's fold, at least the fold's floor: see
        # ClipRadius.note_fold, set in _maybe_unmask)
        tau = clip.radius(math.sqrt(float(np.einsum("i,i->", self._x, self._x))), sender)
        clip.record(sender, norm)  # statistics only: also when refused
        self._clip_seen = (tau, norm)
        if norm <= tau:
            return 1.0
        if r <= 0.0:
            raise RefusedByGuard("clip", f"update norm {norm:.3g} exceeds the radius {tau:.3g}")
        if self.exchange == "push":
            # a one-way holder clips nothing, a request included: its slow mixing
            # cannot absorb the kicks, whose spread raises the radius they are
            # clipped to (docs/gossip.md, "A poisoner against one-way holders")
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

    def _reply(self, sender: bytes, q_a: np.ndarray, push: Push, r: float,
               clip: float = 1.0) -> PushAck:
        """Merge a push-pull request and give away a share ``r`` of our mass in the ack.

        Precondition: privacy "none", no held-apart noise on either side, so
        ``x == z`` before and after.  ``clip`` scales the reply's delta
        against ``q_a`` (1.0 but when the update was clipped, see
        :meth:`_clip_factor`).
        """
        s = push.weight
        # the reply is a delta against what the initiator sent: small once the
        # two agree, so a coarse encoding loses little; both ends use exactly
        # the decoded delta, so mass stays exact.
        delta = np.subtract(self._x, q_a, out=self._buffer())
        if clip != 1.0:
            # f64: the part handed back may be as large as the poison it came
            # from, and the encoder keeps the rounding residual (here: in x)
            encoded = encode(delta * clip, "f64")
            self._disagreement = _rms(delta)
        else:
            encoded = _encode_fitting(delta, self.delta_encoding)
        d = decode(encoded, self._n)
        if clip == 1.0:
            self._disagreement = _rms(d)
        # mass: w x + s q_A - r (q_A + d), weight w + s - r (> 0: r < available),
        # that is x - ((s - r) / new_w) (x - q_A) - (r / new_w) d, in place (x is z)
        new_w = self._w + s - r
        delta *= (s - r) / new_w
        self._x -= delta
        # the initiator derives the same reference from the same decoded inputs
        self._references.record(ReferenceKey(sender, push.push_id, False),
                                reference_of(q_a, d, out=delta))
        d *= r / new_w
        self._x -= d
        self._w = new_w
        return PushAck(self.fingerprint, push.push_id, reply=encoded, reply_weight=r)

    def _clip_reply(self, o: _Outstanding, d: np.ndarray) -> None:
        """Clip a reply's update ``q_B - x`` in place of its delta ``d = q_B - q_A``.

        The radius is ``reply_clip_factor`` times ours: an honest responder that
        clipped our request hands the clipped-away part back, so its reply
        may legitimately sit up to its own radius away.  The part clipped here
        is not merged (the responder already gave it away): the only place the
        defences lose mass, counted in ``clipped_replies``.
        """
        assert self._guard is not None
        if not self._guard.settings.clipping or self._noisy:
            return
        v = np.add(o.sent, d, out=self._buffer())
        v -= self._x
        norm = math.sqrt(float(np.einsum("i,i->", v, v)))
        clip = self._guard.clip
        # before a partner was seen, reply_clip_factor x clip_start ||x|| (2 ||x||): an
        # honest first reply lands half way between two initial models, well within it,
        # while a liar answering a newcomer's (or a restarted node's) first request
        # must not move it without bound
        # (a reply right after the responder's fold may carry its epoch: the fold
        # floor applies, unspent by replies)
        tau = (self._guard.settings.reply_clip_factor
               * clip.radius(math.sqrt(float(np.einsum("i,i->", self._x, self._x))), o.peer))
        clip.record(o.peer, norm, fold_check=False)
        if norm <= tau:
            return
        # q_B' = x + (tau / norm) (q_B - x), so d' = q_B' - q_A
        v *= tau / norm
        np.subtract(self._x, o.sent, out=d)
        d += v
        self._c["clipped_replies"] += 1

    def _unreciprocated(self, o: _Outstanding, reply: tuple[float, np.ndarray] | None,
                        now: float) -> bool:
        """Whether an ack answers our push-pull request without a (valid) reply, under the
        guard: then the share is *kept* and the peer gets no push for ``sink_pause``.

        The sink rule (docs/gossip.md, "Merge defences"): an honest responder
        of a privacy "none" swarm always replies to a request (it replies
        unless it holds mask noise, and with the guard a "none" node refuses
        every masked or noisy push, so it never holds any).  A plain ack to a
        request therefore comes from a liar claiming to have merged our share
        while giving nothing back; keeping the share leaves the honest nodes'
        sums of weight and mass exactly as if the push had been refused.
        """
        if (self._guard is None or reply is not None or not o.push.want_reply
                or self.privacy != "none"):
            return False
        self._c["unreciprocated"] += 1
        self._guard.acked(o.peer, 0.0, now, shun=True)
        return True

    def _check_reply(self, o: _Outstanding, ack: PushAck) -> tuple[float, np.ndarray]:
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
        # An honest responder gives back at most the share it took (see _reply),
        # so a reply can never raise our weight nor the total weight.
        if not 0.0 < r <= o.push.weight:
            raise InvalidValues(
                f"reply_weight {r:g} outside (0, {o.push.weight:g}]: more than the share "
                "we sent"
            )
        d = decode_values(ack.reply, self._n, "reply")
        # the reply's values q_B = q_A + d, bounded (an overflow shows as infinity)
        check_magnitude(np.add(o.sent, d, out=self._buffer()), "reply values")
        return r, d

    def _answer_again(self, sender: bytes, push_id: int, replied: bool) -> PushAck:
        """The ack for a retransmission of a push merged before (no second merge)."""
        if not replied:
            self._c["duplicates"] += 1
            return PushAck(self.fingerprint, push_id)
        ack = self._replies.get((sender, push_id))
        if ack is None:
            self._c["replies_evicted"] += 1
            raise RejectedPush(
                f"push {push_id} was merged and answered with a reply that is no longer "
                "stored; refusing to merge it twice"
            )
        self._replies.move_to_end((sender, push_id))
        self._c["duplicates"] += 1
        self._c["bytes_sent"] += ack.nbytes
        return ack

    def _store_reply(self, key: tuple[bytes, int], ack: PushAck) -> None:
        self._replies[key] = ack
        self._replies_bytes += ack.nbytes
        while self._replies and (len(self._replies) > _STORED_REPLIES
                                 or self._replies_bytes > self.reply_store_bytes):
            _, old = self._replies.popitem(last=False)
            self._replies_bytes -= old.nbytes

    def fold_noise(self) -> bool:
        """Fold the held noise into the trained values now, whatever its age.

        For a bounded epoch (:mod:`gossip.masking.epochs`: a peer that keeps
        claiming young noise must not hold the fold back for good).  Returns
        False when no noise is held or a masked push's compensation is pending.
        """
        if not self._noisy:
            return False
        self._maybe_unmask(force=True)
        return not self._noisy

    def _maybe_unmask(self, force: bool = False) -> None:
        if not self._noisy or (self._noise_age < self.unmask_after and not force):
            return
        if any(o.masked for o in self._outstanding.values()):
            return  # its compensation must land before the noise is folded in
        jump = 0.0
        if self._held_steps is not None:
            jump = math.sqrt(float(np.einsum("i,i->", self._held_steps, self._held_steps)))
            self._x += self._held_steps  # the epoch's training joins the averaged values
            self._held_steps = None
        if self._guard is not None:
            # the first clear pushes after the swarm's folds move by an epoch of
            # training: the clip radius follows for a few merges (ClipRadius.note_fold)
            self._guard.clip.note_fold(jump)
        self._z = self._x  # one array again
        self._noisy = False
        self._c["unmasks"] += 1


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
