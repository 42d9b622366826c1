"""The node's masking epochs: pair agreements over its sessions (trio glue).

One :class:`~gossip.masking.epochs.MaskEpochs` per shared model runs the protocol
(sans-IO); this module moves its messages and applies the mass vectors it returns
to the model's push-sum core. The gossip driver calls it through the
:class:`~gossip.driver.EpochHook` steps: ``prepare`` (after a round: offer pairs
when an epoch is due and no push awaits an ack; an unsure offer is resent with
the same key), ``pushed`` (the share that left), ``settle`` (the core folded:
epoch over) and ``unreachable`` (a lost partner: our side of its pairs is
removed). :meth:`NodeMasking.on_offer` answers a peer's
:class:`~gossip.masking.epochs.PairOffer`; the node serves offers through
:class:`~p2p.runtime.masking.host.NodeMaskingHost`.

How it works: docs/design/gossip.md ("Masking epochs").
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import trio

from gossip import PushSum
from gossip.driver import Holders
from gossip.errors import InvalidValues, PushRefused, PushUndelivered
from gossip.masking.epochs import EpochSettings, MaskEpochs, PairAccept, PairOffer, hiding_warning
from p2p.runtime.entropy import Entropy, generator_for
from p2p.runtime.node_transport import Requester
from p2p.runtime.transport_adapters import request_as_gossip

log = logging.getLogger(__name__)

#: Sends of one offer before its partner is taken as lost (unsure deliveries only).
OFFER_ATTEMPTS = 3
#: Failed pushes in a row after which a pair partner is taken as lost.
LOST_AFTER_FAILURES = 3

# (peer, offer) -> the peer's accept; raises PushRefused / PushUndelivered
SendOffer = Callable[[bytes, PairOffer], Awaitable[PairAccept]]


@dataclass(frozen=True)
class EpochStatus:
    """One model's masking state, as ``p2p status`` shows it."""

    phase: str
    epoch: int
    pairs: int
    folds: int
    removed: int
    refused: int
    holders: int
    warning: str | None
    forced_folds: int = 0  # folds made by the max_noisy_rounds bound

    def as_dict(self) -> dict[str, object]:
        """Plain data for the admin reply."""
        return {"phase": self.phase, "epoch": self.epoch, "pairs": self.pairs,
                "folds": self.folds, "removed": self.removed, "refused": self.refused,
                "holders": self.holders, "warning": self.warning,
                "forced_folds": self.forced_folds}


class NodeMasking:
    """Masking epochs of every shared model of one node (see the module docstring)."""

    def __init__(self, node_id: bytes, settings: EpochSettings, cores: Mapping[str, PushSum],
                 holders: Holders, send_offer: SendOffer,
                 holder_count: Callable[[bytes], int], *, entropy: Entropy | None = None) -> None:
        """``holders``: sampled holders of a model (as the driver's);
        ``holder_count``: how many holders of a model the node knows (itself excluded);
        ``entropy``: the ephemeral keys' source (None: the OS, as a daemon)."""
        self.node_id = node_id
        self.settings = settings
        self._cores = cores
        self._holders = holders
        self._send_offer = send_offer
        self._holder_count = holder_count
        self._entropy = entropy
        self._epochs: dict[str, MaskEpochs] = {}
        self._unmasks: dict[str, int] = {}  # each core's fold count at the last settle
        self._names = {core.fingerprint: name for name, core in cores.items()}

    def epochs(self, name: str) -> MaskEpochs:
        """The epochs of model ``name`` (created on first use: models may be added)."""
        ep = self._epochs.get(name)
        if ep is None:
            core = self._cores[name]
            ep = MaskEpochs(self.node_id, core.fingerprint, core.length, self.settings,
                            generator_for(self._entropy, f"masking:{name}"))
            core.boundary_fold_age = self.settings.boundary_fold_age
            self._epochs[name] = ep
            self._names[core.fingerprint] = name
        return ep

    # ------------------------------------------------------- driver steps
    async def prepare(self, name: str, core: PushSum) -> None:
        """A training round ended: start an epoch of ``name`` if one is due (returns once
        every offer is answered or its partner given up)."""
        ep = self.epochs(name)
        self._sync(name, core)
        ep.on_round(core.noisy)
        if ep.fold_overdue and core.fold_noise():
            log.warning("model %s: noise held %d rounds in a row (a peer claiming young "
                        "noise?): folded now", name, ep.noisy_rounds)
            ep.on_forced_fold()
            self._sync(name, core)
        # Pushes in flight do not hold an epoch back (a peer that never answers would
        # hold it back for good): pairs are sized on the weight not promised to them,
        # and a push made before a pair carries none of its side (note_pushed).
        if not ep.ready(core.noisy, core.noise_age):
            return
        # spares: a partner that refuses (noise too old) is replaced by none, so ask
        # for the holders we would like and take what we get
        candidates = self._holders(core.fingerprint, self.settings.partners)
        offers = ep.start(list(candidates), core.available_weight)
        if not offers:
            return
        log.debug("model %s: masking epoch %d, offering pairs to %d holders", name, ep.epoch,
                  len(offers))
        async with trio.open_nursery() as nursery:
            for peer, offer in offers:
                nursery.start_soon(self._agree, name, core, ep, peer, offer)

    async def _agree(self, name: str, core: PushSum, ep: MaskEpochs, peer: bytes,
                     offer: PairOffer) -> None:
        for _ in range(OFFER_ATTEMPTS):
            try:
                accept = await self._send_offer(peer, offer)
            except PushRefused as exc:
                # the peer answered without applying a side (too busy, noise too old)
                log.debug("pair offer for %s refused by %s: %s", name, peer[:4].hex(), exc)
                ep.offer_failed(peer)
                return
            except PushUndelivered as exc:
                if not exc.maybe_delivered:
                    ep.offer_failed(peer)
                    return
                continue  # maybe applied there: the same offer again
            self._sync(name, core)
            try:
                side = ep.on_accept(peer, accept, next_push_id=core.next_push_id)
            except InvalidValues as exc:
                log.warning("bad pair accept from %s for %s: %s", peer[:4].hex(), name, exc)
                ep.offer_failed(peer)
                return
            core.add_noise_mass(side)
            return
        # it may hold its side of a pair we never completed: as for a crash, we hold none
        log.info("pair offer for %s to %s unanswered after %d sends; partner taken as lost",
                 name, peer[:4].hex(), OFFER_ATTEMPTS)
        self._lost(name, core, ep, peer)

    def pushed(self, name: str, peer: bytes, fraction: float, push_id: int) -> None:
        """Push ``push_id`` of ``name`` to ``peer`` was acknowledged; it took ``fraction``
        of our mass as it was when made."""
        self.epochs(name).note_pushed(peer, fraction, push_id)

    def settle(self, name: str, core: PushSum) -> None:
        """After a wave: once the core has folded, the epoch's pairs are over."""
        self._sync(name, core)
        if not core.noisy:
            self.epochs(name).on_folded()

    def _sync(self, name: str, core: PushSum) -> None:
        """Close the epoch if the core folded since we last looked (a fold at a merge,
        ``PushSum.boundary_fold_age``, may be followed by fresh noise before a settle):
        called before any new pair is applied, so a fold never clears a newer pair."""
        unmasks = core.counters.unmasks
        if unmasks != self._unmasks.get(name, unmasks):
            self.epochs(name).on_folded()
        self._unmasks[name] = unmasks

    def unreachable(self, peer: bytes, *, surely: bool, failures: int) -> None:
        """A push to ``peer`` got no answer: a pair partner that surely did not get it, or
        that failed ``LOST_AFTER_FAILURES`` times in a row, is taken as lost."""
        if not surely and failures < LOST_AFTER_FAILURES:
            return
        for name, ep in self._epochs.items():
            if ep.pairs_with(peer) or peer in ep.pending_offers:
                self._lost(name, self._cores[name], ep, peer)

    def _lost(self, name: str, core: PushSum, ep: MaskEpochs, peer: bytes) -> None:
        back = ep.partner_lost(peer)
        if back is not None:
            core.add_noise_mass(back, fresh=False)
            log.info("model %s: partner %s lost, our side of its pairs removed", name,
                     peer[:4].hex())

    # --------------------------------------------------------- serving
    def on_offer(self, peer: bytes, offer: PairOffer) -> PairAccept:
        """A peer offers a pair: apply our side and answer (InvalidValues: refused)."""
        name = self._names.get(offer.model)
        if name is None:  # a model added since (automatic groups)
            self._names = {core.fingerprint: n for n, core in self._cores.items()}
            name = self._names.get(offer.model)
        if name is None or name not in self._cores:
            raise InvalidValues("offer: this node does not hold that model")
        core = self._cores[name]
        self._sync(name, core)
        # sized on the weight not promised to pushes in flight: acks only lower it
        accept, side = self.epochs(name).on_offer(peer, offer, core.available_weight,
                                                  noisy=core.noisy, noise_age=core.noise_age,
                                                  next_push_id=core.next_push_id)
        if side is not None:
            core.add_noise_mass(side)
        return accept

    # --------------------------------------------------------- status
    def status(self) -> dict[str, dict[str, object]]:
        """Model name -> its masking state (``p2p status``)."""
        out = {}
        for name, core in self._cores.items():
            ep = self.epochs(name)
            holders = self._holder_count(core.fingerprint) + 1
            out[name] = EpochStatus(
                phase=ep.phase.value, epoch=ep.epoch, pairs=ep.live_pairs, folds=ep.folds,
                removed=ep.removed_exact + ep.removed_mixing, refused=ep.refused,
                holders=holders,
                warning=hiding_warning(holders) if holders >= 2 else None,
                forced_folds=ep.forced_folds).as_dict()
        return out




class OfferOverTransport:
    """Sends pair offers over the node's requester (peers are node ids, failures are
    :class:`PushRefused` / :class:`PushUndelivered`, as for pushes)."""

    def __init__(self, transport: Requester, addresses: Mapping[bytes, str], *,
                 timeout: float) -> None:
        self._transport = transport
        self._addresses = addresses
        self._timeout = timeout

    async def __call__(self, peer: bytes, offer: PairOffer) -> PairAccept:
        """The peer's accept of ``offer``."""
        return await request_as_gossip(self._transport, self._addresses, peer, offer,
                                       PairAccept, timeout=self._timeout)


__all__ = ["LOST_AFTER_FAILURES", "OFFER_ATTEMPTS", "EpochStatus", "NodeMasking",
           "OfferOverTransport", "SendOffer"]
