"""Sans-IO push-sum core for one shared partial model.

State: the trained values ``z`` (what the trainer sees), the push-sum estimate
``x`` and the float64 weight ``w``.  The node's push-sum *mass* is ``w * x``;
over the holders of a model, sum(w) and sum(w * x) are unchanged by exchanges.
Without masking ``x == z`` at all times.

With masking (see docs/gossip.md) ``x = z + D / w``: ``D`` is mask noise plus
averaging deviation held apart from the trained values until the noise has had
``unmask_after`` rounds to cancel, then folded in (``z <- x``).

Delivery: a push leaves the sender's weight untouched; the share is removed
only when the acknowledgement arrives.  An unacknowledged push is retransmitted
(same ``push_id``; receivers recognise duplicates and re-acknowledge without
merging) up to ``max_attempts`` times, then given up with the weight kept.

Undelivered pushes (:meth:`PushSum.on_undelivered`): a first attempt that
surely did not reach the peer is forgotten with the weight kept; one that may
have been delivered stays outstanding and :meth:`PushSum.expire` retransmits
it; a push that was retransmitted is never forgotten on a failure report,
since an earlier attempt may have been merged with only its ack lost.  The
daemon's driver and the simulator both apply this one rule.
"""

from __future__ import annotations

import logging
import secrets
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, fields
from enum import Enum
from typing import TypedDict, Unpack

import numpy as np

from gossip.counters import PushSumCounters
from gossip.errors import InvalidValues, RejectedAck, RejectedPush
from gossip.masking import MaskSource, mask_source_from
from gossip.messages import FINGERPRINT_BYTES, Push, PushAck
from gossip.validation import check_vector, check_weight, validate_push

log = logging.getLogger(__name__)

PRIVACY_MODES = ("none", "masked")
_SEEN_IDS_PER_PEER = 64
_SEEN_PEERS = 4096
_RECENT_ACKS = 256


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


class UndeliveredOutcome(Enum):
    """What :meth:`PushSum.on_undelivered` did with a push reported undelivered."""

    FORGOTTEN = "forgotten"  # surely not merged: dropped, the weight stays here
    OUTSTANDING = "outstanding"  # maybe merged: kept, expire() retransmits it (same id)
    UNKNOWN = "unknown"  # not an outstanding push of this core: nothing changed


@dataclass
class _Outstanding:
    peer: bytes
    push: Push
    sent_estimate: np.ndarray  # x at send time, without the mask
    mask: np.ndarray | None
    last_sent: float
    attempts: int
    unresolved: bool = False  # past max_attempts: no longer blocks new pushes


def _short(b: bytes) -> str:
    return bytes(b)[:4].hex()


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
    ) -> None:
        """Create the core.

        ``privacy="masked"`` obfuscates the first ``masked_pushes`` pushes (and
        the first ones after ``restore``) with N(0, mask_std^2) masks.  ``rng``
        only seeds push ids and, if no ``mask_source`` is given, the mask key
        (pass None in production so masks are keyed from os.urandom).
        """
        if not isinstance(fingerprint, bytes) or len(fingerprint) != FINGERPRINT_BYTES:
            raise InvalidValues(f"fingerprint: expected {FINGERPRINT_BYTES} bytes")
        if privacy not in PRIVACY_MODES:
            raise InvalidValues(f"privacy: expected one of {PRIVACY_MODES}, got {privacy!r}")
        if not isinstance(fanout, int) or fanout < 1:
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
        self.fingerprint = fingerprint
        z = check_vector(values, None, "values")
        self._n = int(z.shape[0])
        self._z = z
        self._x = z.copy()
        self._w = check_weight(weight, max_weight, "weight")
        self.fanout = fanout
        self.max_weight = float(max_weight)
        self.privacy = privacy
        self.masked_pushes = int(masked_pushes)
        self.mask_std = float(mask_std)
        self.unmask_after = int(unmask_after)
        self.max_attempts = int(max_attempts)
        self.give_up_after = int(give_up_after)
        self._masks = mask_source if mask_source is not None else mask_source_from(rng)
        self._masked_left = self.masked_pushes if privacy == "masked" else 0
        self._noisy = False
        self._noise_age = 0
        start = int(rng.integers(0, 2**62)) if rng is not None else secrets.randbits(62)
        self._next_id = start
        self._outstanding: dict[int, _Outstanding] = {}
        self._recent_acks: OrderedDict[int, None] = OrderedDict()
        self._seen: OrderedDict[bytes, OrderedDict[int, None]] = OrderedDict()
        self._c = {f.name: 0 for f in fields(PushSumCounters)}

    # ------------------------------------------------------------------ views
    @property
    def values(self) -> np.ndarray:
        """The de-biased trained values z (a float64 copy)."""
        return self._z.copy()

    @property
    def estimate(self) -> np.ndarray:
        """The push-sum estimate x (equals ``values`` unless mask noise is held apart)."""
        return self._x.copy()

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
    def outstanding(self) -> int:
        """Number of pushes waiting for an acknowledgement (including unresolved ones)."""
        return len(self._outstanding)

    @property
    def reserved_weight(self) -> float:
        """Weight of unresolved pushes (maybe merged, ack lost): kept out of new shares."""
        return sum(o.push.weight for o in self._outstanding.values() if o.unresolved)

    @property
    def counters(self) -> PushSumCounters:
        """A frozen snapshot of the counters."""
        return PushSumCounters(**self._c)

    # ------------------------------------------------------------ local side
    def set_values(self, z: np.ndarray) -> None:
        """Replace the trained values after local SGD steps (between exchanges)."""
        new = check_vector(z, self._n, "set_values")
        if self._noisy:
            self._x += new - self._z
        else:
            self._x = new.copy()
        self._z = new

    def make_pushes(self, peers: Sequence[bytes], now: float) -> list[tuple[bytes, Push]]:
        """One round: pushes to the first ``fanout`` of ``peers``, each with share w/(fanout+1).

        Returns nothing while a previous push is still unacknowledged.
        """
        if not peers or any(not o.unresolved for o in self._outstanding.values()):
            return []
        # Noise ages with exchanges actually made, not with calls: a node that
        # cannot push (no partner, push in flight) must not fold unmixed noise.
        if self._noisy:
            self._noise_age += 1
        self._maybe_unmask()
        targets = list(dict.fromkeys(peers))[: self.fanout]
        # an unresolved push may still be acknowledged: its share must stay available
        share = (self._w - self.reserved_weight) / (self.fanout + 1)
        out: list[tuple[bytes, Push]] = []
        for peer in targets:
            masked = self._masked_left > 0
            sent = self._x.copy()
            mask = None
            if masked:
                mask = self._masks.normal(self._n, self.mask_std)
                payload = sent + mask
                self._masked_left -= 1
                self._c["masked_sent"] += 1
            else:
                payload = sent.copy()
            payload.flags.writeable = False
            push = Push(
                model=self.fingerprint,
                push_id=self._next_id,
                values=payload,
                weight=share,
                masked=masked,
                noisy=masked or self._noisy,
                noise_age=0 if masked else self._noise_age,
            )
            self._next_id += 1
            self._outstanding[push.push_id] = _Outstanding(peer, push, sent, mask, now, 1)
            self._c["pushes_sent"] += 1
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
                log.info(
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

        Raises RejectedPush (state unchanged) if anything about it is wrong.
        A retransmission of an already merged push is acknowledged again
        without merging.
        """
        try:
            validate_push(push, self.fingerprint, self._n, self.max_weight)
            if not isinstance(sender, bytes):
                raise RejectedPush(f"sender: expected bytes, got {type(sender).__name__}")
            seen = self._seen.get(sender)
            if seen is not None and push.push_id in seen:
                self._c["duplicates"] += 1
                return PushAck(self.fingerprint, push.push_id)
            new_w = self._w + push.weight
            if new_w > self.max_weight:
                raise RejectedPush(
                    f"weight: merging {push.weight:g} would raise the weight to {new_w:g} "
                    f"> max_weight {self.max_weight:g}"
                )
        except RejectedPush as exc:
            self._c["rejected"] += 1
            log.warning("rejected push from %s for model %s: %s",
                        _short(sender) if isinstance(sender, bytes) else sender,
                        _short(self.fingerprint), exc.reason)
            raise
        a = push.weight / new_w
        y = push.values
        self._x += a * (y - self._x)
        if push.masked or push.noisy:
            age = 0 if push.masked else push.noise_age
            self._noise_age = min(self._noise_age, age) if self._noisy else age
            self._noisy = True  # z keeps the trained values; the deviation is held in x - z
        elif self._noisy:
            self._z += a * (y - self._z)
        else:
            self._z = self._x.copy()
        self._w = new_w
        self._remember(sender, push.push_id)
        self._c["pushes_received"] += 1
        self._c["bytes_received"] += push.nbytes
        return PushAck(self.fingerprint, push.push_id)

    def on_ack(self, sender: bytes, ack: PushAck, now: float) -> None:
        """The receiver merged our push: remove the share it took.

        Raises RejectedAck (state unchanged) for wrong model, duplicate or
        unexpected acknowledgements.
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
            log.warning("rejected ack from %s for model %s: %s",
                        _short(sender) if isinstance(sender, bytes) else sender,
                        _short(self.fingerprint), exc.reason)
            raise
        del self._outstanding[ack.push_id]
        self._recent_acks[ack.push_id] = None
        if len(self._recent_acks) > _RECENT_ACKS:
            self._recent_acks.popitem(last=False)
        share = o.push.weight
        rest = self._w - share
        # remove exactly the mass that was sent: share * (sent estimate + mask)
        self._x += (share / rest) * (self._x - o.sent_estimate)
        if o.mask is not None:
            self._x -= (share / rest) * o.mask  # the compensation stays here, held apart
            self._noisy = True
            self._noise_age = 0
        if not self._noisy:
            self._z = self._x.copy()
        self._w = rest
        self._c["acks"] += 1

    # ------------------------------------------------------------ checkpoints
    def snapshot(self) -> PushSumSnapshot:
        """Plain data to checkpoint this core."""
        return PushSumSnapshot(
            fingerprint=self.fingerprint,
            values=self._z.copy(),
            estimate=self._x.copy(),
            weight=self._w,
            noisy=self._noisy,
            noise_age=self._noise_age,
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
        self._z, self._x, self._w = z, x, w
        self._noisy, self._noise_age = noisy, int(snapshot.noise_age)
        self._outstanding.clear()
        self._masked_left = self.masked_pushes if self.privacy == "masked" else 0

    @classmethod
    def from_snapshot(cls, snapshot: PushSumSnapshot, **kwargs: Unpack[PushSumOptions]) -> PushSum:
        """A new core initialised from ``snapshot`` (keyword arguments as the constructor)."""
        core = cls(snapshot.fingerprint, snapshot.values, weight=snapshot.weight, **kwargs)
        core.restore(snapshot)
        return core

    # ---------------------------------------------------------------- helpers
    def _maybe_unmask(self) -> None:
        if not self._noisy or self._noise_age < self.unmask_after:
            return
        if any(o.mask is not None for o in self._outstanding.values()):
            return  # its compensation must land before the noise is folded in
        self._z = self._x.copy()
        self._noisy = False
        self._c["unmasks"] += 1

    def _remember(self, sender: bytes, push_id: int) -> None:
        seen = self._seen.get(sender)
        if seen is None:
            seen = self._seen[sender] = OrderedDict()
            if len(self._seen) > _SEEN_PEERS:
                self._seen.popitem(last=False)
        else:
            self._seen.move_to_end(sender)
        seen[push_id] = None
        if len(seen) > _SEEN_IDS_PER_PEER:
            seen.popitem(last=False)
