"""A relay's books (sans-IO): who holds a reservation, which circuits are open, the caps.

A node reserves by waiting at the relay (:class:`~p2p.wire.circuit.RelayWait`);
its reservation lives while it waits and for ``reservation_ttl`` seconds after
its last wait ended, and only a node with a live reservation can be reached
through the relay: the relay never dials anyone. Every cap counts against the
node ids *and* the source addresses involved, so that made-up identities on
one host share one host's share. Refusals say which cap was hit. See
docs/design/transport.md#relays.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

from p2p.wire.circuit import RelayLimits

__all__ = ["RELAY_TAG", "CircuitRecord", "RelayBook", "RelayLimits", "RelayStats"]

#: Circuits one source address may open, in per-node caps: several nodes behind
#: one NAT share its address.
SOURCE_SHARE = 4
#: The tag a serving relay adds to its descriptor (peers find relays by peer
#: sampling); not a model's fingerprint.
RELAY_TAG = hashlib.sha256(b"p2p relay service v1").digest()


@dataclass
class _Reservation:
    source: str
    waiting: int = 0
    last_wait: float = 0.0  # when its last wait ended (or began, while waiting)


@dataclass
class CircuitRecord:
    """One open circuit: who opened it, to whom, since when, bytes each way."""

    initiator: bytes
    source: str
    target: bytes
    target_source: str
    opened: float
    sent: list[int] = field(default_factory=lambda: [0, 0])  # initiator->target, back


@dataclass
class RelayStats:
    """Counters a relay reports (``p2p metrics``: ``relay.*``)."""

    circuits_opened: int = 0
    circuits_refused: int = 0
    circuits_evicted: int = 0  # closed to make room for a source that had none
    reservations_refused: int = 0
    bytes_relayed: int = 0
    refusals: Counter[str] = field(default_factory=Counter)  # by cap
    # the most ever open at once: in all, from one node, to one node
    peak_circuits: int = 0
    peak_per_initiator: int = 0
    peak_per_target: int = 0


class RelayBook:
    """The relay's reservations and circuits under :class:`RelayLimits`."""

    def __init__(self, limits: RelayLimits) -> None:
        self.limits = limits
        self._reservations: dict[bytes, _Reservation] = {}
        self.circuits: dict[int, CircuitRecord] = {}
        self._next = 0
        self.stats = RelayStats()

    # ------------------------------------------------------------------ reservations

    def _expire(self, now: float) -> None:
        ttl = self.limits.reservation_ttl
        gone = [n for n, r in self._reservations.items()
                if not r.waiting and now - r.last_wait >= ttl]
        for node in gone:
            del self._reservations[node]

    def wait(self, node: bytes, source: str, now: float) -> str | None:
        """``node`` (from ``source``) starts waiting: None, or why it may not."""
        self._expire(now)
        r = self._reservations.get(node)
        why = None
        if r is None and len(self._reservations) >= self.limits.max_reservations:
            why = f"relay full: {self.limits.max_reservations} nodes hold reservations"
        elif r is not None and r.waiting >= self.limits.waiting_per_peer:
            why = (f"already waiting on {r.waiting} connections (at most "
                   f"{self.limits.waiting_per_peer} per node)")
        if why is not None:
            self.stats.reservations_refused += 1
            self.stats.refusals["reservation"] += 1
            return why
        if r is None:
            r = self._reservations[node] = _Reservation(source)
        r.source, r.waiting, r.last_wait = source, r.waiting + 1, now
        return None

    def end_wait(self, node: bytes, now: float) -> None:
        """One of ``node``'s waits ended (answered, handed over, or gone)."""
        r = self._reservations.get(node)
        if r is not None:
            r.waiting = max(0, r.waiting - 1)
            r.last_wait = now

    def reserved(self, node: bytes, now: float) -> bool:
        """Whether ``node`` holds a live reservation."""
        self._expire(now)
        return node in self._reservations

    @property
    def reservations(self) -> int:
        return len(self._reservations)

    # ------------------------------------------------------------------ circuits

    def open(self, initiator: bytes, source: str, target: bytes,
             now: float) -> tuple[int | None, str, list[int]]:
        """A circuit from ``initiator`` (at ``source``) to ``target``: (its id, "",
        circuits to close to make room) or (None, why not, []). The target must
        hold a reservation.

        Caps per node id and per source (``SOURCE_SHARE`` times as many: nodes
        behind one NAT share an address) refuse. The caps of circuits at once and
        of circuits to one target make room by fair shares instead: a source
        without a circuit (to that target) takes the oldest circuit of the
        source holding the most, if it holds two or more; so a flood from a few
        hosts cannot keep the others out.
        """
        self._expire(now)
        reservation = self._reservations.get(target)
        lim = self.limits
        per = lim.circuits_per_peer
        open_ = list(self.circuits.items())
        why, evict = "", list[int]()
        if reservation is None:
            why = "no reservation: that node holds no reservation with this relay"
        elif target == initiator:
            why = "a circuit to yourself"
        elif sum(c.initiator == initiator for _, c in open_) >= per:
            why = f"per-peer limit: this node has {per} circuits open through this relay"
        elif sum(c.source == source for _, c in open_) >= per * SOURCE_SHARE:
            why = f"per-source limit: {per * SOURCE_SHARE} circuits open from {source}"
        else:
            to_target = [(i, c) for i, c in open_ if c.target == target]
            if len(to_target) >= 2 * per:
                why, evict = self._make_room(to_target, source,
                                             f"per-target limit: the target has {2 * per} "
                                             "circuits open to it")
            if not why and len(open_) - len(evict) >= lim.max_circuits:
                why, evict = self._make_room([x for x in open_ if x[0] not in evict], source,
                                             f"circuit limit: {lim.max_circuits} circuits open")
        if why:
            self.stats.circuits_refused += 1
            self.stats.refusals[why.split(":")[0]] += 1
            return None, why, []
        assert reservation is not None
        for cid in evict:
            self.close(cid)
        self.stats.circuits_evicted += len(evict)
        cid = self._next
        self._next += 1
        self.circuits[cid] = CircuitRecord(initiator, source, target, reservation.source, now)
        s = self.stats
        s.circuits_opened += 1
        s.peak_circuits = max(s.peak_circuits, len(self.circuits))
        s.peak_per_initiator = max(s.peak_per_initiator, sum(
            c.initiator == initiator for c in self.circuits.values()))
        s.peak_per_target = max(s.peak_per_target, sum(
            c.target == target for c in self.circuits.values()))
        return cid, "", evict

    @staticmethod
    def _make_room(among: list[tuple[int, CircuitRecord]], source: str,
                   why: str) -> tuple[str, list[int]]:
        """("", [the circuit to close]) when ``source`` holds none of ``among`` and
        another source holds two or more (its oldest goes); else (why, [])."""
        counts = Counter(c.source for _, c in among)
        if counts.get(source):
            return why, []
        top, held = counts.most_common(1)[0] if counts else ("", 0)
        if held < 2:
            return why, []
        oldest = min((c.opened, i) for i, c in among if c.source == top)[1]
        return "", [oldest]

    def count(self, cid: int, direction: int, nbytes: int) -> None:
        """``nbytes`` went through circuit ``cid`` (0: initiator to target, 1: back)."""
        record = self.circuits.get(cid)
        if record is not None:
            record.sent[direction] += nbytes
        self.stats.bytes_relayed += nbytes

    def close(self, cid: int) -> CircuitRecord | None:
        """Circuit ``cid`` ended (idempotent)."""
        return self.circuits.pop(cid, None)

    def status(self) -> dict[str, int]:
        """Numbers for ``p2p status`` and ``p2p metrics``."""
        s = self.stats
        return {"reservations": len(self._reservations), "circuits": len(self.circuits),
                "circuits_opened": s.circuits_opened, "circuits_refused": s.circuits_refused,
                "circuits_evicted": s.circuits_evicted,
                "reservations_refused": s.reservations_refused,
                "bytes_relayed": s.bytes_relayed}
