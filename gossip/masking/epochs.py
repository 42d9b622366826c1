"""Masking epochs: cancelling noise pairs agreed over secure sessions (sans-IO).

After Bouchra Pilet, Frey, Taïani (SSS 2019): noise first, then data, so the
network-wide sum stays exact and a crash can be undone. One :class:`MaskEpochs`
per shared model per node; a driver moves its messages and applies the returned
mass vectors with :meth:`~gossip.pushsum.PushSum.add_noise_mass`. An epoch:
**setup** (:class:`PairOffer` / :class:`PairAccept`, the pair's noise seeded
from an X25519 agreement, :func:`pair_secret`, :func:`pair_seed`, sized by
:func:`noise_bound`), **mixing** (:attr:`MaskEpochs.may_push`: noisy pushes),
**fold** (:meth:`MaskEpochs.on_folded`; :attr:`MaskEpochs.due` starts the next).
Pairs join only young noise (:meth:`MaskEpochs.may_take_noise`); a survivor takes
back its share of a lost partner's pair (:meth:`MaskEpochs.partner_lost`,
:meth:`MaskEpochs.note_pushed`).

How it works: docs/design/gossip.md ("Masking epochs").
"""

from __future__ import annotations

import enum
import logging
import math
import struct
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from gossip.errors import InvalidValues
from gossip.masking.noise import KEY_BYTES, MaskSource
from gossip.messages import FINGERPRINT_BYTES

log = logging.getLogger(__name__)

_SECRET_LABEL = b"p2p gossip mask pairs v2"
PUBLIC_KEY_BYTES = 32
_ANSWERED = 256  # answered offers remembered per model, for retransmissions
_PAIR_LABEL = b"p2p gossip mask pair v1"
#: Largest |N(0, 1)| a :class:`~gossip.masking.MaskSource` can draw (Box-Muller
#: radius with 53-bit uniforms in (0, 1]).
GAUSSIAN_TAIL = math.sqrt(-2.0 * math.log(2.0**-53))
#: The largest trained value an honest node is taken to hold (network parameters
#: are O(0.1-1); a diverged model far beyond it is refused as a poisoner would be).
VALUE_BOUND = 100.0
#: Fewest holders of a model for pairwise masks to hide a push from its
#: receiver: the sender needs two pair partners besides the receiver.
MIN_HIDING_HOLDERS = 4


@dataclass(frozen=True)
class EpochSettings:
    """How masking epochs run (one set per node; see docs/design/gossip.md for the figures)."""

    partners: int = 3  # pairs a node offers per epoch
    mask_scale: float = 10.0  # noise per pair in the estimate, in the values' units
    mix_exchanges: int = 40  # exchanges after the last pair before the fold
    clear_rounds: int = 10  # training rounds between an epoch's fold and the next start
    max_accepted: int = 8  # pairs from others a node holds at once (until its next fold)
    # fresh pairs join held noise only while it is this young (exchanges): see may_take_noise
    join_window: int = 10
    # a pair's amplitude follows the lighter end's weight: between ends whose weights
    # differ more than this the heavier end's noise would be too faint to hide anything
    max_weight_ratio: float = 8.0
    # training rounds in a row noise may be held before it is folded whatever its
    # age: a peer claiming young noise (noise_age 0) on every push would otherwise
    # hold the fold back for good (see MaskEpochs.fold_overdue)
    max_noisy_rounds: int = 60

    @property
    def boundary_fold_age(self) -> int:
        """Noise at least this old folds at a merge with a folded holder (3/4 of
        ``mix_exchanges``: ``PushSum.boundary_fold_age``)."""
        return max(1, (3 * self.mix_exchanges) // 4)

    def __post_init__(self) -> None:
        for name in ("partners", "mix_exchanges", "max_accepted", "join_window",
                     "max_noisy_rounds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidValues(f"{name}: expected an int >= 1, got {value!r}")
        if isinstance(self.clear_rounds, bool) or not isinstance(self.clear_rounds, int) \
                or self.clear_rounds < 0:
            raise InvalidValues(f"clear_rounds: expected an int >= 0, got {self.clear_rounds!r}")
        if not (self.max_weight_ratio >= 1 and math.isfinite(self.max_weight_ratio)):
            raise InvalidValues(f"max_weight_ratio: expected a finite float >= 1, "
                                f"got {self.max_weight_ratio!r}")
        if not (self.mask_scale > 0 and math.isfinite(self.mask_scale)):
            raise InvalidValues(f"mask_scale: expected a positive finite float, "
                                f"got {self.mask_scale!r}")


@dataclass(frozen=True)
class PairOffer:
    """Opens a noise pair for ``model`` in the initiator's epoch ``epoch`` (a request)."""

    model: bytes
    epoch: int
    weight: float  # the initiator's push-sum weight: sets the pair's amplitude
    public: bytes  # the initiator's ephemeral X25519 public key for this pair


@dataclass(frozen=True)
class PairAccept:
    """The responder applied its side of the pair (answers a :class:`PairOffer`)."""

    model: bytes
    epoch: int
    weight: float  # the responder's weight
    public: bytes  # the responder's ephemeral X25519 public key


#: The wire surface of masking epochs: (message class, wire type name) pairs.
MASK_MESSAGES: tuple[tuple[type, str], ...] = (
    (PairOffer, "pair_offer"),
    (PairAccept, "pair_accept"),
)


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
    first_push: int = 0  # pushes with smaller ids were made before the side: carry none of it


def new_private_key(rng: np.random.Generator | None = None) -> X25519PrivateKey:
    """A fresh ephemeral X25519 key (from os.urandom; from ``rng`` for reproducible tests)."""
    if rng is None:
        return X25519PrivateKey.generate()
    return X25519PrivateKey.from_private_bytes(rng.bytes(32))


def public_bytes(key: X25519PrivateKey) -> bytes:
    """The 32 raw bytes of ``key``'s public key (what a pair message carries)."""
    return key.public_key().public_bytes_raw()


def pair_secret(private: X25519PrivateKey, peer_public: bytes) -> bytes:
    """The 32-byte secret both ends of a pair derive alike: X25519 of our ephemeral key
    and the peer's, through HKDF with its own label.

    Only the two ends know it (the public keys travel inside their
    authenticated session; the private keys never leave the node and are
    dropped once the pair is applied).  Raises InvalidValues for a malformed
    public key or one that yields no shared secret (a low-order point).
    """
    if not isinstance(peer_public, bytes) or len(peer_public) != PUBLIC_KEY_BYTES:
        raise InvalidValues(f"public: expected a {PUBLIC_KEY_BYTES}-byte X25519 public key")
    try:
        shared = private.exchange(X25519PublicKey.from_public_bytes(peer_public))
    except ValueError as exc:
        raise InvalidValues(f"public: no shared secret with this key ({exc})") from None
    return HKDF(hashes.SHA256(), KEY_BYTES, salt=None, info=_SECRET_LABEL).derive(shared)


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


def magnitude_bound(settings: EpochSettings, value_bound: float = VALUE_BOUND) -> float:
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
                 settings: EpochSettings | None = None,
                 rng: np.random.Generator | None = None) -> None:
        """``rng`` only seeds the ephemeral keys (tests); None draws them from os.urandom."""
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
        self._rng = rng
        # peer -> (epoch, our weight, our ephemeral key) of unanswered offers
        self._offered: dict[bytes, tuple[int, float, X25519PrivateKey]] = {}
        self._pairs: dict[tuple[bytes, int, bool], _Pair] = {}
        self._accepted_this_epoch = 0
        # offers answered, for retransmissions (kept past the fold, bounded)
        # (peer, epoch) -> (the offer's public key, our accept): a retransmission carries
        # the same key; a restarted peer numbers its epochs afresh with new keys
        self._answered: OrderedDict[tuple[bytes, int], tuple[bytes, PairAccept]] = OrderedDict()
        self._clear_rounds = self.settings.clear_rounds  # first epoch may start at once
        # pairs removed while our side had not left the two ends (exact if the
        # partner's had not either: it cannot be seen from here)
        self.removed_exact = 0
        self.removed_mixing = 0  # pairs removed after our side reached a third node
        self.folds = 0  # epochs (ours or others' pairs) whose noise was folded in
        self.refused = 0  # offers refused (too many accepted, or noise too old to join)
        self.noisy_rounds = 0  # training rounds in a row the core has held noise
        self.forced_folds = 0  # folds made by the max_noisy_rounds bound

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

    @property
    def pending_offers(self) -> list[bytes]:
        """Peers whose answer to our offer is awaited."""
        return list(self._offered)

    def may_take_noise(self, noisy: bool, noise_age: int) -> bool:
        """Whether a fresh pair may be applied to a core holding noise of this age.

        The fold waits until the youngest noise a node holds has had
        ``mix_exchanges`` exchanges, and merging a noisy push passes the
        sender's age on (the younger wins).  If pairs kept arriving at any
        age, epochs started at different times would keep every node's noise
        young and the fold would never come: the trained values would train
        alone for the whole run (the ``min_peers`` collapse of issue 12).  So
        fresh noise joins only noise younger than ``join_window`` exchanges;
        the rest waits for the fold.
        """
        return not noisy or noise_age < self.settings.join_window

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
        # (pairs accepted from others are counted until the fold clears them: live
        # pairs stay within partners + max_accepted, as noise_bound assumes)
        out = []
        for p in peers:
            key = new_private_key(self._rng)
            self._offered[p] = (self.epoch, float(weight), key)
            out.append((p, PairOffer(self.model, self.epoch, float(weight), public_bytes(key))))
        return out

    def offer_to(self, peer: bytes) -> PairOffer | None:
        """The pending offer to ``peer`` again (a retransmission: same key), or None."""
        pending = self._offered.get(peer)
        if pending is None:
            return None
        epoch, weight, key = pending
        return PairOffer(self.model, epoch, weight, public_bytes(key))

    def on_accept(self, peer: bytes, accept: PairAccept, *,
                  next_push_id: int = 0) -> np.ndarray:
        """Our offer was accepted: the mass to add to our core (our side, ``+a n``).

        ``next_push_id``: the core's next push id (pushes in flight carry none of the side).
        """
        pending = self._offered.get(peer)
        if accept.model != self.model or pending is None or pending[0] != accept.epoch:
            raise InvalidValues(f"accept for epoch {accept.epoch!r} from {peer[:4].hex()}: "
                                "no such offer is pending")
        _check_weight(accept.weight, "accept.weight")
        epoch, our_weight, key = pending
        secret = pair_secret(key, accept.public)  # before dropping the offer: may raise
        del self._offered[peer]
        amplitude = self.settings.mask_scale * min(our_weight, accept.weight)
        seed = pair_seed(secret, self.model, epoch, self.node_id, peer)
        side = amplitude * pair_noise(seed, self.length)
        self._pairs[(peer, epoch, True)] = _Pair(peer, epoch, True, side,
                                                 first_push=next_push_id)
        self._settle()
        return side.copy()

    def offer_failed(self, peer: bytes) -> None:
        """An offer surely did not reach ``peer`` (or we give up on it): nothing was applied here."""
        if self._offered.pop(peer, None) is not None:
            self._settle()

    # -------------------------------------------------------- others' epochs
    def on_offer(self, peer: bytes, offer: PairOffer, weight: float, *, noisy: bool = False,
                 noise_age: int = 0,
                 next_push_id: int = 0) -> tuple[PairAccept, np.ndarray | None]:
        """A holder offers a pair: the accept to send and the mass to add (``-a n``).

        ``weight``, ``noisy`` and ``noise_age``: our core's state.  A
        retransmitted offer gets the very same accept and no second side
        (None).  Raises InvalidValues when the offer is malformed, when more
        than ``max_accepted`` pairs were accepted during our current epoch, or
        when the noise we hold is too old for a fresh pair to join it
        (:meth:`may_take_noise`; the initiator asks someone else), when the two
        weights differ more than ``max_weight_ratio`` (the pair would hide
        little at the heavier end), or when a
        pair accepted from the same peer is still live (one liar cannot take
        every slot).
        """
        if offer.model != self.model:
            raise InvalidValues("offer: model fingerprint does not match")
        if (isinstance(offer.epoch, bool) or not isinstance(offer.epoch, int)
                or not 1 <= offer.epoch < 2**63):
            raise InvalidValues(f"offer.epoch: expected an int in [1, 2**63), got {offer.epoch!r}")
        _check_weight(offer.weight, "offer.weight")
        _check_weight(weight, "weight")
        answered = self._answered.get((peer, offer.epoch))
        if answered is not None and answered[0] == offer.public:
            # a retransmission (also after our fold cleared the pair): same answer
            return answered[1], None
        # (same epoch, another key: the peer restarted and numbers its epochs from 1
        # again; answering with the stored accept would apply no side here while the
        # peer applies one from a secret we do not share: the sum would be off)
        if any(key[0] == peer and not key[2] for key in self._pairs):
            self.refused += 1
            raise InvalidValues("offer: a pair accepted from this peer is still live")
        if self._accepted_this_epoch >= self.settings.max_accepted:
            self.refused += 1
            raise InvalidValues(f"offer: already {self.settings.max_accepted} pairs accepted")
        if not self.may_take_noise(noisy, noise_age):
            self.refused += 1
            raise InvalidValues(f"offer: the noise held here is {noise_age} exchanges old, "
                                f"past the join window ({self.settings.join_window})")
        ratio = max(offer.weight, weight) / min(offer.weight, weight)
        if ratio > self.settings.max_weight_ratio:
            # a = mask_scale * (lighter weight): the heavier end would get noise of
            # mask_scale / ratio in its estimate, too faint next to its values
            self.refused += 1
            raise InvalidValues(f"offer: weights {offer.weight:.3g} and {weight:.3g} differ "
                                f"more than {self.settings.max_weight_ratio:g}x")
        ours = new_private_key(self._rng)
        secret = pair_secret(ours, offer.public)
        accept = PairAccept(self.model, offer.epoch, float(weight), public_bytes(ours))
        amplitude = self.settings.mask_scale * min(offer.weight, float(weight))
        seed = pair_seed(secret, self.model, offer.epoch, peer, self.node_id)
        side = -amplitude * pair_noise(seed, self.length)
        self._accepted_this_epoch += 1  # only once the side is sure to be applied
        self._pairs[(peer, offer.epoch, False)] = _Pair(peer, offer.epoch, False, side,
                                                        first_push=next_push_id)
        self._answered[(peer, offer.epoch)] = (offer.public, accept)
        self._answered.move_to_end((peer, offer.epoch))
        while len(self._answered) > _ANSWERED:
            self._answered.popitem(last=False)
        return accept, side.copy()

    # ------------------------------------------------------------- mixing
    def note_pushed(self, peer: bytes, fraction: float, push_id: int | None = None) -> None:
        """A push of ours to ``peer`` was acknowledged; it took ``fraction`` (share / weight at
        the push) of our mass, so of every pair side we held when it was made.

        ``push_id``: pairs applied after the push was made (``first_push`` above
        it) lost nothing to it.  Exact for pushes acknowledged one after another;
        with several in flight at once the product slightly overstates what
        left (second order in the shares).
        """
        if not 0.0 <= fraction < 1.0:
            raise InvalidValues(f"fraction: expected a float in [0, 1), got {fraction!r}")
        for pair in self._pairs.values():
            if push_id is not None and push_id < pair.first_push:
                continue
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
        """The core folded its noise into the trained values: the pairs are over.

        Starts the clear gap (``clear_rounds``) before our next epoch, also
        when the folded noise was only others' pairs: the swarm's folds come
        close together (held ages follow the youngest noise) and the gap lets
        the last ones fold before fresh noise resets their ages.  Offers still
        awaiting an answer stay pending (the partner may have applied its side).
        """
        if self._pairs or self.phase is Phase.MIXING:
            self.folds += 1
            self._clear_rounds = 0
        self._pairs.clear()
        self._accepted_this_epoch = 0
        if self.phase is Phase.MIXING:
            self.phase = Phase.CLEAR

    def ready(self, noisy: bool, noise_age: int) -> bool:
        """True when our next epoch may start on a core in this state (:attr:`due` and
        :meth:`may_take_noise`)."""
        return self.due and self.may_take_noise(noisy, noise_age)

    def on_round(self, noisy: bool = False) -> None:
        """A training round ended (counts the clear rounds between epochs and, with
        ``noisy`` (the core holds noise), the rounds noise has been held)."""
        if self.phase is Phase.CLEAR:
            self._clear_rounds += 1
        self.noisy_rounds = self.noisy_rounds + 1 if noisy else 0

    @property
    def fold_overdue(self) -> bool:
        """True once noise has been held ``max_noisy_rounds`` rounds in a row: fold it now.

        Honest epochs fold well before (``bench_privacy.py --real`` reports the
        streaks); a peer that claims young noise on every push keeps the
        receiver's age young and its training apart from the swarm.  Folding
        then may fold noise that has not mixed: the price of a bounded epoch.
        """
        return self.noisy_rounds >= self.settings.max_noisy_rounds

    def on_forced_fold(self) -> None:
        """The core folded because :attr:`fold_overdue` (counts it, closes the epoch)."""
        self.forced_folds += 1
        self.noisy_rounds = 0
        self.on_folded()

    def _settle(self) -> None:
        if self.phase is Phase.SETUP and not self._offered:
            self.phase = Phase.MIXING if self._pairs else Phase.CLEAR


def _check_weight(weight: object, what: str) -> None:
    if isinstance(weight, bool) or not isinstance(weight, int | float) \
            or not (math.isfinite(weight) and weight > 0):
        raise InvalidValues(f"{what}: expected a positive finite weight, got {weight!r}")


__all__ = [
    "GAUSSIAN_TAIL",
    "MASK_MESSAGES",
    "MIN_HIDING_HOLDERS",
    "PUBLIC_KEY_BYTES",
    "VALUE_BOUND",
    "EpochSettings",
    "MaskEpochs",
    "PairAccept",
    "PairOffer",
    "Phase",
    "hiding_warning",
    "magnitude_bound",
    "noise_bound",
    "new_private_key",
    "pair_noise",
    "pair_secret",
    "pair_seed",
    "public_bytes",
]
