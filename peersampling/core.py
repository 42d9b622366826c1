"""Sans-IO Cyclon-style peer sampling with per-model holder views.

:class:`PeerSampler` holds no sockets and no clock: callers hand it messages,
the current time and a seeded :class:`random.Random`, and it returns what to
send. The same object runs under the trio driver (:mod:`peersampling.driver`)
and inside the in-process simulator (:mod:`peersampling.simulator`).

Protocol (Voulgaris et al., "CYCLON", 2005), once per period:

1. age every entry by one;
2. remove the oldest entry Q and send it ``l - 1`` random other entries plus
   a fresh (age 0) self-descriptor;
3. Q answers with up to ``l`` random entries of its own and merges what it got;
4. the initiator merges the answer: known entries only get refreshed, new
   ones fill empty slots, then replace the entries it sent.

A peer that does not answer is dropped everywhere. The same exchange runs in a
second view per partial model the node holds, restricted to holders of that
model. A node whose model view is empty (or not full, now and then) asks a
random main-view peer for holders: every node keeps a small cache of holders
it has seen (:class:`HolderDirectory`) to answer such lookups.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TypedDict

from .descriptor import (
    MAX_AGE,
    MAX_TAGS,
    TAG_LENGTH,
    Descriptor,
    parse_address,
    validate_descriptor,
    with_age,
)
from .directory import HolderDirectory
from .errors import InvalidDescriptor, InvalidMessage
from .messages import ShuffleReply, ShuffleRequest
from .view import PartialView

log = logging.getLogger(__name__)


@dataclass
class SamplerStats:
    """Counters for the admin ``peers`` command (monotonic since start)."""

    shuffles_sent: int = 0
    shuffles_received: int = 0
    shuffles_failed: int = 0
    replies_received: int = 0
    lookups_sent: int = 0
    bootstrap_attempts: int = 0
    messages_rejected: int = 0
    descriptors_rejected: int = 0


class SamplerTuning(TypedDict, total=False):
    """The optional keyword options of :class:`PeerSampler` beyond ``c``, ``l`` and ``rng``."""

    model_view_size: int | None
    max_entries: int | None
    max_age: int
    lookups: bool
    lookup_every: int
    lookup_fanout: int
    retries: int
    directory_tags: int


@dataclass(frozen=True)
class PeerEntry:
    """One row of the ``peers`` table: an entry of the main or a model view."""

    view: bytes | None  # None = main view, else the model fingerprint
    descriptor: Descriptor
    last_contact: float | None  # when this address last answered or called us


class PeerSampler:
    """Cyclon peer sampling plus one holder view per partial model held.

    ``self_descriptor`` names this node (its ``tags`` are the models it holds;
    its ``age`` is ignored). ``c`` is the view size, ``l`` the shuffle length.
    ``model_view_size`` defaults to ``c``; ``max_entries`` (default
    ``max(4 * l, 32)``) bounds the entries accepted in one message; larger
    messages are dropped whole. ``lookups`` enables asking random main-view
    peers for holders: ``lookup_fanout`` peers every period while a model view
    is empty, one peer every ``lookup_every`` periods while it is not full.
    ``retries`` bounds the replacement shuffles :meth:`on_failure` offers per
    view and period (0 = plain Cyclon: one exchange per view and period).
    """

    def __init__(
        self,
        self_descriptor: Descriptor,
        *,
        c: int = 20,
        l: int = 5,  # noqa: E741 - the protocol's name for the shuffle length
        rng: random.Random,
        model_view_size: int | None = None,
        max_entries: int | None = None,
        max_age: int = MAX_AGE,
        lookups: bool = True,
        lookup_every: int = 4,
        lookup_fanout: int = 3,
        retries: int = 1,
        directory_tags: int = 256,
    ) -> None:
        if not isinstance(c, int) or c < 1:
            raise ValueError(f"c (view size) must be an int >= 1, got {c!r}")
        if not isinstance(l, int) or not 1 <= l <= c:
            raise ValueError(f"l (shuffle length) must be an int in 1..c={c}, got {l!r}")
        if not isinstance(rng, random.Random):
            raise TypeError(f"rng must be a random.Random, got {type(rng).__name__}")
        if lookup_every < 1:
            raise ValueError(f"lookup_every must be >= 1, got {lookup_every}")
        if lookup_fanout < 1:
            raise ValueError(f"lookup_fanout must be >= 1, got {lookup_fanout}")
        me = validate_descriptor(self_descriptor, max_age=max_age)
        self.c = c
        self.l = l
        self.rng = rng
        self.model_view_size = model_view_size if model_view_size is not None else c
        if self.model_view_size < 1:
            raise ValueError(f"model_view_size must be >= 1, got {model_view_size}")
        self.max_entries = max_entries if max_entries is not None else max(4 * l, 32)
        self.max_age = max_age
        self.lookups = lookups
        self.lookup_every = lookup_every
        self.lookup_fanout = lookup_fanout
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.retries = retries
        self._round_shuffles: dict[bytes | None, ShuffleRequest] = {}
        # Shuffle targets taken out of a view and awaiting a reply, per view key:
        # still known (and sampled from an otherwise empty view) until then, so
        # a holder group of two never looks empty while its members talk.
        self._in_flight: dict[bytes | None, Descriptor] = {}
        self._retries_left: dict[bytes | None, int] = {}
        self._me = replace(me, age=0)
        self._view = PartialView(c)
        self._models: dict[bytes, PartialView] = {}
        self._directory = HolderDirectory(max_tags=directory_tags, per_tag=2 * l, max_age=2 * c)
        self._bootstrap: list[str] = []
        self._bootstrap_next = 0
        self._period = 0
        self._lookup_phase = rng.randrange(lookup_every)
        self._last_contact: dict[str, float] = {}
        # address -> period it failed: second-hand copies older than the failure
        # are ignored, so a dead peer's descriptor cannot bounce back in.
        self._failed: dict[str, int] = {}
        self._stats = SamplerStats()
        self._sync_model_views()

    # ------------------------------------------------------------------ identity

    @property
    def self_descriptor(self) -> Descriptor:
        """This node's fresh descriptor (age 0, current tags)."""
        return self._me

    @property
    def node_id(self) -> bytes:
        return self._me.node_id

    @property
    def models(self) -> frozenset[bytes]:
        """Fingerprints of the partial models this node holds."""
        return self._me.tags

    def set_tags(self, tags: Iterable[bytes]) -> None:
        """Change the models this node holds; model views follow.

        A new model's view is seeded from the main view and the holder cache.
        Raises :class:`InvalidDescriptor` (field ``tags``) on a bad fingerprint.
        """
        me = validate_descriptor(replace(self._me, tags=frozenset(tags)), max_age=self.max_age)
        self._me = me
        self._sync_model_views()

    def set_address(self, address: str) -> None:
        """Change the address advertised for this node."""
        parse_address(address)
        self._me = replace(self._me, address=address)

    def _sync_model_views(self) -> None:
        wanted = sorted(self._me.tags)  # sorted: iteration order must not depend on hashing
        old = self._models
        self._models = {m: old.get(m) or PartialView(self.model_view_size) for m in wanted}
        for m in wanted:
            if m in old:
                continue
            self._directory.forget_tag(m)  # kept in the model view from now on
            view = self._models[m]
            for d in self._view.descriptors():
                if m in d.tags:
                    view.offer(d)

    # ----------------------------------------------------------------- bootstrap

    def bootstrap(self, addresses: Sequence[str]) -> None:
        """Remember addresses to contact while the node knows no peer.

        Raises :class:`InvalidDescriptor` (field ``address``) for a malformed
        address; this node's own address is skipped.
        """
        clean: list[str] = []
        for address in addresses:
            parse_address(address)
            if address != self._me.address and address not in clean:
                clean.append(address)
        self._bootstrap = clean
        self.rng.shuffle(self._bootstrap)
        self._bootstrap_next = 0

    @property
    def bootstrap_addresses(self) -> list[str]:
        return list(self._bootstrap)

    @property
    def is_isolated(self) -> bool:
        """True while the node knows no peer at all (main and model views empty)."""
        return (not self._view and not any(self._models.values())
                and not self._in_flight)

    # ------------------------------------------------------------------- queries

    def view(self) -> list[Descriptor]:
        """The main view (copies, with current ages)."""
        return self._view.descriptors()

    def model_view(self, model: bytes) -> list[Descriptor]:
        """The holders of ``model`` known to this node ([] if it does not hold it)."""
        v = self._models.get(model)
        return v.descriptors() if v is not None else []

    def sample(self, model: bytes | None = None) -> Descriptor | None:
        """A random peer (``model=None``) or a random known holder of ``model``.

        Returns ``None`` when no such peer is known.
        """
        v = self._view if model is None else self._models.get(model)
        if v is None:
            return None
        d = v.random_entry(self.rng)
        return d if d is not None else self._in_flight.get(model)

    @property
    def stats(self) -> SamplerStats:
        """A copy of the counters."""
        return replace(self._stats)

    @property
    def period(self) -> int:
        """Number of rounds started so far."""
        return self._period

    def peer_entries(self) -> list[PeerEntry]:
        """Every entry of every view with its last contact time (for ``peers``)."""
        rows = [
            PeerEntry(None, d, self._last_contact.get(d.address)) for d in self._view.descriptors()
        ]
        for m, v in self._models.items():
            rows.extend(PeerEntry(m, d, self._last_contact.get(d.address)) for d in v.descriptors())
        return rows

    # ------------------------------------------------------------------ rounds

    def start_shuffles(self, now: float) -> list[tuple[str, ShuffleRequest]]:
        """Begin one period: age the views and return the requests to send.

        One request for the main view (to a bootstrap address, or to a
        model-view peer, while the main view is empty) and one per non-empty
        model view, plus holder lookups for model views that need partners.
        """
        self._period += 1
        rng, me = self.rng, self._me
        out: list[tuple[str, ShuffleRequest]] = []
        self._view.increase_age()
        for v in self._models.values():
            v.increase_age()

        # Holder lookups go to random main-view peers, chosen before the
        # main shuffle takes its target out of the view.
        lookup_turn = (self._period + self._lookup_phase) % self.lookup_every == 0
        lookups: list[tuple[str, ShuffleRequest]] = []
        if self.lookups and self._view:
            for m, v in self._models.items():
                if not v:
                    fanout = self.lookup_fanout
                elif lookup_turn and len(v) < v.capacity:
                    fanout = 1
                else:
                    continue
                for peer in self._view.random_subset(rng, fanout):
                    lookups.append((peer.address, ShuffleRequest(me, (), m)))

        self._round_shuffles = {}
        self._retries_left = {}
        shuffle = self._shuffle_oldest(None, self._view)
        if shuffle is not None:
            out.append(shuffle)
        else:
            address = self._fallback_contact()
            if address is not None:
                out.append((address, ShuffleRequest(me, (), None)))

        for m, v in self._models.items():
            shuffle = self._shuffle_oldest(m, v)
            if shuffle is not None:
                out.append(shuffle)
        out.extend(lookups)
        self._stats.lookups_sent += len(lookups)
        self._stats.shuffles_sent += len(out)
        if self._period % 32 == 0:
            self._prune_contacts()
        return out

    def _shuffle_oldest(
        self, key: bytes | None, view: PartialView
    ) -> tuple[str, ShuffleRequest] | None:
        """Take the oldest entry out of ``view`` and build the shuffle for it."""
        q = view.oldest(self.rng)
        if q is None:
            return None
        target = view.pop(q)
        assert target is not None
        entries = tuple(view.random_subset(self.rng, self.l - 1))
        req = ShuffleRequest(self._me, entries, key)
        self._round_shuffles[key] = req
        self._in_flight[key] = target
        return target.address, req

    def _fallback_contact(self) -> str | None:
        """Whom to ask for a main view when it is empty."""
        for v in self._models.values():
            d = v.random_entry(self.rng)
            if d is not None:
                return d.address
        if not self._bootstrap:
            return None
        address = self._bootstrap[self._bootstrap_next % len(self._bootstrap)]
        self._bootstrap_next += 1
        self._stats.bootstrap_attempts += 1
        return address

    def _prune_contacts(self) -> None:
        horizon = self._period - 2 * self.c
        self._failed = {a: p for a, p in self._failed.items() if p > horizon}
        known = set(self._view.addresses())
        for v in self._models.values():
            known.update(v.addresses())
        self._last_contact = {a: t for a, t in self._last_contact.items() if a in known}

    # --------------------------------------------------------------- responder

    def on_request(self, req: ShuffleRequest, now: float) -> ShuffleReply:
        """Answer a peer's shuffle and merge what it offered.

        A malformed request gets an empty reply and changes nothing.
        """
        self._stats.shuffles_received += 1
        try:
            sender, entries, model = self._check_request(req)
        except InvalidMessage as exc:
            self._stats.messages_rejected += 1
            log.warning("dropped shuffle request: %s", exc)
            return ShuffleReply((), None)
        self._last_contact[sender.address] = now
        self._failed.pop(sender.address, None)  # it is talking to us: alive
        offered = [sender, *entries]
        self._observe(sender, fresh=True)
        for d in entries:
            self._observe(d)
        rng, length = self.rng, self.l
        if model is None:
            view: PartialView | None = self._view
        else:
            view = self._models.get(model)
        if view is None:
            # Holder lookup at a node that does not hold the model.
            assert model is not None
            return ShuffleReply(tuple(self._known_holders(model, sender.node_id)), model)
        reply = view.random_subset(rng, length, exclude=sender.node_id)
        if not entries or len(reply) < length:
            # The initiator knows nobody else here, or we have little to give:
            # offer ourselves too, so that small views (a model held by a few
            # nodes, a fresh joiner) keep their links instead of passing them on.
            reply = [self._me, *reply[: length - 1]]
        if model is not None:
            offered = [d for d in offered if model in d.tags]
        view.merge(offered, [d.node_id for d in reply], sender.node_id)
        return ShuffleReply(tuple(reply), model)

    def _known_holders(self, model: bytes, exclude: bytes) -> list[Descriptor]:
        found = self._directory.holders(model, self._period, self.l, exclude)
        if len(found) < self.l:
            seen = {d.node_id for d in found}
            for d in self._view.descriptors():
                if model in d.tags and d.node_id != exclude and d.node_id not in seen:
                    found.append(d)
                    if len(found) >= self.l:
                        break
        return found

    # --------------------------------------------------------------- initiator

    def on_reply(self, address: str, req: ShuffleRequest, reply: ShuffleReply, now: float) -> None:
        """Merge the answer ``address`` gave to ``req`` (which we sent)."""
        self._stats.replies_received += 1
        try:
            received = self._check_reply(req, reply)
        except InvalidMessage as exc:
            self._stats.messages_rejected += 1
            log.warning("dropped shuffle reply from %s: %s", address, exc)
            return
        self._last_contact[address] = now
        # The responder may include itself: that copy is first-hand news.
        responder = next((d.node_id for d in received if d.address == address), None)
        for d in received:
            self._observe(d, fresh=d.node_id == responder)
        sent = [d.node_id for d in req.entries]
        target = self._in_flight.get(req.view)
        if target is not None and target.address == address:
            del self._in_flight[req.view]
        else:
            target = None
        view = self._view if req.view is None else self._models.get(req.view)
        if view is None:  # we may have dropped the model meanwhile
            return
        if req.view is None:
            view.merge(received, sent, responder)
        else:
            view.merge([d for d in received if req.view in d.tags], sent, responder)
        if target is not None:
            # It just answered, so it is alive: keep it if there is room
            # (only small views have room; full ones behave as plain Cyclon).
            view.offer(with_age(target, 0))

    def on_failure(
        self, address: str, req: ShuffleRequest | None = None
    ) -> list[tuple[str, ShuffleRequest]]:
        """``address`` did not answer: drop it from every view.

        If ``req`` was this period's shuffle of a view, a replacement shuffle
        with the next-oldest entry is returned (at most ``retries`` per view
        and period; callers may ignore it). Dead entries are the oldest after
        a crash, so this roughly doubles the rate at which they are purged.
        """
        self._stats.shuffles_failed += 1
        for key, target in list(self._in_flight.items()):
            if target.address == address:
                del self._in_flight[key]
        self._view.remove_address(address)
        for v in self._models.values():
            v.remove_address(address)
        self._directory.forget_address(address)
        self._last_contact.pop(address, None)
        self._failed[address] = self._period
        if req is None or self._round_shuffles.get(req.view) is not req:
            return []
        left = self._retries_left.get(req.view, self.retries)
        view = self._view if req.view is None else self._models.get(req.view)
        if left <= 0 or view is None:
            return []
        self._retries_left[req.view] = left - 1
        shuffle = self._shuffle_oldest(req.view, view)
        if shuffle is None:
            return []
        self._stats.shuffles_sent += 1
        return [shuffle]

    # ------------------------------------------------------------- persistence

    def snapshot(self) -> list[Descriptor]:
        """Every known peer (main view first, then model views), for a checkpoint."""
        out = self._view.descriptors()
        seen = {d.node_id for d in out}
        for v in self._models.values():
            for d in v.descriptors():
                if d.node_id not in seen:
                    seen.add(d.node_id)
                    out.append(d)
        return out

    def restore(self, descriptors: Iterable[object]) -> int:
        """Reload peers from :meth:`snapshot` output; bad entries are skipped.

        Returns the number of descriptors accepted.
        """
        accepted = 0
        for raw in descriptors:
            try:
                d = self._accept(raw)
            except InvalidDescriptor as exc:
                self._stats.descriptors_rejected += 1
                log.warning("skipped checkpointed peer: %s", exc)
                continue
            if d is None:
                continue
            accepted += 1
            self._view.offer(d)
            self._observe(d)
        return accepted

    # ------------------------------------------------------------- validation

    def _observe(self, d: Descriptor, *, fresh: bool = False) -> None:
        """Feed one valid descriptor to the model views and the holder cache.

        ``fresh``: ``d`` comes from the node itself (it is talking to us).
        """
        tags = d.tags
        models = self._models
        for tag in tags:
            v = models.get(tag)
            if v is not None:
                v.offer(d, fresh=fresh)
            else:
                self._directory.observe(tag, d, self._period)
        if models:
            n = d.node_id
            for m, v in models.items():
                if m not in tags:
                    age = v.age_of(n)
                    if age is not None and d.age < age:  # fresher news: it dropped m
                        v.pop(n)

    def _accept(self, raw: object) -> Descriptor | None:
        """Validate one received descriptor; ``None`` if it names this node."""
        d = validate_descriptor(raw, max_age=self.max_age, max_tags=MAX_TAGS)
        if d.node_id == self._me.node_id or d.address == self._me.address:
            return None
        return d

    def _check_entries(self, raw: object, what: str) -> list[Descriptor]:
        if isinstance(raw, str | bytes) or not isinstance(raw, tuple | list):
            raise InvalidMessage(f"{what}.entries", f"expected a tuple, got {type(raw).__name__}")
        if len(raw) > self.max_entries:
            raise InvalidMessage(
                f"{what}.entries", f"{len(raw)} entries exceed the limit of {self.max_entries}"
            )
        out: list[Descriptor] = []
        seen: set[bytes] = set()
        problems: list[str] = []
        for item in raw:
            try:
                d = self._accept(item)
            except InvalidDescriptor as exc:
                problems.append(str(exc))
                continue
            if d is None:
                problems.append("descriptor points at this node")
                continue
            if d.node_id in seen:
                problems.append("duplicate node id")
                continue
            seen.add(d.node_id)
            failed_at = self._failed.get(d.address)
            if failed_at is not None:
                if d.age >= self._period - failed_at:
                    continue  # issued before it failed on us: stale, not malformed
                del self._failed[d.address]  # issued since: it is back
            out.append(d)
        if problems:
            self._stats.descriptors_rejected += len(problems)
            log.warning(
                "dropped %d of %d descriptors in %s: %s",
                len(problems),
                len(raw),
                what,
                "; ".join(sorted(set(problems))),
            )
        return out

    def _check_view_field(self, raw: object, what: str) -> bytes | None:
        if raw is None:
            return None
        if type(raw) is not bytes or len(raw) != TAG_LENGTH:
            raise InvalidMessage(
                f"{what}.view", f"expected None or a {TAG_LENGTH}-byte fingerprint"
            )
        return raw

    def _check_request(self, req: object) -> tuple[Descriptor, list[Descriptor], bytes | None]:
        if not isinstance(req, ShuffleRequest):
            raise InvalidMessage("request", f"expected ShuffleRequest, got {type(req).__name__}")
        model = self._check_view_field(req.view, "request")
        try:
            sender = self._accept(req.sender)
        except InvalidDescriptor as exc:
            self._stats.descriptors_rejected += 1
            raise InvalidMessage("request.sender", str(exc)) from None
        if sender is None:
            self._stats.descriptors_rejected += 1
            raise InvalidMessage("request.sender", "sender claims to be this node")
        entries = [
            d for d in self._check_entries(req.entries, "request") if d.node_id != sender.node_id
        ]
        return sender, entries, model

    def _check_reply(self, req: ShuffleRequest, reply: object) -> list[Descriptor]:
        if not isinstance(reply, ShuffleReply):
            raise InvalidMessage("reply", f"expected ShuffleReply, got {type(reply).__name__}")
        if reply.view != req.view:
            raise InvalidMessage("reply.view", "does not match the view of the request")
        return self._check_entries(reply.entries, "reply")
