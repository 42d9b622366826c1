"""Plain Cyclon's merge of what a shuffle brings, without the Sybil rules.

The responder answers with up to ``l`` entries of the view the request names
(itself too when it has little to give, so small views keep their links) and
merges what it was offered in place of what it sent; the initiator merges
the answer in place of the entries it sent and keeps the target, which just
answered, if there is room.  Descriptors that name a model also feed the
model views and the holder cache (:meth:`ViewSet.observe`).  Under the Sybil
rules :mod:`.sybil_guard` does this instead.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from .descriptor import Descriptor, with_age
from .messages import ShuffleReply, ShuffleRequest, new_reply
from .view_set import ViewSet

#: (model, the asking node's id) -> holders to name in a lookup's answer
KnownHolders = Callable[[bytes, bytes], list[Descriptor]]


class CyclonMerge:
    """Plain Cyclon exchanges of one sampler (see the module docstring)."""

    def __init__(self, l: int, views: ViewSet,  # noqa: E741 - as PeerSampler
                 in_flight: dict[bytes | None, Descriptor], rng: random.Random) -> None:
        self.l = l
        self._views = views
        # the sampler's shuffle targets awaiting a reply, per view key
        self._in_flight = in_flight
        self._rng = rng

    def request(self, sender: Descriptor, entries: list[Descriptor], model: bytes | None,
                me: Descriptor, period: int, known_holders: KnownHolders) -> ShuffleReply:
        """Answer a checked request of ``sender`` offering ``entries`` for view ``model``."""
        views = self._views
        offered = [sender, *entries]
        models = views.models
        # observe only acts on tags and model views: skip the call without either
        if models or sender.tags:
            views.observe(sender, period, fresh=True)
        for d in entries:
            if models or d.tags:
                views.observe(d, period)
        length = self.l
        view = views.of(model)
        if view is None:
            # Holder lookup at a node that does not hold the model.
            assert model is not None
            return ShuffleReply(tuple(known_holders(model, sender.node_id)), model)
        reply = view.random_subset(self._rng, length, exclude=sender.node_id)
        if not entries or len(reply) < length:
            # The initiator knows nobody else here, or we have little to give:
            # offer ourselves too, so that small views (a model held by a few
            # nodes, a fresh joiner) keep their links instead of passing them on.
            reply = [me, *reply[: length - 1]]
        if model is not None:
            offered = [d for d in offered if model in d.tags]
        view.merge(offered, [d.node_id for d in reply], sender.node_id)
        return new_reply(tuple(reply), model)

    def reply(self, address: str, req: ShuffleRequest, received: list[Descriptor],
              period: int) -> None:
        """Merge the checked answer ``address`` gave to ``req`` (which we sent)."""
        views = self._views
        # The responder may include itself: that copy is first-hand news.
        responder = None
        for d in received:
            if d.address == address:
                responder = d.node_id
                break
        models = views.models
        for d in received:
            if models or d.tags:  # observe acts on tags and model views only
                views.observe(d, period, fresh=d.node_id == responder)
        sent = [d.node_id for d in req.entries]
        target = self._in_flight.get(req.view)
        if target is not None and target.address == address:
            del self._in_flight[req.view]
        else:
            target = None
        view = views.of(req.view)
        if view is None:  # we may have dropped the model meanwhile
            return
        if req.view is None:
            view.merge(received, sent, responder)
        else:
            view.merge([d for d in received if req.view in d.tags], sent, responder)
        if target is not None and (target.node_id in view or not view.is_full):
            # It just answered, so it is alive: keep it if there is room
            # (only small views have room; full ones behave as plain Cyclon,
            # and a full view that does not know it would refuse the offer).
            view.offer(with_age(target, 0))
