"""Masking epochs: cancelling noise pairs agreed over secure sessions (sans-IO).

After Bouchra Pilet, Frey, Taïani, "Robust Privacy-Preserving Gossip
Averaging" (SSS 2019): exchange noise first, then data, so the network-wide
sum stays exact and a crash can be undone.  One :class:`MaskEpochs` per shared
model per node; the caller (a driver) moves the messages and applies the
returned mass vectors to the model's :class:`~gossip.pushsum.PushSum` core
with :meth:`~gossip.pushsum.PushSum.add_noise_mass`.

An epoch, at one node:

1. **Setup (noise).**  The node offers a pair to ``partners`` holders of the
   model (:meth:`MaskEpochs.start` returns the :class:`PairOffer` messages).
   Both ends derive the pair's noise from their session's key agreement
   (:func:`session_secret`, :func:`pair_seed`): no noise travels.  The
   responder applies its side (``-a * n``) when the offer arrives and answers
   a :class:`PairAccept`; the initiator applies its side (``+a * n``) when the
   accept arrives.  ``a = mask_scale * min(w_initiator, w_responder)`` (both
   weights travel in the messages), so the noise each side adds to its
   estimate ``x = mass / w`` is at most ``mask_scale`` times a Gaussian tail
   per pair whatever the weights: :func:`noise_bound`.  The sum of mass over
   the holders is exact once the exchange completes.
2. **Mixing (data).**  Once every offer is answered or its partner is lost,
   :attr:`MaskEpochs.may_push` turns true and the node's pushes carry its
   obfuscated estimate (the core holds the trained values apart, pushes are
   flagged ``noisy``).  A receiver that is a pair partner of the sender knows
   one of its pairs, not the others: with two other partners the push stays
   hidden from it (:func:`hiding_warning` for models with too few holders).
3. **Fold.**  After ``mix_exchanges`` exchanges the core folds: the trained
   values take the averaged value (``PushSum``'s ``unmask_after`` rule).
   :meth:`MaskEpochs.on_folded` closes the epoch; ``clear_rounds`` training
   rounds later :attr:`MaskEpochs.due` says the next one may start.

Crash or departure of a partner (:meth:`MaskEpochs.partner_lost`): the
survivor removes what it still holds of its own side of that pair.  It knows
that amount exactly: a push of share ``s`` at weight ``w`` removes the
fraction ``s / w`` of every part of the mass (:meth:`MaskEpochs.note_pushed`).
The removal leaves no residual when neither end's share of the pair left the
two of them (no push since the pair was applied, or pushes only to each
other): the partner took exactly its own side, the survivor takes back
exactly its own.  Once either end pushed elsewhere the pair's noise is mixing
and the removal takes back only the survivor's part; what the partner held is
lost with it, as any crashed node's mass is.
"""

from __future__ import annotations

import enum
import logging
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from gossip.errors import InvalidValues
from gossip.masking import KEY_BYTES, MaskSource
from gossip.messages import FINGERPRINT_BYTES

log = logging.getLogger(__name__)

_SESSION_LABEL = b"p2p gossip mask pairs v1"
_PAIR_LABEL = b"p2p gossip mask pair v1"
#: Largest |N(0, 1)| a :class:`~gossip.masking.MaskSource` can draw (Box-Muller
#: radius with 53-bit uniforms in (0, 1]).
GAUSSIAN_TAIL = math.sqrt(-2.0 * math.log(2.0**-53))
#: Fewest holders of a model for pairwise masks to hide a push from its
#: receiver: the sender needs two pair partners besides the receiver.
MIN_HIDING_HOLDERS = 4


@dataclass(frozen=True)
class EpochSettings:
    """How masking epochs run (one set per node; see docs/gossip.md for the figures)."""

    partners: int = 3  # pairs a node offers per epoch
    mask_scale: float = 10.0  # noise per pair in the estimate, in the values' units
    mix_exchanges: int = 40  # exchanges after the last pair before the fold
    clear_rounds: int = 0  # training rounds between an epoch's fold and the next start
    max_accepted: int = 8  # pairs a node accepts from others per epoch of its own

    def __post_init__(self) -> None:
        for name in ("partners", "mix_exchanges", "max_accepted"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidValues(f"{name}: expected an int >= 1, got {value!r}")
        if isinstance(self.clear_rounds, bool) or not isinstance(self.clear_rounds, int) \
                or self.clear_rounds < 0:
            raise InvalidValues(f"clear_rounds: expected an int >= 0, got {self.clear_rounds!r}")
        if not (self.mask_scale > 0 and math.isfinite(self.mask_scale)):
            raise InvalidValues(f"mask_scale: expected a positive finite float, "
                                f"got {self.mask_scale!r}")


@dataclass(frozen=True)
class PairOffer:
    """Opens a noise pair for ``model`` in the initiator's epoch ``epoch``."""

    model: bytes
    epoch: int
    weight: float  # the initiator's push-sum weight: sets the pair's amplitude


@dataclass(frozen=True)
class PairAccept:
    """The responder applied its side of the pair (answers a :class:`PairOffer`)."""

    model: bytes
    epoch: int
    weight: float  # the responder's weight


class Phase(enum.Enum):
    """Where a node's current epoch stands."""

    CLEAR = "clear"  # no epoch of our own: pushes in clear (unless others' noise is held)
    SETUP = "setup"  # offers sent, not all answered: no data pushes yet
    MIXING = "mixing"  # pairs applied, pushes carry the obfuscated mass


@dataclass
class _Pair:
    peer: bytes
    epoch: int  # the initiator's epoch
    initiated: bool  # True: we offered it (our side is +a n)
    side: np.ndarray  # our side's mass as applied
    kept: float = 1.0  # share of our side still in our mass
    mixed: bool = False  # some of our side went to a third node


def session_secret(send_key: bytes, recv_key: bytes) -> bytes:
    """A secret both ends of one secure session derive alike (32 bytes).

    ``send_key``/``recv_key``: the session's traffic keys
    (:class:`p2p.wire.handshake.SessionKeys`); one end's send key is the
    other's receive key, so they are combined in sorted order.  HKDF with its
    own label keeps the result independent of the traffic keys themselves.
    """
    for name, key in (("send_key", send_key), ("recv_key", recv_key)):
        if not isinstance(key, bytes) or len(key) < 16:
            raise InvalidValues(f"{name}: expected at least 16 bytes of key")
    low, high = sorted((send_key, recv_key))
    return HKDF(hashes.SHA256(), KEY_BYTES, salt=None, info=_SESSION_LABEL).derive(low + high)


def pair_seed(secret: bytes, model: bytes, epoch: int, initiator: bytes,
              responder: bytes) -> bytes:
    """The 32-byte seed of one pair: per session, per model, per epoch, per pair."""
    if not isinstance(secret, bytes) or len(secret) != KEY_BYTES:
        raise InvalidValues(f"secret: expected {KEY_BYTES} bytes")
    if not isinstance(model, bytes) or len(model) != FINGERPRINT_BYTES:
        raise InvalidValues(f"model: expected a {FINGERPRINT_BYTES}-byte fingerprint")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch < 2**63:
        raise InvalidValues(f"epoch: expected an int in [0, 2**63), got {epoch!r}")
    if initiator == responder:
        raise InvalidValues("a pair needs two distinct nodes")
    info = (_PAIR_LABEL + model + struct.pack(">Q", epoch)
            + struct.pack(">H", len(initiator)) + initiator
            + struct.pack(">H", len(responder)) + responder)
    return HKDF(hashes.SHA256(), KEY_BYTES, salt=None, info=info).derive(secret)


def pair_noise(seed: bytes, length: int) -> np.ndarray:
    """The pair's unit noise: ``length`` N(0, 1) values from a ChaCha20 stream keyed by ``seed``."""
    return MaskSource(seed).normal(length, 1.0)


def noise_bound(settings: EpochSettings, pairs: int | None = None) -> float:
    """Largest noise an honest node's estimate carries in one coordinate.

    Each pair adds at most ``mask_scale * GAUSSIAN_TAIL`` to the estimate of
    the node applying it (the amplitude is scaled by the smaller weight of
    the two, see :class:`PairOffer`); merges are convex combinations and
    pushes keep the estimate, so no estimate exceeds the worst node's own
    sum.  ``pairs`` defaults to the most a node holds: its own
    ``partners`` plus ``max_accepted``.
    """
    count = settings.partners + settings.max_accepted if pairs is None else pairs
    return count * settings.mask_scale * GAUSSIAN_TAIL


def magnitude_bound(settings: EpochSettings, value_bound: float) -> float:
    """The receivers' magnitude bound that follows from the mask scale in use.

    ``value_bound``: the largest honest trained value (model parameters and
    their drift).  An honest push is within ``value_bound + noise_bound``;
    removing a lost partner's pair takes back at most the node's own side
    (its density ``kept * side / w`` never exceeds the side's density at
    application: own pushes shrink kept and w alike, merges only add weight),
    so the bound doubles the noise term.  The poisoner of the trust issue
    (1e5 x N(0, 1)) is far outside it for the default settings.
    """
    if not (value_bound > 0 and math.isfinite(value_bound)):
        raise InvalidValues(f"value_bound: expected a positive finite float, got {value_bound!r}")
    return value_bound + 2.0 * noise_bound(settings)


def hiding_warning(holders: int) -> str | None:
    """Why pairwise masks cannot hide this model's pushes, or None if they can.

    ``holders``: nodes holding the model, this one included.
    """
    if holders >= MIN_HIDING_HOLDERS:
        return None
    if holders <= 2:
        return ("model held by two nodes only: pairwise masks cannot hide a push from "
                "the other holder (it knows the only pair)")
    return (f"model held by {holders} nodes: from a receiver that is one of the sender's "
            "two pair partners a push is hidden by one unknown pair only")


class MaskEpochs:
    """One node's masking epochs for one model (sans-IO; see the module docstring)."""

    def __init__(self, node_id: bytes, model: bytes, length: int,
                 settings: EpochSettings | None = None) -> None:
        if not isinstance(node_id, bytes) or not node_id:
            raise InvalidValues("node_id: expected non-empty bytes")
        if not isinstance(model, bytes) or len(model) != FINGERPRINT_BYTES:
            raise InvalidValues(f"model: expected a {FINGERPRINT_BYTES}-byte fingerprint")
        if isinstance(length, bool) or not isinstance(length, int) or length < 0:
            raise InvalidValues(f"length: expected an int >= 0, got {length!r}")
        self.node_id = node_id
        self.model = model
        self.length = length
        self.settings = settings or EpochSettings()
        self.epoch = 0  # our epochs, numbered from 1
        self.phase = Phase.CLEAR
        self._offered: dict[bytes, tuple[int, float]] = {}  # peer -> (epoch, our weight) unanswered
        self._pairs: dict[tuple[bytes, int, bool], _Pair] = {}
        self._accepted_this_epoch = 0
        self._clear_rounds = self.settings.clear_rounds  # first epoch may start at once
        # pairs removed while our side had not left the two ends (exact if the
        # partner's had not either: it cannot be seen from here)
        self.removed_exact = 0
        self.removed_mixing = 0  # pairs removed after our side reached a third node

    # ----------------------------------------------------------------- views
    @property
    def due(self) -> bool:
        """True when a new epoch of our own may start."""
        return self.phase is Phase.CLEAR and self._clear_rounds >= self.settings.clear_rounds

    @property
    def may_push(self) -> bool:
        """False while our offers are unanswered: noise first, then data."""
        return self.phase is not Phase.SETUP

    @property
    def live_pairs(self) -> int:
        """Pairs applied here and not removed."""
        return len(self._pairs)

    def pairs_with(self, peer: bytes) -> int:
        """Live pairs held with ``peer`` (one each way at most per epoch)."""
        return sum(1 for p in self._pairs.values() if p.peer == peer)

    def sides_with(self, peer: bytes) -> list[np.ndarray]:
        """Copies of our sides of the live pairs with ``peer`` (what we know of its noise)."""
        return [p.side.copy() for p in self._pairs.values() if p.peer == peer]

    def partners_of_epoch(self) -> list[bytes]:
        """Peers we hold live pairs with."""
        return sorted({p.peer for p in self._pairs.values()})

    # ---------------------------------------------------------- our epochs
    def start(self, candidates: Sequence[bytes], weight: float) -> list[tuple[bytes, PairOffer]]:
        """Begin an epoch: offers to the first ``partners`` distinct candidates (not us).

        ``weight``: our current push-sum weight.  Call it with no push of
        this model awaiting its ack: the weight then only grows (merges) until
        the accepts arrive, so our side's noise in the estimate stays within
        ``mask_scale`` per pair.  Returns nothing (and stays clear) without
        candidates.
        """
        if self.phase is not Phase.CLEAR:
            raise InvalidValues(f"start: an epoch is already {self.phase.value}")
        _check_weight(weight, "weight")
        peers = [p for p in dict.fromkeys(candidates) if p != self.node_id]
        peers = peers[: self.settings.partners]
        if not peers:
            return []
        self.epoch += 1
        self.phase = Phase.SETUP
        self._accepted_this_epoch = 0
        self._offered = {p: (self.epoch, float(weight)) for p in peers}
        offer = PairOffer(self.model, self.epoch, float(weight))
        return [(p, offer) for p in peers]

    def on_accept(self, peer: bytes, accept: PairAccept, secret: bytes) -> np.ndarray:
        """Our offer was accepted: the mass to add to our core (our side, ``+a n``)."""
        pending = self._offered.get(peer)
        if accept.model != self.model or pending is None or pending[0] != accept.epoch:
            raise InvalidValues(f"accept for epoch {accept.epoch!r} from {peer[:4].hex()}: "
                                "no such offer is pending")
        _check_weight(accept.weight, "accept.weight")
        epoch, our_weight = pending
        del self._offered[peer]
        amplitude = self.settings.mask_scale * min(our_weight, accept.weight)
        seed = pair_seed(secret, self.model, epoch, self.node_id, peer)
        side = amplitude * pair_noise(seed, self.length)
        self._pairs[(peer, epoch, True)] = _Pair(peer, epoch, True, side)
        self._settle()
        return side.copy()

    def offer_failed(self, peer: bytes) -> None:
        """An offer surely did not reach ``peer`` (or we give up on it): nothing was applied here."""
        if self._offered.pop(peer, None) is not None:
            self._settle()

    # -------------------------------------------------------- others' epochs
    def on_offer(self, peer: bytes, offer: PairOffer, secret: bytes,
                 weight: float) -> tuple[PairAccept, np.ndarray | None]:
        """A holder offers a pair: the accept to send and the mass to add (``-a n``).

        A retransmitted offer gets the same accept and no second side (None).
        Raises InvalidValues when the offer is malformed or more than
        ``max_accepted`` pairs were accepted during our current epoch.
        """
        if offer.model != self.model:
            raise InvalidValues("offer: model fingerprint does not match")
        if isinstance(offer.epoch, bool) or not isinstance(offer.epoch, int) or offer.epoch < 1:
            raise InvalidValues(f"offer.epoch: expected an int >= 1, got {offer.epoch!r}")
        _check_weight(offer.weight, "offer.weight")
        _check_weight(weight, "weight")
        accept = PairAccept(self.model, offer.epoch, float(weight))
        key = (peer, offer.epoch, False)
        if key in self._pairs:
            return accept, None
        if self._accepted_this_epoch >= self.settings.max_accepted:
            raise InvalidValues(f"offer: already {self.settings.max_accepted} pairs accepted")
        self._accepted_this_epoch += 1
        amplitude = self.settings.mask_scale * min(offer.weight, float(weight))
        seed = pair_seed(secret, self.model, offer.epoch, peer, self.node_id)
        side = -amplitude * pair_noise(seed, self.length)
        self._pairs[key] = _Pair(peer, offer.epoch, False, side)
        return accept, side.copy()

    # ------------------------------------------------------------- mixing
    def note_pushed(self, peer: bytes, fraction: float) -> None:
        """A push of ours to ``peer`` was acknowledged; it took ``fraction`` (share / weight at
        the push) of our mass, so of every pair side we still held."""
        if not 0.0 <= fraction < 1.0:
            raise InvalidValues(f"fraction: expected a float in [0, 1), got {fraction!r}")
        for pair in self._pairs.values():
            pair.kept *= 1.0 - fraction
            if peer != pair.peer and fraction > 0.0:
                pair.mixed = True

    def partner_lost(self, peer: bytes) -> np.ndarray | None:
        """``peer`` crashed or left: the mass to add to our core to take our sides back.

        None if we hold no pair with it.  Unanswered offers to it are dropped.
        """
        self.offer_failed(peer)
        keys = [k for k in self._pairs if k[0] == peer]
        if not keys:
            return None
        total = np.zeros(self.length)
        for key in keys:
            pair = self._pairs.pop(key)
            total -= pair.kept * pair.side
            if pair.mixed:
                self.removed_mixing += 1
            else:
                self.removed_exact += 1
        log.info("removed %d pair(s) with lost partner %s for model %s", len(keys),
                 peer[:4].hex(), self.model[:4].hex())
        return total

    def on_folded(self) -> None:
        """The core folded its noise into the trained values: the epoch is over."""
        self._pairs.clear()
        self._offered.clear()
        self._accepted_this_epoch = 0
        if self.phase is not Phase.CLEAR:
            self.phase = Phase.CLEAR
            self._clear_rounds = 0

    def on_round(self) -> None:
        """A training round ended (counts the clear rounds between epochs)."""
        if self.phase is Phase.CLEAR:
            self._clear_rounds += 1

    def _settle(self) -> None:
        if self.phase is Phase.SETUP and not self._offered:
            self.phase = Phase.MIXING if self._pairs else Phase.CLEAR


def _check_weight(weight: object, what: str) -> None:
    if isinstance(weight, bool) or not isinstance(weight, int | float) \
            or not (math.isfinite(weight) and weight > 0):
        raise InvalidValues(f"{what}: expected a positive finite weight, got {weight!r}")


__all__ = [
    "GAUSSIAN_TAIL",
    "MIN_HIDING_HOLDERS",
    "EpochSettings",
    "MaskEpochs",
    "PairAccept",
    "PairOffer",
    "Phase",
    "hiding_warning",
    "magnitude_bound",
    "noise_bound",
    "pair_noise",
    "pair_seed",
    "session_secret",
]
