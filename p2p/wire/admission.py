"""Who may hold a connection, and how many bytes unfinished frames may hold.

Sans-IO: :class:`Admission` keeps the table of incoming connections (by an id
the transport picks) and answers with decisions; the transport closes what it
is told to close. Time is passed in (any monotonic clock).

The rules, and why:

- **Handshake slots are separate from session slots.** A connection that has
  not finished its handshake holds a handshake slot (``max_handshakes`` in
  all, ``handshakes_per_source`` per source address) for at most the
  handshake deadline; only a finished handshake takes a session slot. A
  stranger who connects and stays silent therefore never takes the place of
  a member. When every handshake slot is taken, a newcomer takes the oldest
  slot of a source that holds at least two more than its own source (fair
  shares: a few flooding sources cannot keep everyone else out by renewing
  their slots faster than the grace); otherwise the oldest handshake gives
  way if it has run for ``handshake_grace`` (honest handshakes take a few
  milliseconds; a silent one is the flood). IPv6 sources are counted per
  /64 (:func:`source_of`).
- **Sessions** (authenticated incoming connections): at most
  ``max_sessions``, ``sessions_per_source`` per source address and
  ``sessions_per_node`` per node id. A node id over its cap replaces its own
  oldest session (a peer that reconnects before this side noticed the old
  connection died). A source at its cap is refused before its handshake
  starts (the handshake's public-key operations are what a flood would make
  the node spend). A full table makes room by closing the session that has
  been *silent* longest (no request but pings for ``silence`` seconds), else
  the newcomer is refused.
- **Silent sessions are closed sooner when slots are short**: with at least
  ``pressure`` x ``max_sessions`` sessions open, a session silent for
  ``silence`` seconds is closed (:meth:`Admission.expired`); otherwise only
  after ``idle_limit``. Pings keep a TCP connection alive but are not work:
  a session that only pings is silent.
- **Outgoing connections are counted apart** (``Transport`` caps them with
  its own limit): nothing here ever closes one to admit an incoming one.

:class:`FrameBudget` bounds the bytes all connections hold in frames that
have started to arrive but are not complete (small frames against an
allowance of their own); a frame that would take the total over it closes
its connection (:class:`~p2p.wire.framing.FrameDecoder` asks before it
allocates). A frame must also arrive whole within a deadline scaled from its
size (:func:`frame_allowance`), so a peer trickling bytes just fast enough
to dodge the read timeout cannot hold its share of the budget for ever.
:func:`receive_frame_limit` sizes a node's frame cap from the largest push it
can receive.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

__all__ = [
    "DEFAULT_FRAME_BUDGET",
    "DEFAULT_MIN_FRAME_RATE",
    "DEFAULT_SMALL_FRAME_BUDGET",
    "MIN_FRAME_LIMIT",
    "SMALL_FRAME_SIZE",
    "Admission",
    "AdmissionLimits",
    "Decision",
    "FrameBudget",
    "frame_allowance",
    "receive_frame_limit",
    "source_of",
]

#: Bytes all unfinished frames may hold at once, when a transport is not told
#: otherwise (raised to 4 frames of the largest size if that is more).
DEFAULT_FRAME_BUDGET = 16 * 1024 * 1024
#: Frames up to this size are small: a decoder stages them, and they draw on
#: the small frames' allowance of a :class:`FrameBudget`.
SMALL_FRAME_SIZE = 64 * 1024
#: Bytes unfinished small frames may hold at once, when not told otherwise (a
#: transport gives one small frame per connection it may hold).
DEFAULT_SMALL_FRAME_BUDGET = 8 * 1024 * 1024
#: The slowest average rate (bytes per second) at which a frame may arrive (see
#: :func:`frame_allowance`): 1 Mbit/s, a 4 MB push in about 32 s.
DEFAULT_MIN_FRAME_RATE = 128 * 1024
#: The smallest frame cap :func:`receive_frame_limit` returns: room for the
#: largest shuffle and handshake messages whatever the models' size.
MIN_FRAME_LIMIT = 1024 * 1024


def frame_allowance(size: int, read_timeout: float, min_rate: float) -> float:
    """Seconds a frame of ``size`` bytes may take to arrive whole, counted from
    its header: ``read_timeout`` (what any frame gets) plus its size at
    ``min_rate`` bytes per second (the slowest link the node serves). A frame
    still unfinished then is dropped and its budget given back."""
    if not min_rate > 0:
        raise ValueError(f"min_rate must be > 0 bytes per second, got {min_rate}")
    return read_timeout + size / min_rate


def receive_frame_limit(largest_push_bytes: int, ceiling: int) -> int:
    """The frame cap of a node whose largest receivable push takes
    ``largest_push_bytes`` on the wire: twice that (room for a reply and for
    fields added later), at least :data:`MIN_FRAME_LIMIT`, at most ``ceiling``
    (the configured ``limits.max_frame_size``)."""
    if largest_push_bytes < 0:
        raise ValueError(f"largest_push_bytes must be >= 0, got {largest_push_bytes}")
    return min(ceiling, max(MIN_FRAME_LIMIT, 2 * largest_push_bytes))


def source_of(remote: str) -> str:
    """The source a connection's limits are counted against: the host of
    ``"host:port"``; for ``"[v6]:port"`` its /64 prefix (``"2001:db8::/64"``),
    since one host is usually given a whole /64 and counting it per address
    would let it bypass every per-source cap; an IPv4-mapped address (a v4
    peer on a dual-stack listener) as the IPv4 address, loopback as itself.
    Other labels (in-memory peers) whole."""
    if remote.startswith("["):
        end = remote.find("]")
        if end > 0:
            return _ipv6_source(remote[1:end])
    host, sep, port = remote.rpartition(":")
    if sep and host and port.isdigit() and ":" not in host:
        return host
    return remote


def _ipv6_source(host: str) -> str:
    try:
        address = ipaddress.IPv6Address(host)
    except ValueError:
        return host
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    if address.is_loopback:
        return str(address)
    return str(ipaddress.IPv6Network((int(address) >> 64 << 64, 64)))


@dataclass(frozen=True)
class AdmissionLimits:
    """The caps of :class:`Admission` (see the module doc for what each does)."""

    max_handshakes: int = 16
    handshakes_per_source: int = 8
    handshake_grace: float = 1.0
    max_sessions: int = 64
    sessions_per_source: int = 32
    sessions_per_node: int = 2
    silence: float = 15.0
    pressure: float = 0.75
    idle_limit: float = 120.0

    def __post_init__(self) -> None:
        for name in ("max_handshakes", "handshakes_per_source", "max_sessions",
                     "sessions_per_source", "sessions_per_node"):
            if getattr(self, name) < 1:
                raise ValueError(f"admission {name} must be >= 1, got {getattr(self, name)}")
        for name in ("handshake_grace", "silence", "idle_limit"):
            if not getattr(self, name) > 0:
                raise ValueError(f"admission {name} must be > 0 seconds, "
                                 f"got {getattr(self, name)}")
        if not 0 < self.pressure <= 1:
            raise ValueError(f"admission pressure must be in (0, 1], got {self.pressure}")

    @classmethod
    def for_connections(cls, max_connections: int, *, idle_limit: float = 120.0
                        ) -> AdmissionLimits:
        """Caps derived from one ``max_connections`` figure (the node's
        ``limits.max_connections``): that many sessions, half of them (at
        least 8, or all) per source (a host running many daemons of one swarm,
        or a NAT, is one source), a quarter as many handshakes (at least 1, at
        most 16), at most 8 of them per source."""
        handshakes = max(1, min(16, max_connections // 4 or 1))
        return cls(
            max_handshakes=handshakes,
            handshakes_per_source=max(1, min(8, handshakes)),
            max_sessions=max_connections,
            sessions_per_source=max(max_connections // 2, min(max_connections, 8)),
            idle_limit=idle_limit,
        )


@dataclass(frozen=True)
class Decision:
    """The answer to a connection asking in: ``admitted``, else ``reason``.

    ``close`` lists connections that must be closed now (their entries are
    already gone from the table) and ``why_close`` says why, for the log.
    """

    admitted: bool
    reason: str = ""
    close: tuple[int, ...] = ()
    why_close: str = ""


@dataclass
class _Handshake:
    source: str
    started: float


@dataclass
class _Session:
    source: str
    node_id: bytes
    opened: float
    last_request: float


class Admission:
    """The table of incoming connections and the rules that admit them."""

    def __init__(self, limits: AdmissionLimits | None = None) -> None:
        self.limits = limits or AdmissionLimits()
        self._handshakes: dict[int, _Handshake] = {}
        self._sessions: dict[int, _Session] = {}
        #: Connections refused or closed by each rule, over the table's life.
        self.refused: dict[str, int] = {}

    # -- counts -------------------------------------------------------------------

    @property
    def handshakes(self) -> int:
        """Connections holding a handshake slot."""
        return len(self._handshakes)

    @property
    def sessions(self) -> int:
        """Authenticated incoming connections."""
        return len(self._sessions)

    def sessions_of(self, node_id: bytes) -> int:
        """Sessions of one node id."""
        return sum(s.node_id == node_id for s in self._sessions.values())

    # -- decisions ----------------------------------------------------------------

    def open_handshake(self, conn: int, source: str, now: float) -> Decision:
        """A new incoming connection from ``source``: may it start its handshake?"""
        lim = self.limits
        if conn in self._handshakes or conn in self._sessions:
            raise ValueError(f"connection {conn} is already in the admission table")
        sessions = sum(s.source == source for s in self._sessions.values())
        if sessions >= lim.sessions_per_source:
            return self._refuse("sessions_per_source",
                                f"{sessions} sessions from {source} already open "
                                f"(limit {lim.sessions_per_source} per source)")
        mine = sum(h.source == source for h in self._handshakes.values())
        if mine >= lim.handshakes_per_source:
            return self._refuse("handshakes_per_source",
                                f"{mine} handshakes from {source} already in progress "
                                f"(limit {lim.handshakes_per_source} per source)")
        close: tuple[int, ...] = ()
        if len(self._handshakes) >= lim.max_handshakes:
            oldest = self._fair_victim(mine)
            if oldest is None:
                oldest = min(self._handshakes, key=lambda c: self._handshakes[c].started)
                if now - self._handshakes[oldest].started < lim.handshake_grace:
                    return self._refuse("max_handshakes",
                                        f"all {lim.max_handshakes} handshake slots are taken")
            del self._handshakes[oldest]
            self._count("handshake_displaced")
            close = (oldest,)
        self._handshakes[conn] = _Handshake(source, now)
        return Decision(True, close=close,
                        why_close="handshake slots full: the oldest handshake gave way")

    def finish_handshake(self, conn: int, node_id: bytes, now: float) -> Decision:
        """``conn`` proved it is ``node_id``: may it hold a session slot?

        Frees its handshake slot either way.
        """
        lim = self.limits
        hs = self._handshakes.pop(conn, None)
        if hs is None:
            raise ValueError(f"connection {conn} has no handshake in progress")
        source = hs.source
        close: list[int] = []
        why = ""
        same_node = [c for c, s in self._sessions.items() if s.node_id == node_id]
        if len(same_node) >= lim.sessions_per_node:
            # a peer reconnecting: its newest connection wins over its oldest
            close.append(min(same_node, key=lambda c: self._sessions[c].opened))
            why = f"node {node_id.hex()[:16]} opened a newer session"
        from_source = sum(s.source == source for c, s in self._sessions.items()
                          if c not in close)
        if from_source >= lim.sessions_per_source:  # several handshakes finished at once
            return self._refuse("sessions_per_source",
                                f"{from_source} sessions from {source} already open "
                                f"(limit {lim.sessions_per_source} per source)")
        if len(self._sessions) - len(close) >= lim.max_sessions:
            victim = self._most_silent([c for c in self._sessions if c not in close], now)
            if victim is None:
                return self._refuse("max_sessions",
                                    f"all {lim.max_sessions} session slots are taken by "
                                    "active sessions")
            close.append(victim)
            why = why or "session slots are full and it was silent"
        for c in close:
            del self._sessions[c]
            self._count("session_displaced")
        self._sessions[conn] = _Session(source, node_id, now, now)
        return Decision(True, close=tuple(close), why_close=why)

    def request(self, conn: int, now: float) -> None:
        """``conn`` sent a request that is work (not a ping)."""
        session = self._sessions.get(conn)
        if session is not None:
            session.last_request = now

    def close(self, conn: int) -> None:
        """``conn`` is gone (any state; unknown ids are ignored)."""
        self._handshakes.pop(conn, None)
        self._sessions.pop(conn, None)

    def expired(self, now: float) -> list[int]:
        """Sessions to close now for silence, removed from the table.

        Silent for ``idle_limit``: always; for ``silence``: while the session
        slots are at least ``pressure`` full.
        """
        lim = self.limits
        limit = lim.idle_limit
        if len(self._sessions) >= lim.pressure * lim.max_sessions:
            limit = min(limit, lim.silence)
        gone = [c for c, s in self._sessions.items() if now - s.last_request >= limit]
        for c in gone:
            del self._sessions[c]
            self._count("session_silent")
        return gone

    def silent_for(self, conn: int, now: float) -> float | None:
        """Seconds since ``conn``'s last request (None: not a session)."""
        session = self._sessions.get(conn)
        return None if session is None else now - session.last_request

    # -- internals ----------------------------------------------------------------

    def _fair_victim(self, newcomer_holds: int) -> int | None:
        """The handshake a newcomer whose source holds ``newcomer_holds`` slots
        takes at once when all are taken: the oldest of a source holding at
        least two more (a few flooding sources that keep every slot younger than
        the grace would otherwise shut all other sources out). None: no such
        source, the grace rule decides."""
        held: dict[str, int] = {}
        for h in self._handshakes.values():
            held[h.source] = held.get(h.source, 0) + 1
        most = max(held.values(), default=0)
        if most < newcomer_holds + 2:
            return None
        return min((c for c, h in self._handshakes.items() if held[h.source] == most),
                   key=lambda c: self._handshakes[c].started)

    def _most_silent(self, candidates: list[int], now: float) -> int | None:
        silent = [c for c in candidates
                  if now - self._sessions[c].last_request >= self.limits.silence]
        if not silent:
            return None
        return min(silent, key=lambda c: self._sessions[c].last_request)

    def _refuse(self, rule: str, reason: str) -> Decision:
        self._count(rule)
        return Decision(False, reason)

    def _count(self, rule: str) -> None:
        self.refused[rule] = self.refused.get(rule, 0) + 1


class FrameBudget:
    """Bytes that frames still arriving may hold, summed over all connections.

    A decoder :meth:`reserve` s a frame's size when its header announces it
    and :meth:`release` s it when the frame is complete or its connection
    closes. ``limit`` <= 0 turns the budget off.

    Small frames (no larger than a decoder's staging area) are counted apart,
    against ``small_limit`` (:meth:`reserve_small`): they must still get
    through when large frames have spent ``limit`` (a handshake message, an
    ack), yet many of them left unfinished must not hold memory without
    bound either. ``small_limit`` <= 0 leaves them uncounted.
    """

    def __init__(self, limit: int = DEFAULT_FRAME_BUDGET,
                 small_limit: int = DEFAULT_SMALL_FRAME_BUDGET) -> None:
        self.limit = limit
        self.small_limit = small_limit
        #: Bytes held by unfinished large frames, and by unfinished small ones.
        self.held = 0
        self.small_held = 0
        #: The most ever held at once by large frames, and frames refused
        #: (large or small), over the budget's life.
        self.peak = 0
        self.refused = 0

    def reserve(self, size: int) -> bool:
        """Take ``size`` bytes for a large frame; False (nothing taken) if that
        would exceed the budget."""
        if self.limit > 0 and self.held + size > self.limit:
            self.refused += 1
            return False
        self.held += size
        self.peak = max(self.peak, self.held)
        return True

    def release(self, size: int) -> None:
        """Give back what :meth:`reserve` took."""
        self.held -= size
        if self.held < 0:
            raise RuntimeError(f"frame budget released more than it held ({self.held} bytes)")

    def reserve_small(self, size: int) -> bool:
        """Take ``size`` bytes for a small frame from the small frames' own
        allowance; False (nothing taken) if that would exceed it."""
        if self.small_limit > 0 and self.small_held + size > self.small_limit:
            self.refused += 1
            return False
        self.small_held += size
        return True

    def release_small(self, size: int) -> None:
        """Give back what :meth:`reserve_small` took."""
        self.small_held -= size
        if self.small_held < 0:
            raise RuntimeError(
                f"small frame budget released more than it held ({self.small_held} bytes)")
