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

Signed descriptors and Sybil resistance (both optional): with ``sign`` the
node signs its own descriptor; with ``verify`` only descriptors whose
signature checks are accepted (:mod:`peersampling.signed`). With ``sybil``
(:class:`SybilRules`) every view is a :class:`RankedView` of seeded min-wise
samplers, new entries are probed before use (a probe is a request with no
entries: the reply must carry the target's own signed descriptor at the
probed address) and unsolicited descriptors are capped per source and period.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Sequence
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
from .messages import ShuffleReply, ShuffleRequest, new_reply, new_request
from .offence_log import EveryLine, OffenceLog
from .ranked import RankedView
from .rules import SybilRules
from .signed import SignatureCheck, Signer, Verifier, sign_descriptor
from .view import PartialView

AnyView = PartialView | RankedView

log = logging.getLogger(__name__)

#: Distrusted peers remembered at once (the oldest go first past the bound).
_MAX_DISTRUSTED = 4096
# While the main view is too small to fill one shuffle, every this many periods a
# bootstrap address it does not hold is asked as well: a few nodes that only know
# each other (two restarted nodes whose bootstrap refused them, one the other's
# bootstrap) would otherwise shuffle among themselves forever, since the
# bootstrap is only asked when the view is empty.
ISLAND_REJOIN_EVERY = 8


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
    signatures_rejected: int = 0  # also counted in descriptors/messages_rejected
    unsolicited_dropped: int = 0  # over the per-source / per-period caps
    probes_sent: int = 0
    probes_failed: int = 0  # answered with another id, or not at all
    distrusted: int = 0  # peers removed and refused for a while (see PeerSampler.distrust)


class SamplerTuning(TypedDict, total=False):
    """The optional keyword options of :class:`PeerSampler` beyond ``c``, ``l`` and ``rng``."""

    model_view_size: int | None
    max_entries: int | None
    max_age: int
    lookups: bool
    lookup_every: int
    lookup_fanout: int
    lookup_small: int | None
    retries: int
    directory_tags: int
    sign: Signer | None
    verify: Verifier | SignatureCheck | None
    sybil: SybilRules | None
    offences: OffenceLog | None
    in_process: bool


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
    holds fewer than ``lookup_small`` holders (default ``l``; an empty view
    always counts: 0 gives the rule before issue 17), one peer every
    ``lookup_every`` periods while it is not full.
    ``retries`` bounds the replacement shuffles :meth:`on_failure` offers per
    view and period (0 = plain Cyclon: one exchange per view and period).

    ``sign`` (``data -> signature``) signs this node's descriptor; each change
    of address or models then issues a new epoch. ``verify`` (``node_id,
    signature, data -> bool``, or a :class:`SignatureCheck`, whose cache may be
    shared) makes every received descriptor need a valid signature. ``sybil``
    turns on the Sybil-resistant rules (:class:`SybilRules`).

    ``offences`` receives the warning lines a peer causes (a malformed
    shuffle, bad descriptors), keyed by the offender: the node passes its
    rate limiter (:class:`OffenceLog`); the default writes every line.

    ``in_process=True`` is for simulators only: every request and reply comes
    from another core of the same process, whose descriptors were validated
    when they entered it (or were built by it), so the fields of received
    descriptors are not validated again. Everything else still applies
    (message shape, this node's own descriptor, duplicates, distrusted and
    failed peers, signatures when ``verify`` is given): for such input the
    views, counters and random draws are exactly those of a full check.
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
        lookup_small: int | None = None,
        retries: int = 1,
        directory_tags: int = 256,
        sign: Signer | None = None,
        verify: Verifier | SignatureCheck | None = None,
        sybil: SybilRules | None = None,
        offences: OffenceLog | None = None,
        in_process: bool = False,
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
        if lookup_small is not None and lookup_small < 0:
            raise ValueError(f"lookup_small must be >= 0, got {lookup_small}")
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
        # a model view holding fewer holders than this (a rare model) keeps
        # asking lookup_fanout peers every period: see docs/peersampling.md
        self.lookup_small = l if lookup_small is None else lookup_small
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.retries = retries
        self._round_shuffles: dict[bytes | None, ShuffleRequest] = {}
        # Shuffle targets taken out of a view and awaiting a reply, per view key:
        # still known (and sampled from an otherwise empty view) until then, so
        # a holder group of two never looks empty while its members talk.
        self._in_flight: dict[bytes | None, Descriptor] = {}
        self._retries_left: dict[bytes | None, int] = {}
        self._sign = sign
        self._check_signature: Callable[[Descriptor], bool] | None = (
            verify if isinstance(verify, SignatureCheck)
            else SignatureCheck(verify) if verify is not None else None
        )
        if sybil is not None and not isinstance(sybil, SybilRules):
            raise TypeError(f"sybil must be SybilRules or None, got {type(sybil).__name__}")
        self._rules = sybil
        self._per_source = l
        self._per_period = 4 * l
        self._reset_every = 0
        if sybil is not None:
            if sybil.unsolicited_per_source is not None:
                self._per_source = sybil.unsolicited_per_source
            if sybil.unsolicited_per_period is not None:
                self._per_period = sybil.unsolicited_per_period
            self._reset_every = 4 * c if sybil.reset_every is None else sybil.reset_every
        # unsolicited descriptors taken this period, per (sender, view) and per view
        self._pushed: dict[tuple[bytes, bytes | None], int] = {}
        self._pushed_total: dict[bytes | None, int] = {}
        # address -> (expected node id, probe request) of probes awaiting a reply
        self._probing: dict[str, tuple[bytes, ShuffleRequest]] = {}
        # node id -> the address that answered us with that id (signed)
        self._proven: dict[bytes, str] = {}
        # addresses of checkpointed peers whose descriptor no longer verifies
        self._rejoin: list[str] = []
        self._me = replace(me, age=0)
        if sign is not None:
            self._me = sign_descriptor(self._me, sign)
        self._view: AnyView = self._new_view(c)
        self._models: dict[bytes, AnyView] = {}
        self._directory = HolderDirectory(max_tags=directory_tags, per_tag=2 * l, max_age=2 * c)
        self._bootstrap: list[str] = []
        self._bootstrap_next = 0
        self._period = 0
        self._lookup_phase = rng.randrange(lookup_every)
        self._last_contact: dict[str, float] = {}
        # address -> period it failed: second-hand copies older than the failure
        # are ignored, so a dead peer's descriptor cannot bounce back in.
        self._failed: dict[str, int] = {}
        # node id -> period until which it is refused (see distrust)
        self._distrusted: dict[bytes, int] = {}
        self._stats = SamplerStats()
        # a peer chooses how many bad messages it sends: lines go through this
        self._offences: OffenceLog = offences if offences is not None else EveryLine(log)
        self._in_process = bool(in_process)
        self._flush_offences = type(self._offences) is not EveryLine  # EveryLine keeps none
        self._sync_model_views()

    def _new_view(self, capacity: int) -> AnyView:
        if self._rules is None:
            return PartialView(capacity)
        return RankedView(capacity, self.rng, max_candidates=self._rules.max_candidates or 0)

    @property
    def sybil_rules(self) -> SybilRules | None:
        """The Sybil-resistant rules in force (``None``: plain Cyclon)."""
        return self._rules

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
        self._reissue(me)
        self._sync_model_views()

    def set_address(self, address: str, alternates: Sequence[str] = ()) -> None:
        """Change the addresses advertised for this node: ``address``, then
        ``alternates`` in order (raises :class:`InvalidDescriptor` for a bad one)."""
        me = validate_descriptor(replace(self._me, address=address,
                                         alternates=tuple(alternates)), max_age=self.max_age)
        self._reissue(me)

    def _reissue(self, me: Descriptor) -> None:
        """Adopt a changed self-descriptor; a signing node issues it under a new epoch."""
        if self._sign is not None and me != self._me:
            me = sign_descriptor(replace(me, epoch=self._me.epoch + 1), self._sign)
        self._me = me

    def _sync_model_views(self) -> None:
        wanted = sorted(self._me.tags)  # sorted: iteration order must not depend on hashing
        old = self._models
        self._models = {m: old.get(m) or self._new_view(self.model_view_size) for m in wanted}
        guarded = self._rules is not None
        for m in wanted:
            if m in old:
                continue
            self._directory.forget_tag(m)  # kept in the model view from now on
            view = self._models[m]
            for d in self._view.descriptors():
                if m in d.tags:
                    view.offer(d, fresh=guarded)  # main-view entries are proven

    # ----------------------------------------------------------------- bootstrap

    def bootstrap(self, addresses: Sequence[str]) -> None:
        """Remember addresses to contact while the node knows no peer (and, now and
        then, while it knows too few for one shuffle: ``ISLAND_REJOIN_EVERY``).

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
        if self._flush_offences:
            self._offences.flush(now)  # summaries of offenders who went quiet
        rng, me = self.rng, self._me
        out: list[tuple[str, ShuffleRequest]] = []
        models = self._models
        self._view.increase_age()
        for v in models.values():
            v.increase_age()

        # Holder lookups go to random main-view peers, chosen before the
        # main shuffle takes its target out of the view.
        lookup_turn = (self._period + self._lookup_phase) % self.lookup_every == 0
        lookups: list[tuple[str, ShuffleRequest]] = []
        if models and self.lookups and self._view:
            for m, v in models.items():
                if not v or len(v) < self.lookup_small:
                    fanout = self.lookup_fanout
                elif lookup_turn and len(v) < v.capacity:
                    fanout = 1
                else:
                    continue
                for peer in self._view.random_subset(rng, fanout):
                    lookups.append((peer.address, ShuffleRequest(me, (), m)))

        self._round_shuffles = {}
        self._retries_left = {}
        if self._rules is not None:
            self._pushed.clear()
            self._pushed_total.clear()
            if self._reset_every and (self._period + self._lookup_phase) % self._reset_every == 0:
                for v in (self._view, *self._models.values()):
                    if isinstance(v, RankedView):
                        v.reset_slot(rng)
        island = self._island_contact()  # before the shuffle takes its target out
        shuffle = self._shuffle_oldest(None, self._view)
        if shuffle is not None:
            out.append(shuffle)
        else:
            address = self._fallback_contact()
            if address is not None:
                out.append((address, ShuffleRequest(me, (), None)))
        if island is not None:
            out.append((island, ShuffleRequest(me, (), None)))

        for m, v in models.items():
            shuffle = self._shuffle_oldest(m, v)
            if shuffle is not None:
                out.append(shuffle)
        out.extend(lookups)
        if self._rules is not None:
            out.extend(self._probes())
        self._stats.lookups_sent += len(lookups)
        self._stats.shuffles_sent += len(out)
        if self._period % 32 == 0:
            self._prune_contacts()
        return out

    def _shuffle_oldest(
        self, key: bytes | None, view: AnyView
    ) -> tuple[str, ShuffleRequest] | None:
        """Take the oldest entry out of ``view`` and build the shuffle for it.

        A ranked view keeps the target (nothing is swapped away); the reply
        refreshes its age, a failure removes it.
        """
        q = view.oldest(self.rng)
        if q is None:
            return None
        if isinstance(view, RankedView):
            target = view.get(q)
            assert target is not None
            entries = tuple(view.random_subset(self.rng, self.l - 1, exclude=q))
        else:
            target = view.pop(q)
            assert target is not None
            entries = tuple(view.random_subset(self.rng, self.l - 1))
            self._in_flight[key] = target
        req = new_request(self._me, entries, key)
        self._round_shuffles[key] = req
        return target.address, req

    def _probes(self) -> list[tuple[str, ShuffleRequest]]:
        """This period's identity and liveness probes (Sybil rules only).

        A probe is a request with no entries: the target answers with its own
        signed descriptor, which must name the expected id at the probed
        address. Candidates this node pulled go first; at most
        ``pushed_probes_per_period`` go to ones learnt from others' requests.
        """
        rules = self._rules
        assert rules is not None
        budget, pushed = rules.probes_per_period, rules.pushed_probes_per_period
        out: list[tuple[str, ShuffleRequest]] = []
        views: list[tuple[bytes | None, AnyView]] = [(None, self._view), *self._models.items()]
        for _key, view in views:
            if budget <= 0:
                break
            if not isinstance(view, RankedView) or not view.has_candidates():
                continue
            for d, pulled in view.take_candidates(budget, pushed=pushed):
                if self._proven.get(d.node_id) == d.address:
                    self._learn(d, proven=True, pulled=pulled)  # proven meanwhile
                    continue
                if d.address in self._probing or d.address in self._failed:
                    continue
                req = ShuffleRequest(self._me, (), None)
                self._probing[d.address] = (d.node_id, req)
                out.append((d.address, req))
                budget -= 1
                if not pulled:
                    pushed -= 1
        self._stats.probes_sent += len(out)
        return out

    def _learn(self, d: Descriptor, *, proven: bool, pulled: bool) -> None:
        """Offer ``d`` to the main view and every model view it belongs to (Sybil rules)."""
        if proven:
            self._proven[d.node_id] = d.address
        main = self._view
        assert isinstance(main, RankedView)
        main.consider(d, proven=proven, pulled=pulled)
        self._observe(d, fresh=proven, pulled=pulled)

    def _fallback_contact(self) -> str | None:
        """Whom to ask for a main view when it is empty."""
        for v in self._models.values():
            d = v.random_entry(self.rng)
            if d is not None:
                return d.address
        pool = self._bootstrap + [a for a in self._rejoin if a not in self._bootstrap]
        if not pool:
            return None
        address = pool[self._bootstrap_next % len(pool)]
        self._bootstrap_next += 1
        self._stats.bootstrap_attempts += 1
        return address

    def island_due(self, period: int) -> bool:
        """Whether period ``period`` also asks a bootstrap address (see
        ``ISLAND_REJOIN_EVERY``): the main view holds someone but fewer than
        ``l`` entries, and there is a bootstrap address to ask."""
        return (period % ISLAND_REJOIN_EVERY == 0 and 0 < len(self._view) < self.l
                and bool(self._bootstrap or self._rejoin))

    def _island_contact(self) -> str | None:
        """The bootstrap address this period asks besides its shuffle, if any: the
        next one the main view does not hold (one it holds is shuffled with anyway)."""
        if not self.island_due(self._period):
            return None
        held = set(self._view.addresses())
        pool = [a for a in self._bootstrap + self._rejoin if a not in held]
        if not pool:
            return None
        self._stats.bootstrap_attempts += 1
        return pool[self._period // ISLAND_REJOIN_EVERY % len(pool)]

    def _prune_contacts(self) -> None:
        horizon = self._period - 2 * self.c
        self._failed = {a: p for a, p in self._failed.items() if p > horizon}
        if self._distrusted:
            self._distrusted = {n: u for n, u in self._distrusted.items() if u > self._period}
        known = set(self._view.addresses())
        for v in self._models.values():
            known.update(v.addresses())
        if len(self._proven) > 8 * (self.c + self.model_view_size * len(self._models)):
            self._proven = {n: a for n, a in self._proven.items() if a in known}
        self._last_contact = {a: t for a, t in self._last_contact.items() if a in known}

    # --------------------------------------------------------------- responder

    def on_request(self, req: ShuffleRequest, now: float) -> ShuffleReply:
        """Answer a peer's shuffle and merge what it offered.

        A malformed request gets an empty reply and changes nothing.
        """
        self._stats.shuffles_received += 1
        try:
            sender, entries, model = self._check_request(req, now)
        except InvalidMessage as exc:
            self._stats.messages_rejected += 1
            source = _sender_key(req)
            self._offences.log(now, source, logging.WARNING,
                               "dropped shuffle request from %s: %s", source, exc)
            return ShuffleReply((), None)
        self._last_contact[sender.address] = now
        if self._failed:
            self._failed.pop(sender.address, None)  # it is talking to us: alive
        if self._distrusted and self._refused(sender.node_id):
            # only our own descriptor: it still proves who answers at this address
            return ShuffleReply((self._me,), model)
        if self._rules is not None:
            return self._guarded_request(sender, entries, model)
        offered = [sender, *entries]
        models = self._models
        # _observe only acts on tags and model views: skip the call without either
        if models or sender.tags:
            self._observe(sender, fresh=True)
        for d in entries:
            if models or d.tags:
                self._observe(d)
        rng, length = self.rng, self.l
        if model is None:
            view: AnyView | None = self._view
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
        return new_reply(tuple(reply), model)

    def _guarded_request(
        self, sender: Descriptor, entries: list[Descriptor], model: bytes | None
    ) -> ShuffleReply:
        """:meth:`on_request` under the Sybil rules.

        What a request offers is unsolicited: at most ``unsolicited_per_source``
        descriptors per sender and ``unsolicited_per_period`` in all are taken
        per view and period (the rest are dropped and counted); each taken one
        is only a candidate until probed (unless its address already proved
        that id). The reply always starts with this node's own descriptor, so
        every answer doubles as a proof of identity at this address.
        """
        offered = [sender, *entries]
        src = (sender.node_id, model)
        room = min(self._per_source - self._pushed.get(src, 0),
                   self._per_period - self._pushed_total.get(model, 0))
        room = max(room, 0)
        if room < len(offered):
            self._stats.unsolicited_dropped += len(offered) - room
            offered = offered[:room]
        self._pushed[src] = self._pushed.get(src, 0) + len(offered)
        self._pushed_total[model] = self._pushed_total.get(model, 0) + len(offered)
        proven = self._proven
        view = self._view if model is None else self._models.get(model)
        main = self._view
        assert isinstance(main, RankedView)
        for d in offered:
            known = proven.get(d.node_id) == d.address
            if model is None:
                main.consider(d, proven=known, pulled=False)
            self._observe(d, fresh=known, pulled=False)  # model views and holder cache
        if view is None:
            assert model is not None
            return ShuffleReply(tuple(self._known_holders(model, sender.node_id)), model)
        reply = [self._me, *view.random_subset(self.rng, self.l - 1, exclude=sender.node_id)]
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
            received = self._check_reply(req, reply, now, address)
        except InvalidMessage as exc:
            self._stats.messages_rejected += 1
            self._offences.log(now, address, logging.WARNING,
                               "dropped shuffle reply from %s: %s", address, exc)
            return
        self._last_contact[address] = now
        if self._rules is not None:
            self._guarded_reply(address, req, received)
            return
        # The responder may include itself: that copy is first-hand news.
        responder = None
        for d in received:
            if d.address == address:
                responder = d.node_id
                break
        models = self._models
        for d in received:
            if models or d.tags:  # _observe acts on tags and model views only
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
        if target is not None and (target.node_id in view or not view.is_full):
            # It just answered, so it is alive: keep it if there is room
            # (only small views have room; full ones behave as plain Cyclon,
            # and a full view that does not know it would refuse the offer).
            view.offer(with_age(target, 0))

    def _guarded_reply(self, address: str, req: ShuffleRequest, received: list[Descriptor]) -> None:
        """:meth:`on_reply` under the Sybil rules: what we pulled, and probe results.

        The responder's own descriptor (at the address we contacted, signature
        checked) proves that id at that address; everything else it sent is
        a pulled candidate.
        """
        probe = self._probing.get(address)
        if probe is not None and probe[1] is req:
            del self._probing[address]
            if not any(d.node_id == probe[0] and d.address == address for d in received):
                self._stats.probes_failed += 1
                log.info("probe of %s: no signed descriptor for the expected id", address)
        main = self._view
        assert isinstance(main, RankedView)
        for d in received:
            proven = d.address == address or self._proven.get(d.node_id) == d.address
            if proven:
                self._proven[d.node_id] = d.address
            if d.address == address or req.view is None:
                main.consider(d, proven=proven)
            self._observe(d, fresh=proven)  # model views and holder cache

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
        probe = self._probing.get(address)
        if probe is not None and (req is None or probe[1] is req):
            del self._probing[address]
            self._stats.probes_failed += 1
        if self._proven:
            for n in [n for n, a in self._proven.items() if a == address]:
                del self._proven[n]
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

    def distrust(self, node_id: bytes, periods: int) -> int:
        """Remove ``node_id`` from every view and refuse it for ``periods`` periods.

        For peers that misbehaved above this layer, for example a holder that
        took pushes and gave nothing back (:mod:`gossip.partner_choice`): it
        loses its place in the views, its slot goes to someone else, and it
        cannot come back through shuffles until the period is over (its own
        requests are answered with this node's descriptor only). Returns how
        many views held it.
        """
        if periods < 1:
            raise ValueError(f"distrust: periods must be >= 1, got {periods!r}")
        until = self._period + periods
        before = self._distrusted.pop(node_id, until)
        self._distrusted[node_id] = max(until, before)  # newest last
        while len(self._distrusted) > _MAX_DISTRUSTED:
            self._distrusted.pop(next(iter(self._distrusted)))
        self._stats.distrusted += 1
        held = 0
        for v in (self._view, *self._models.values()):
            d = v.pop(node_id)
            if d is not None:
                held += 1
                self._directory.forget_address(d.address)
        for key, target in list(self._in_flight.items()):
            if target.node_id == node_id:
                del self._in_flight[key]
        self._proven.pop(node_id, None)
        return held

    def _refused(self, node_id: bytes) -> bool:
        """Whether ``node_id`` is distrusted now (an expired entry is dropped)."""
        until = self._distrusted.get(node_id)
        if until is None:
            return False
        if until > self._period:
            return True
        del self._distrusted[node_id]
        return False

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
        With signatures checked, a checkpointed peer whose descriptor does not
        verify (for example one saved without its signature) is not restored
        but its address is contacted like a bootstrap address while the node
        knows no peer. Under the Sybil rules restored entries count as proven:
        they were probed before they reached the checkpoint.
        """
        accepted = 0
        guarded = self._rules is not None
        for raw in descriptors:
            try:
                d = self._accept(raw)
            except InvalidDescriptor as exc:
                self._stats.descriptors_rejected += 1
                address = getattr(raw, "address", None)
                if exc.field == "signature" and isinstance(address, str):
                    if address not in self._rejoin and address != self._me.address:
                        self._rejoin.append(address)
                    continue
                log.warning("skipped checkpointed peer: %s", exc)
                continue
            if d is None:
                continue
            accepted += 1
            if guarded:
                self._learn(d, proven=True, pulled=True)
            else:
                self._view.offer(d)
                self._observe(d)
        return accepted

    # ------------------------------------------------------------- validation

    def _observe(self, d: Descriptor, *, fresh: bool = False, pulled: bool = True) -> None:
        """Feed one valid descriptor to the model views and the holder cache.

        ``fresh``: ``d`` comes from the node itself (it is talking to us); under
        the Sybil rules: its address proved that id. ``pulled``: it came in a
        reply to this node's request (not in someone else's request).
        """
        tags = d.tags
        models = self._models
        for tag in tags:
            v = models.get(tag)
            if v is None:
                self._directory.observe(tag, d, self._period)
            elif isinstance(v, RankedView):
                v.consider(d, proven=fresh, pulled=pulled)
            else:
                v.offer(d, fresh=fresh)
        if models:
            n = d.node_id
            for m, v in models.items():
                if m in tags:
                    continue
                if isinstance(v, RankedView):
                    cur = v.get(n)
                    if cur is not None and d.epoch > cur.epoch:  # a newer version without m
                        v.pop(n)
                    continue
                age = v.age_of(n)
                if age is not None and d.age < age:  # fresher news: it dropped m
                    v.pop(n)

    def _accept(self, raw: object, *, received: bool = False) -> Descriptor | None:
        """Validate one descriptor; ``None`` if it names this node.

        ``received``: it came in a message (an ``in_process`` core trusts those).
        """
        if received and self._in_process and type(raw) is Descriptor:
            d = raw  # built or validated by the sending core (see in_process)
        else:
            d = validate_descriptor(raw, max_age=self.max_age, max_tags=MAX_TAGS)
        if d.node_id == self._me.node_id or d.address == self._me.address:
            return None
        check = self._check_signature
        if check is not None and not check(d):
            raise self._signature_error(d)
        return d

    def _signature_error(self, d: Descriptor) -> InvalidDescriptor:
        """Count a descriptor whose signature failed and say what was wrong."""
        self._stats.signatures_rejected += 1
        return InvalidDescriptor(
            "signature", "missing" if not d.signature else "does not verify for this node id"
        )

    def _check_entries_shape(self, raw: object, what: str) -> Sequence[object]:
        if type(raw) is not tuple and (
            isinstance(raw, str | bytes) or not isinstance(raw, tuple | list)
        ):
            raise InvalidMessage(f"{what}.entries", f"expected a tuple, got {type(raw).__name__}")
        if len(raw) > self.max_entries:
            raise InvalidMessage(
                f"{what}.entries", f"{len(raw)} entries exceed the limit of {self.max_entries}"
            )
        return raw

    def _check_entries(
        self, raw: object, what: str, now: float, source: str | ShuffleRequest
    ) -> list[Descriptor]:
        """The acceptable descriptors of ``raw``; problems are logged against ``source``
        (an address, or a request: its sender, worked out only if there is a problem)."""
        raw = self._check_entries_shape(raw, what)
        out: list[Descriptor] = []
        seen: set[bytes] = set()
        problems: list[str] = []
        # _accept, written out: this loop runs for every descriptor received
        me_id, me_address = self._me.node_id, self._me.address
        max_age, check = self.max_age, self._check_signature
        failed, trusted = self._failed, self._in_process
        for item in raw:
            if trusted and type(item) is Descriptor:
                d = item  # built or validated by the sending core (see in_process)
            else:
                try:
                    d = validate_descriptor(item, max_age=max_age, max_tags=MAX_TAGS)
                except InvalidDescriptor as exc:
                    problems.append(str(exc))
                    continue
            n = d.node_id
            if n == me_id or d.address == me_address:
                problems.append("descriptor points at this node")
                continue
            if check is not None and not check(d):
                problems.append(str(self._signature_error(d)))
                continue
            if n in seen:
                problems.append("duplicate node id")
                continue
            seen.add(n)
            if self._distrusted and self._refused(n):
                continue  # distrusted for now: not malformed, just refused
            failed_at = failed.get(d.address) if failed else None
            if failed_at is not None:
                if d.age >= self._period - failed_at:
                    continue  # issued before it failed on us: stale, not malformed
                del self._failed[d.address]  # issued since: it is back
            out.append(d)
        if problems:
            self._stats.descriptors_rejected += len(problems)
            if not isinstance(source, str):
                source = _sender_key(source)
            self._offences.log(
                now, source, logging.WARNING,
                "dropped %d of %d descriptors in %s from %s: %s",
                len(problems),
                len(raw),
                what,
                source,
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

    def _check_request(
        self, req: object, now: float
    ) -> tuple[Descriptor, list[Descriptor], bytes | None]:
        if not isinstance(req, ShuffleRequest):
            raise InvalidMessage("request", f"expected ShuffleRequest, got {type(req).__name__}")
        model = self._check_view_field(req.view, "request")
        # cheap checks of the whole message before any signature is verified
        self._check_entries_shape(req.entries, "request")
        try:
            sender = self._accept(req.sender, received=True)
        except InvalidDescriptor as exc:
            self._stats.descriptors_rejected += 1
            raise InvalidMessage("request.sender", str(exc)) from None
        if sender is None:
            self._stats.descriptors_rejected += 1
            raise InvalidMessage("request.sender", "sender claims to be this node")
        entries = [
            d for d in self._check_entries(req.entries, "request", now, req)
            if d.node_id != sender.node_id
        ]
        return sender, entries, model

    def _check_reply(
        self, req: ShuffleRequest, reply: object, now: float, address: str
    ) -> list[Descriptor]:
        if not isinstance(reply, ShuffleReply):
            raise InvalidMessage("reply", f"expected ShuffleReply, got {type(reply).__name__}")
        if reply.view != req.view:
            raise InvalidMessage("reply.view", "does not match the view of the request")
        return self._check_entries(reply.entries, "reply", now, address)


def _sender_key(req: object) -> str:
    """Whom a request's log lines are counted against: the sender's whole node id
    (the node checks it is the authenticated peer before the core sees it)."""
    node_id = getattr(getattr(req, "sender", None), "node_id", None)
    if isinstance(node_id, bytes) and node_id:
        return node_id.hex()
    return "unnamed sender"

