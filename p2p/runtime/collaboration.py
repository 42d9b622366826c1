"""Is this node collaborating with its peers, and if not, why (sans-IO).

A node *collaborates* when every shared model a known peer holds (same
fingerprint) had an exchange accepted lately (:mod:`p2p.runtime.exchanges`).
A node can join an overlay and still share nothing: its network or
``[[models]]`` differ from its peers', so every fingerprint differs; or share a
model whose every exchange is refused. :func:`assess` turns what the node
knows (its models' fingerprints, the tags of the peers it has seen, the
bootstrap addresses and how contacting them went) into a
:class:`CollaborationStatus` with the most specific reason the protocol
allows, :func:`with_exchanges` checks a positive verdict against the
exchanges; :class:`CollaborationReporter` decides when that deserves a log
line. No clock, no sockets: the node feeds them.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from p2p.runtime.exchanges import ModelExchanges

__all__ = [
    "CollaborationReporter",
    "CollaborationState",
    "CollaborationStatus",
    "ContactLog",
    "ContactOutcome",
    "all_local_tag",
    "assess",
    "waiting_for_peers",
    "with_exchanges",
]

MAX_LISTED = 5  # fingerprints or addresses named in one reason


class CollaborationState(StrEnum):
    """Why a node does or does not share a model with a peer (most specific first)."""

    COLLABORATING = "collaborating"  # a known peer holds one of this node's models
    LOCAL_ONLY = "local-only"  # this configuration shares no model at all
    WAITING = "waiting"  # no peer known, no bootstrap address: waiting to be contacted
    JOINING = "joining"  # no peer known yet; no contact has failed so far
    BOOTSTRAP_UNREACHABLE = "bootstrap-unreachable"  # no bootstrap address answered
    HANDSHAKE_FAILED = "handshake-failed"  # a bootstrap answered but the handshake failed
    SHAPE_MISMATCH = "shape-mismatch"  # peers known, none holds this node's models
    WAITING_FOR_PEERS = "waiting-for-peers"  # holding the first round for training.min_peers
    NO_EXCHANGE = "no-exchange"  # holders known, no exchange of a model accepted lately
    REFUSED = "refused"  # holders known, the exchanges of a model refused lately


@dataclass(frozen=True)
class CollaborationStatus:
    """The verdict: ``state``, a one-line ``reason`` for people, per own shared
    model the number of known peers holding it, and while the node knows no
    peer at all, why (``isolation``; set for a local-only node too)."""

    state: CollaborationState
    reason: str
    holders: Mapping[str, int] = field(default_factory=dict)
    isolation: str | None = None

    @property
    def collaborating(self) -> bool:
        """True when every model a known peer holds had an exchange accepted lately."""
        return self.state is CollaborationState.COLLABORATING

    @property
    def isolated(self) -> bool:
        """True when the node knows no peer at all."""
        return self.isolation is not None


@dataclass(frozen=True)
class ContactOutcome:
    """How the last exchange with an address went: ``error`` is ``None`` when it
    answered; ``handshake`` is True when a connection was made but the
    handshake failed (wrong swarm key, another program, another version)."""

    address: str
    error: str | None = None
    handshake: bool = False


class ContactLog:
    """The last :class:`ContactOutcome` per address, at most ``limit`` addresses
    (the oldest forgotten first): the evidence behind an isolation reason."""

    def __init__(self, limit: int = 256) -> None:
        self._limit = limit
        self._last: dict[str, ContactOutcome] = {}

    def record(self, outcome: ContactOutcome) -> None:
        """Remember ``outcome`` as the newest news about its address."""
        self._last.pop(outcome.address, None)
        self._last[outcome.address] = outcome
        while len(self._last) > self._limit:
            self._last.pop(next(iter(self._last)))

    def answered(self, address: str) -> None:
        """``address`` answered an exchange."""
        self.record(ContactOutcome(address))

    def failed(self, address: str, error: str, *, handshake: bool = False) -> None:
        """An exchange with ``address`` failed with ``error``."""
        self.record(ContactOutcome(address, error or "no reason given", handshake))

    def get(self, address: str) -> ContactOutcome | None:
        """The last outcome for ``address``, if any."""
        return self._last.get(address)


def _fp(fingerprint: bytes) -> str:
    return fingerprint.hex()[:8]


def _peers(n: int) -> str:
    return f"{n} peer" if n == 1 else f"{n} peers"


def _listed(items: Sequence[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "")


def _isolation(bootstrap: Sequence[str], contacts: ContactLog,
               swarm_key: bool) -> tuple[CollaborationState, str]:
    if not bootstrap:
        return (CollaborationState.WAITING,
                "no peer known and no bootstrap address configured: waiting for a peer to "
                "contact this node (give --bootstrap HOST:PORT to join a swarm)")
    failed = [o for o in (contacts.get(a) for a in bootstrap) if o is not None and o.error]
    handshakes = [o for o in failed if o.handshake]
    if handshakes:
        key = "this node uses a swarm key" if swarm_key else "this node has no swarm key"
        tried = _listed([f"{o.address} ({(o.error or '').removeprefix('handshake failed: ')})"
                         for o in handshakes])
        return (CollaborationState.HANDSHAKE_FAILED,
                f"handshake failed with {tried}: the address answers but admits no peer; "
                "a wrong or missing swarm key cannot be told apart from a node of another "
                "swarm or another program, so check the address and that every node uses "
                f"the same swarm key file ({key})")
    if failed:
        tried = _listed([f"{o.address} ({o.error})" for o in failed])
        return (CollaborationState.BOOTSTRAP_UNREACHABLE,
                f"no bootstrap address answered: {tried}; retrying with backoff")
    return (CollaborationState.JOINING,
            f"no peer known yet: contacting {_listed(list(bootstrap))}")


def assess(models: Mapping[str, bytes], peers: Iterable[frozenset[bytes]], *,
           isolated: bool, bootstrap: Sequence[str] = (), contacts: ContactLog | None = None,
           swarm_key: bool = False) -> CollaborationStatus:
    """This node's collaboration status.

    ``models``: own shared model name -> fingerprint; ``peers``: the tags
    (fingerprints held) of each distinct peer the node knows; ``isolated``:
    the node knows no peer at all (peer sampling's verdict); ``bootstrap``:
    the configured bootstrap addresses and ``contacts`` how exchanges with
    them went; ``swarm_key``: whether this node uses one (named in the
    handshake reason).
    """
    contacts = contacts if contacts is not None else ContactLog()
    known = [frozenset(tags) for tags in peers]
    holders = {name: sum(fp in tags for tags in known) for name, fp in models.items()}
    state, isolation = None, None
    if isolated:
        state, isolation = _isolation(bootstrap, contacts, swarm_key)
    if not models:
        return CollaborationStatus(CollaborationState.LOCAL_ONLY,
                                   "this configuration shares no model (every neuron is "
                                   "local): nothing to average with peers", holders, isolation)
    if state is not None and isolation is not None:
        return CollaborationStatus(state, isolation, holders, isolation)
    if not known:  # the only known peers are being contacted right now
        return CollaborationStatus(CollaborationState.JOINING,
                                   "no peer confirmed yet: a first exchange is under way", holders)
    unshared = [name for name in models if not holders[name]]
    if len(unshared) < len(models):
        shared = [f"{name} with {_peers(n)}" for name, n in holders.items() if n]
        reason = "sharing " + ", ".join(shared)
        if unshared:
            reason += "; no known peer holds " + ", ".join(
                f"{name} (fingerprint {_fp(models[name])})" for name in unshared) + " yet"
        return CollaborationStatus(CollaborationState.COLLABORATING, reason, holders)
    own = ", ".join(f"{name} (fingerprint {_fp(fp)})" for name, fp in models.items())
    theirs = Counter(fp for tags in known for fp in tags)
    if theirs:
        held = _listed([f"{_fp(fp)} ({_peers(n)})"
                        for fp, n in sorted(theirs.items(), key=lambda kv: (-kv[1], kv[0]))])
        what = (f"peers hold {held}: their network.layers or [[models]] differ from this "
                "node's, so nothing is averaged")
    else:
        what = f"none of the {_peers(len(known))} known shares any model"
    noun = "model" if len(models) == 1 else "models"
    return CollaborationStatus(CollaborationState.SHAPE_MISMATCH,
                               f"no peer holds {noun} {own}; {what}", holders)


def all_local_tag(strategy: str, network: str) -> bytes:
    """The tag a node sharing no model advertises (and counts peers by): its strategy and
    network, so that only peers able to work with it count towards ``training.min_peers``."""
    return hashlib.blake2b(f"all-local/{strategy}/{network}".encode(), digest_size=32).digest()


def with_exchanges(status: CollaborationStatus, exchanges: Mapping[str, ModelExchanges],
                   window: float) -> CollaborationStatus:
    """``status`` checked against the exchanges: a node some known peer shares a model
    with collaborates only when every such model exchanged within ``window`` seconds;
    otherwise REFUSED with the most frequent refusal, or NO_EXCHANGE."""
    if status.state is not CollaborationState.COLLABORATING:
        return status
    silent = [name for name, n in status.holders.items()
              if n and not (name in exchanges and exchanges[name].exchanging)]
    if not silent:
        return status
    refused = [(e.top_refusal, name) for name in silent
               if (e := exchanges.get(name)) is not None and e.top_refusal is not None]
    if refused:
        (kind, count, reason, by_peer), name = max(refused, key=lambda r: r[0][1])
        e = exchanges[name]
        where = (f"{e.sent_refused} of its pushes refused by peers" if by_peer
                 else f"{e.refused_here} pushes of peers refused here")
        return CollaborationStatus(
            CollaborationState.REFUSED,
            f"no exchange of {name} accepted in the last {window:.0f} s ({where}); most "
            f"refusals ({count}): {reason}", status.holders)
    held = ", ".join(f"{name} ({_peers(status.holders[name])} hold it)" for name in silent)
    return CollaborationStatus(
        CollaborationState.NO_EXCHANGE,
        f"no exchange of {held} accepted in the last {window:.0f} s: pushes undelivered or "
        "none made yet (see `p2p peers` for failures)", status.holders)


def waiting_for_peers(known: int, wanted: int, what: str, wait: float) -> CollaborationStatus:
    """The status of a node holding its first round until ``wanted`` peers that hold
    ``what`` are known (``known`` so far), for at most ``wait`` seconds."""
    return CollaborationStatus(
        CollaborationState.WAITING_FOR_PEERS,
        f"waiting for peers before the first round: {known} of {wanted} known hold {what} "
        f"(training.min_peers = {wanted}; training starts anyway after {wait:g} s)")


@dataclass
class CollaborationReporter:
    """Decides when a status deserves a log line: a state that is not
    collaborating is logged once it has lasted ``grace`` seconds (NO_EXCHANGE:
    ``slow_grace``), then again every ``repeat`` seconds while it lasts (refused
    or missing exchanges: once); becoming collaborating is logged once (the
    first time, and after each logged problem). Local-only is said once; a wait
    for ``training.min_peers`` logs its own lines."""

    grace: float
    repeat: float
    #: the grace of NO_EXCHANGE (a first exchange follows the first round)
    slow_grace: float = 30.0
    _state: CollaborationState | None = None
    _since: float = 0.0
    _last_logged: float | None = None
    _problem_logged: bool = False
    _announced: bool = False

    def update(self, status: CollaborationStatus, now: float) -> tuple[int, str] | None:
        """The ``(level, message)`` to log for ``status`` at time ``now``, if any."""
        if status.state is not self._state:
            self._state, self._since, self._last_logged = status.state, now, None
        if status.collaborating:
            if self._announced and not self._problem_logged:
                return None
            self._announced, self._problem_logged = True, False
            return logging.INFO, f"collaborating: {status.reason}"
        if status.state is CollaborationState.LOCAL_ONLY:
            if self._announced:
                return None
            self._announced = True
            return logging.INFO, f"not collaborating: {status.reason}"
        if status.state is CollaborationState.WAITING_FOR_PEERS:
            return None  # the wait logs its own lines
        slow = status.state is CollaborationState.NO_EXCHANGE
        if now - self._since < (max(self.grace, self.slow_grace) if slow else self.grace):
            return None
        if self._last_logged is not None and (
                now - self._last_logged < self.repeat
                or status.state in (CollaborationState.NO_EXCHANGE, CollaborationState.REFUSED)):
            return None  # exchanges refused or missing: said once while it lasts
        self._last_logged, self._problem_logged = now, True
        quiet = status.state in (CollaborationState.WAITING, CollaborationState.JOINING)
        return (logging.INFO if quiet else logging.WARNING), f"not collaborating: {status.reason}"
