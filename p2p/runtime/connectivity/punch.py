"""Hole punching's messages and rules (sans-IO), after libp2p's DCUtR.

A node that reached a peer through a relay (the *initiator*) asks it, over the
relayed session, for a direct connection (:class:`PunchOffer`: where the
initiator may be reached, and whether peers can dial it). When they can, the
peer dials it (*connection reversal*: :class:`Reverse` on that connection turns
it round, so that the initiator owns it). Otherwise the peer answers with its
own addresses; the initiator measures the round trip, sends :class:`PunchSync`
and half a round trip later both dial each other at once, each from a port
bound for this punch and announced in its candidates (a TCP simultaneous open
through both NATs). Whatever connects replaces the relayed connection. Behind
a symmetric NAT the addresses cannot be predicted and the session stays
relayed. :class:`PunchPolicy` decides when to try and whom to answer;
docs/design/transport.md#hole-punching.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from common.address import (
    LINK_LOCAL,
    LOOPBACK,
    UNSPECIFIED,
    AddressError,
    HostPort,
    address_scope,
    parse_host_port,
)

__all__ = ["PUNCH_MESSAGES", "PunchAnswer", "PunchOffer", "PunchPolicy", "PunchSync",
           "PunchSynced", "Reverse", "Reversed", "usable_candidates"]

MAX_ADDRESSES = 8
_MAX_ADDRESS = 300
#: How an offer is answered.
PUNCH, REVERSE, DECLINED = "punch", "reverse", "declined"


def _check(addresses: tuple[str, ...]) -> None:
    if len(addresses) > MAX_ADDRESSES or any(len(a) > _MAX_ADDRESS for a in addresses):
        raise ValueError(f"at most {MAX_ADDRESSES} addresses of {_MAX_ADDRESS} characters")


@dataclass(frozen=True)
class PunchOffer:
    """Let us connect directly: I may be reached at ``addresses``; ``reachable``: peers
    can dial me (then dial me, and turn the connection round)."""

    addresses: tuple[str, ...]
    reachable: bool

    def __post_init__(self) -> None:
        _check(self.addresses)


@dataclass(frozen=True)
class PunchAnswer:
    """``mode``: "punch" (dial ``addresses`` when you send :class:`PunchSync`), "reverse"
    (I dial you now) or "declined" (``reason``)."""

    mode: str
    addresses: tuple[str, ...]
    reason: str

    def __post_init__(self) -> None:
        _check(self.addresses)
        if self.mode not in (PUNCH, REVERSE, DECLINED) or len(self.reason) > _MAX_ADDRESS:
            raise ValueError(f"unknown punch mode {self.mode[:20]!r}")


@dataclass(frozen=True)
class PunchSync:
    """Dial now (the sender dials half a round trip later)."""


@dataclass(frozen=True)
class PunchSynced:
    """Dialling."""


@dataclass(frozen=True)
class Reverse:
    """Sent on a connection the sender opened at the receiver's request: from the next
    byte on, the receiver runs it as its own (it starts a new handshake)."""


@dataclass(frozen=True)
class Reversed:
    """Agreed: the next bytes are the receiver's handshake."""


PUNCH_MESSAGES = ((PunchOffer, "punch_offer"), (PunchAnswer, "punch_answer"),
                  (PunchSync, "punch_sync"), (PunchSynced, "punch_synced"),
                  (Reverse, "reverse"), (Reversed, "reversed"))


def usable_candidates(addresses: tuple[str, ...], *, local_swarm: bool) -> list[HostPort]:
    """The addresses of a peer's offer worth a connection attempt (never unspecified
    or link-local, nor loopback outside a one-host swarm), at most 8."""
    out = []
    for text in addresses[:MAX_ADDRESSES]:
        try:
            address = parse_host_port(text)
        except AddressError:
            continue
        scope = address_scope(address.host)
        if scope in (UNSPECIFIED, LINK_LOCAL) or (scope == LOOPBACK and not local_swarm):
            continue
        out.append(address)
    return list(dict.fromkeys(out))


class PunchPolicy:
    """When to try a hole punch with a peer, and which offers to answer.

    One attempt per peer at a time, ``concurrent`` in all; after a failure the
    next one waits ``backoff`` seconds, doubling up to ``max_backoff`` (a
    symmetric NAT fails every time: it costs a few packets an hour). Offers
    are answered one per peer per ``offer_interval`` and ``offers_per_minute``
    in all, so that no one makes this node dial around on their word.
    """

    def __init__(self, *, concurrent: int = 4, backoff: float = 15.0,
                 max_backoff: float = 3600.0, offer_interval: float = 10.0,
                 offers_per_minute: int = 30) -> None:
        self.concurrent = concurrent
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.offer_interval = offer_interval
        self.offers_per_minute = offers_per_minute
        self._running: set[bytes] = set()
        self._next: dict[bytes, tuple[float, float]] = {}  # peer -> (not before, backoff)
        self._offers: dict[bytes, float] = {}  # peer -> last offer answered
        self._recent: deque[float] = deque()
        self.attempts = 0
        self.punched = 0
        self.reversed = 0
        self.failed = 0
        self.offers_refused = 0

    def should_try(self, peer: bytes, now: float) -> bool:
        if peer in self._running or len(self._running) >= self.concurrent:
            return False
        return self._next.get(peer, (0.0, 0.0))[0] <= now

    def started(self, peer: bytes) -> None:
        self._running.add(peer)
        self.attempts += 1

    def finished(self, peer: bytes, how: str | None, now: float) -> None:
        """The attempt with ``peer`` ended: ``how`` is "punched", "reversed" or None
        (failed)."""
        self._running.discard(peer)
        if how is None:
            self.failed += 1
            wait = min(self.max_backoff, self._next.get(peer, (0.0, self.backoff / 2))[1] * 2)
            self._next[peer] = (now + wait, wait)
            return
        self._next.pop(peer, None)
        if how == "punched":
            self.punched += 1
        else:
            self.reversed += 1

    def admit_offer(self, peer: bytes, now: float) -> str:
        """"" if an offer from ``peer`` is answered now, else why not."""
        while self._recent and now - self._recent[0] >= 60.0:
            self._recent.popleft()
        last = self._offers.get(peer)
        why = ""
        if last is not None and now - last < self.offer_interval:
            why = f"one offer per {self.offer_interval:g} s"
        elif len(self._recent) >= self.offers_per_minute:
            why = "busy: too many hole punches at the moment"
        if why:
            self.offers_refused += 1
            return why
        self._offers[peer] = now
        if len(self._offers) > 4096:
            self._offers.pop(next(iter(self._offers)))
        self._recent.append(now)
        return ""

    def status(self) -> dict[str, int]:
        return {"attempts": self.attempts, "punched": self.punched, "reversed": self.reversed,
                "failed": self.failed, "offers_refused": self.offers_refused}
