"""Peer sampling under the Sybil rules (:class:`SybilRules`): what fake identities cannot do.

Views are rank samplers (:class:`RankedView`), so flooding gains nothing beyond
the number of identities; a new id occupies a slot only once its address
answered a probe with that id (:meth:`SybilGuard.probes`); descriptors that
arrive in other nodes' requests are unsolicited, capped per sender and per
period, and probed after the ones this node pulled itself (docs/design/trust.md,
"Fake identities").  :class:`SybilGuard` holds that state for one sampler.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

from .descriptor import Descriptor
from .messages import ShuffleReply, ShuffleRequest
from .ranked import RankedView
from .rules import SybilRules
from .stats import SamplerStats
from .view_set import ViewSet

log = logging.getLogger("peersampling.core")  # the sampler's logger

#: (model, the asking node's id) -> holders to name in a lookup's answer
KnownHolders = Callable[[bytes, bytes], list[Descriptor]]


class SybilGuard:
    """Unsolicited caps, probes and proven addresses of one sampler."""

    def __init__(self, rules: SybilRules, c: int, l: int,  # noqa: E741 - as PeerSampler
                 views: ViewSet, stats: SamplerStats) -> None:
        self.rules = rules
        self.l = l
        self.per_source = l if rules.unsolicited_per_source is None \
            else rules.unsolicited_per_source
        self.per_period = 4 * l if rules.unsolicited_per_period is None \
            else rules.unsolicited_per_period
        self.reset_every = 4 * c if rules.reset_every is None else rules.reset_every
        self._views = views
        self._stats = stats
        # unsolicited descriptors taken this period, per (sender, view) and per view
        self._pushed: dict[tuple[bytes, bytes | None], int] = {}
        self._pushed_total: dict[bytes | None, int] = {}
        # address -> (expected node id, probe request) of probes awaiting a reply
        self.probing: dict[str, tuple[bytes, ShuffleRequest]] = {}
        # node id -> the address that answered us with that id (signed)
        self.proven: dict[bytes, str] = {}

    def new_period(self, turn: int, rng: random.Random) -> None:
        """A period starts (``turn``: the period plus this node's phase): the caps refill,
        and every ``reset_every`` periods one slot of each view gets a new seed."""
        self._pushed.clear()
        self._pushed_total.clear()
        if self.reset_every and turn % self.reset_every == 0:
            for v in self._views.every():
                if isinstance(v, RankedView):
                    v.reset_slot(rng)

    def request(self, sender: Descriptor, entries: list[Descriptor], model: bytes | None,
                me: Descriptor, period: int, rng: random.Random,
                known_holders: KnownHolders) -> ShuffleReply:
        """:meth:`PeerSampler.on_request` under the rules.

        What a request offers is unsolicited: at most ``unsolicited_per_source``
        descriptors per sender and ``unsolicited_per_period`` in all are taken
        per view and period (the rest are dropped and counted); each taken one
        is only a candidate until probed (unless its address already proved
        that id). The reply always starts with this node's own descriptor, so
        every answer doubles as a proof of identity at this address.
        """
        offered = [sender, *entries]
        src = (sender.node_id, model)
        room = min(self.per_source - self._pushed.get(src, 0),
                   self.per_period - self._pushed_total.get(model, 0))
        room = max(room, 0)
        if room < len(offered):
            self._stats.unsolicited_dropped += len(offered) - room
            offered = offered[:room]
        self._pushed[src] = self._pushed.get(src, 0) + len(offered)
        self._pushed_total[model] = self._pushed_total.get(model, 0) + len(offered)
        proven = self.proven
        views = self._views
        view = views.of(model)
        main = views.main
        assert isinstance(main, RankedView)
        for d in offered:
            known = proven.get(d.node_id) == d.address
            if model is None:
                main.consider(d, proven=known, pulled=False)
            views.observe(d, period, fresh=known, pulled=False)  # model views and holder cache
        if view is None:
            assert model is not None
            return ShuffleReply(tuple(known_holders(model, sender.node_id)), model)
        reply = [me, *view.random_subset(rng, self.l - 1, exclude=sender.node_id)]
        return ShuffleReply(tuple(reply), model)

    def reply(self, address: str, req: ShuffleRequest, received: list[Descriptor],
              period: int) -> None:
        """:meth:`PeerSampler.on_reply` under the rules: what we pulled, and probe results.

        The responder's own descriptor (at the address we contacted, signature
        checked) proves that id at that address; everything else it sent is
        a pulled candidate.
        """
        probe = self.probing.get(address)
        if probe is not None and probe[1] is req:
            del self.probing[address]
            if not any(d.node_id == probe[0] and d.address == address for d in received):
                self._stats.probes_failed += 1
                log.info("probe of %s: no signed descriptor for the expected id", address)
        views = self._views
        main = views.main
        assert isinstance(main, RankedView)
        for d in received:
            proven = d.address == address or self.proven.get(d.node_id) == d.address
            if proven:
                self.proven[d.node_id] = d.address
            if d.address == address or req.view is None:
                main.consider(d, proven=proven)
            views.observe(d, period, fresh=proven)  # model views and holder cache

    def probes(self, me: Descriptor, failed: dict[str, int],
               period: int) -> list[tuple[str, ShuffleRequest]]:
        """This period's identity and liveness probes.

        A probe is a request with no entries: the target answers with its own
        signed descriptor, which must name the expected id at the probed
        address. Candidates this node pulled go first; at most
        ``pushed_probes_per_period`` go to ones learnt from others' requests.
        """
        rules = self.rules
        budget, pushed = rules.probes_per_period, rules.pushed_probes_per_period
        out: list[tuple[str, ShuffleRequest]] = []
        for view in self._views.every():
            if budget <= 0:
                break
            if not isinstance(view, RankedView) or not view.has_candidates():
                continue
            for d, pulled in view.take_candidates(budget, pushed=pushed):
                if self.proven.get(d.node_id) == d.address:
                    self.learn(d, period, proven=True, pulled=pulled)  # proven meanwhile
                    continue
                if d.address in self.probing or d.address in failed:
                    continue
                req = ShuffleRequest(me, (), None)
                self.probing[d.address] = (d.node_id, req)
                out.append((d.address, req))
                budget -= 1
                if not pulled:
                    pushed -= 1
        self._stats.probes_sent += len(out)
        return out

    def learn(self, d: Descriptor, period: int, *, proven: bool, pulled: bool) -> None:
        """Offer ``d`` to the main view and every model view it belongs to."""
        if proven:
            self.proven[d.node_id] = d.address
        main = self._views.main
        assert isinstance(main, RankedView)
        main.consider(d, proven=proven, pulled=pulled)
        self._views.observe(d, period, fresh=proven, pulled=pulled)

    def failed(self, address: str, req: ShuffleRequest | None) -> None:
        """``address`` did not answer (``req``, if given): its probe failed, its proofs go."""
        probe = self.probing.get(address)
        if probe is not None and (req is None or probe[1] is req):
            del self.probing[address]
            self._stats.probes_failed += 1
        if self.proven:
            for n in [n for n, a in self.proven.items() if a == address]:
                del self.proven[n]

    def forget(self, node_id: bytes) -> None:
        """``node_id`` is distrusted: its proof goes."""
        self.proven.pop(node_id, None)

    def prune(self, known: set[str], limit: int) -> None:
        """Past ``limit`` proofs, keep those of addresses a view holds."""
        if len(self.proven) > limit:
            self.proven = {n: a for n, a in self.proven.items() if a in known}
