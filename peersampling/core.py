"""Sans-IO Cyclon-style peer sampling with per-model holder views.

:class:`PeerSampler` holds no sockets and no clock: callers hand it messages,
the current time and a seeded :class:`random.Random`, and it returns what to
send, under the trio driver (:mod:`peersampling.driver`) and inside the
in-process simulator (:mod:`peersampling.simulator`) alike. Once per period
(Voulgaris et al., "CYCLON", 2005) it ages every entry, sends the oldest entry
``l - 1`` random others plus a fresh self-descriptor, and merges the answer; a
peer that does not answer is dropped everywhere. The same exchange runs in a
view per model held (:mod:`.view_set`), restricted to its holders. What comes
in is checked by :mod:`.intake`; the Sybil-resistant rules are
:mod:`.sybil_guard`; bootstrap contacts :mod:`.contacts`.

How it works: docs/design/peer-sampling.md.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TypedDict

from .contacts import ISLAND_REJOIN_EVERY, Contacts
from .cyclon_merge import CyclonMerge
from .descriptor import MAX_AGE, Descriptor, validate_descriptor
from .errors import InvalidDescriptor, InvalidMessage
from .intake import Intake, Standing, sender_key
from .messages import ShuffleReply, ShuffleRequest, new_request
from .offence_log import EveryLine, OffenceLog
from .ranked import RankedView
from .rules import SybilRules
from .signed import SignatureCheck, Signer, Verifier, sign_descriptor
from .stats import SamplerStats
from .sybil_guard import SybilGuard
from .view_set import AnyView, ViewSet

__all__ = ["ISLAND_REJOIN_EVERY", "AnyView", "PeerEntry", "PeerSampler", "SamplerStats",
           "SamplerTuning"]

log = logging.getLogger(__name__)


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
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if sybil is not None and not isinstance(sybil, SybilRules):
            raise TypeError(f"sybil must be SybilRules or None, got {type(sybil).__name__}")
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
        # asking lookup_fanout peers every period: see docs/design/peer-sampling.md
        self.lookup_small = l if lookup_small is None else lookup_small
        self.retries = retries
        self._round_shuffles: dict[bytes | None, ShuffleRequest] = {}
        # Shuffle targets taken out of a view and awaiting a reply, per view key:
        # still known (and sampled from an otherwise empty view) until then, so
        # a holder group of two never looks empty while its members talk.
        self._in_flight: dict[bytes | None, Descriptor] = {}
        self._retries_left: dict[bytes | None, int] = {}
        self._sign = sign
        self._rules = sybil
        self._me = replace(me, age=0)
        if sign is not None:
            self._me = sign_descriptor(self._me, sign)
        self._views = ViewSet(c, self.model_view_size, l, rng, sybil, directory_tags)
        self._view = self._views.main  # the main view (read by the lean engine)
        self._directory = self._views.directory
        self._stats = SamplerStats()
        self._contacts = Contacts(self._stats)
        self._period = 0
        self._lookup_phase = rng.randrange(lookup_every)
        self._last_contact: dict[str, float] = {}
        self._standing = Standing()
        self._failed = self._standing.failed  # address -> period it failed
        self._distrusted = self._standing.distrusted  # node id -> refused until
        # a peer chooses how many bad messages it sends: lines go through this
        self._offences: OffenceLog = offences if offences is not None else EveryLine(log)
        self._intake = Intake(
            self._me, max_age=max_age, max_entries=self.max_entries,
            check_signature=(verify if isinstance(verify, SignatureCheck)
                             else SignatureCheck(verify) if verify is not None else None),
            in_process=bool(in_process), standing=self._standing, stats=self._stats,
            offences=self._offences)
        self._sybil = (SybilGuard(sybil, c, l, self._views, self._stats)
                       if sybil is not None else None)
        self._cyclon = CyclonMerge(l, self._views, self._in_flight, rng)
        self._flush_offences = type(self._offences) is not EveryLine  # EveryLine keeps none
        self._views.sync(self._me.tags)

    @property
    def _models(self) -> dict[bytes, AnyView]:
        """Model fingerprint -> its holder view (read by the lean engine)."""
        return self._views.models

    @property
    def _in_process(self) -> bool:
        return self._intake.in_process

    @property
    def _check_signature(self) -> Callable[[Descriptor], bool] | None:
        return self._intake.check_signature

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
        self._views.sync(self._me.tags)

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
        self._me = self._intake.me = me

    # ----------------------------------------------------------------- bootstrap

    def bootstrap(self, addresses: Sequence[str]) -> None:
        """Remember addresses to contact while the node knows no peer (and, now and
        then, while it knows too few for one shuffle: ``ISLAND_REJOIN_EVERY``).

        Raises :class:`InvalidDescriptor` (field ``address``) for a malformed
        address; this node's own address is skipped.
        """
        self._contacts.set_bootstrap(addresses, self._me.address, self.rng)

    @property
    def bootstrap_addresses(self) -> list[str]:
        return list(self._contacts.bootstrap)

    @property
    def is_isolated(self) -> bool:
        """True while the node knows no peer at all (main and model views empty)."""
        return (not self._view and not any(self._models.values())
                and not self._in_flight)

    def island_due(self, period: int) -> bool:
        """Whether period ``period`` also asks a bootstrap address (see
        ``ISLAND_REJOIN_EVERY``): the main view holds someone but fewer than
        ``l`` entries, and there is a bootstrap address to ask."""
        return self._contacts.island_due(period, len(self._view), self.l)

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
        v = self._views.of(model)
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
        if self._sybil is not None:
            self._sybil.new_period(self._period + self._lookup_phase, rng)
        # the bootstrap address asked besides the shuffle, if due (before the
        # shuffle takes its target out of the view)
        island = (self._contacts.island(self._period, set(self._view.addresses()))
                  if self.island_due(self._period) else None)
        shuffle = self._shuffle_oldest(None, self._view)
        if shuffle is not None:
            out.append(shuffle)
        else:
            address = self._contacts.fallback(self._views, self.rng)
            if address is not None:
                out.append((address, ShuffleRequest(me, (), None)))
        if island is not None:
            out.append((island, ShuffleRequest(me, (), None)))

        for m, v in models.items():
            shuffle = self._shuffle_oldest(m, v)
            if shuffle is not None:
                out.append(shuffle)
        out.extend(lookups)
        if self._sybil is not None:
            out.extend(self._sybil.probes(self._me, self._failed, self._period))
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

    def _prune_contacts(self) -> None:
        self._standing.prune(self._period, self._period - 2 * self.c)
        known = self._views.addresses()
        if self._sybil is not None:
            self._sybil.prune(known, 8 * (self.c + self.model_view_size * len(self._models)))
        self._last_contact = {a: t for a, t in self._last_contact.items() if a in known}

    # --------------------------------------------------------------- responder

    def on_request(self, req: ShuffleRequest, now: float) -> ShuffleReply:
        """Answer a peer's shuffle and merge what it offered.

        A malformed request gets an empty reply and changes nothing.
        """
        self._stats.shuffles_received += 1
        try:
            sender, entries, model = self._intake.request(req, now, self._period)
        except InvalidMessage as exc:
            self._stats.messages_rejected += 1
            source = sender_key(req)
            self._offences.log(now, source, logging.WARNING,
                               "dropped shuffle request from %s: %s", source, exc)
            return ShuffleReply((), None)
        self._last_contact[sender.address] = now
        if self._failed:
            self._failed.pop(sender.address, None)  # it is talking to us: alive
        if self._distrusted and self._standing.refused(sender.node_id, self._period):
            # only our own descriptor: it still proves who answers at this address
            return ShuffleReply((self._me,), model)
        if self._sybil is not None:
            return self._sybil.request(sender, entries, model, self._me, self._period,
                                       self.rng, self._known_holders)
        return self._cyclon.request(sender, entries, model, self._me, self._period,
                                    self._known_holders)

    def _known_holders(self, model: bytes, exclude: bytes) -> list[Descriptor]:
        return self._views.known_holders(model, exclude, self._period, self.l)

    # --------------------------------------------------------------- initiator

    def on_reply(self, address: str, req: ShuffleRequest, reply: ShuffleReply, now: float) -> None:
        """Merge the answer ``address`` gave to ``req`` (which we sent)."""
        self._stats.replies_received += 1
        try:
            received = self._intake.reply(req, reply, now, self._period, address)
        except InvalidMessage as exc:
            self._stats.messages_rejected += 1
            self._offences.log(now, address, logging.WARNING,
                               "dropped shuffle reply from %s: %s", address, exc)
            return
        self._last_contact[address] = now
        if self._sybil is not None:
            self._sybil.reply(address, req, received, self._period)
            return
        self._cyclon.reply(address, req, received, self._period)

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
        self._views.remove_address(address)
        self._last_contact.pop(address, None)
        self._failed[address] = self._period
        if self._sybil is not None:
            self._sybil.failed(address, req)
        if req is None or self._round_shuffles.get(req.view) is not req:
            return []
        left = self._retries_left.get(req.view, self.retries)
        view = self._views.of(req.view)
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
        self._standing.distrust(node_id, self._period + periods)
        self._stats.distrusted += 1
        held = self._views.pop(node_id)
        for key, target in list(self._in_flight.items()):
            if target.node_id == node_id:
                del self._in_flight[key]
        if self._sybil is not None:
            self._sybil.forget(node_id)
        return held

    # ------------------------------------------------------------- persistence

    def snapshot(self) -> list[Descriptor]:
        """Every known peer (main view first, then model views), for a checkpoint."""
        return self._views.snapshot()

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
        for raw in descriptors:
            try:
                d = self._intake.accept(raw)
            except InvalidDescriptor as exc:
                self._stats.descriptors_rejected += 1
                address = getattr(raw, "address", None)
                if exc.field == "signature" and isinstance(address, str):
                    self._contacts.add_rejoin(address, self._me.address)
                    continue
                log.warning("skipped checkpointed peer: %s", exc)
                continue
            if d is None:
                continue
            accepted += 1
            if self._sybil is not None:
                self._sybil.learn(d, self._period, proven=True, pulled=True)
            else:
                self._view.offer(d)
                self._views.observe(d, self._period)
        return accepted

