"""Who may hold a connection, and how many bytes unfinished frames may hold.

Sans-IO: :class:`Admission` keeps the table of incoming connections (by an id
the transport picks) and answers with decisions; the transport closes what it
is told to. Time is passed in. Handshake slots are apart from session slots, so
a silent stranger never takes a member's place; both are capped in all and per
source (IPv6 per /64, :func:`source_of`; handshakes also per /48,
:func:`site_of`), sessions also per node id, with fair shares between sources
when full; silent sessions (pings only) close sooner when slots are short;
outgoing connections are counted apart. :class:`FrameBudget` bounds the bytes
unfinished frames hold, reserved in steps as a body arrives, shared between
sources; :func:`frame_allowance` and :func:`frame_pace_allowance` bound a
frame's time.

Rules, defaults and why: docs/design/transport.md ("Admission").
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

from common.address import CIRCUIT

__all__ = [
    "DEFAULT_FRAME_BUDGET",
    "DEFAULT_MIN_FRAME_RATE",
    "DEFAULT_SMALL_FRAME_BUDGET",
    "FRAME_PACE_GRACE",
    "FRAME_RESERVE_STEP",
    "MIN_FRAME_LIMIT",
    "SMALL_FRAME_SIZE",
    "SOURCE_FRAME_SHARE",
    "SOURCE_SHARE_PRESSURE",
    "Admission",
    "AdmissionLimits",
    "Decision",
    "FrameBudget",
    "frame_allowance",
    "frame_pace_allowance",
    "receive_frame_limit",
    "site_of",
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
#: Bytes a large frame takes of a :class:`FrameBudget` when its header arrives;
#: it takes more as its body arrives, as much as it has received each time it
#: has filled what it holds. A frame that never arrives holds this much, not
#: its announced size (see :class:`FrameBudget`): at the default 64 session
#: slots and 64 outgoing connections, 8 MiB of the 16 MiB default budget if
#: every one of them announces a frame and sends nothing.
FRAME_RESERVE_STEP = SMALL_FRAME_SIZE
#: The slowest average rate (bytes per second) at which a frame may arrive (see
#: :func:`frame_allowance`): 1 Mbit/s, a 4 MB push in about 32 s.
DEFAULT_MIN_FRAME_RATE = 128 * 1024
#: The share of a :class:`FrameBudget` the unfinished large frames of one
#: source (and of one IPv6 /48) may announce: a quarter, so that filling the
#: budget takes at least four sources, and one busy source (a NAT, a host
#: running several daemons) still has room for a few large frames at once
#: (at the default budget of 4 frames of the largest size, at least one).
SOURCE_FRAME_SHARE = 0.25
#: Sources' shares apply once the unfinished large frames announce more than
#: this fraction of a :class:`FrameBudget`: below it a busy honest host (a
#: NAT, the daemons of a local swarm, all one source) may burst past its
#: share, and a source squatting the budget still leaves the others at least
#: this fraction.
SOURCE_SHARE_PRESSURE = 0.5
#: Seconds a frame's body may lag behind the floor rate, counted from its
#: header (:func:`frame_pace_allowance`). A sender writes a whole frame at
#: once, so an honest body follows its header at link speed; the grace
#: absorbs its start (TCP slow start: a few round trips, under a second) and
#: stalls of either end (a receiver descheduled on a loaded machine for longer
#: than its slack is cut when it wakes, even if the bytes queued meanwhile: a
#: deadline that passed has cancelled the read; a sender whose socket buffer
#: was full waits for its own loop). A body faster than the floor banks the
#: difference: only one arriving at the floor itself has no more slack than
#: this. And it is what a peer that announces a frame and then stalls holds
#: what the frame took of the budget for (one :data:`FRAME_RESERVE_STEP`),
#: per frame (and handshake), instead of the read timeout plus the frame's
#: size at the floor rate.
FRAME_PACE_GRACE = 5.0
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


def frame_pace_allowance(received: int, min_rate: float,
                         grace: float = FRAME_PACE_GRACE) -> float:
    """Seconds after a frame's header by which the next byte of its body must
    have arrived, when ``received`` bytes of the body are in: ``grace`` plus
    ``received + 1`` bytes at ``min_rate`` bytes per second. A body that falls
    further behind the floor rate is dropped with its connection (and the
    budget it held given back), whatever the read timeout would allow."""
    if not min_rate > 0:
        raise ValueError(f"min_rate must be > 0 bytes per second, got {min_rate}")
    return grace + (received + 1) / min_rate


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
    A connection through a relay (``<relay>/circuit/<id>``) counts as the
    relay's. Other labels (in-memory peers) whole."""
    remote = remote.partition(CIRCUIT)[0]
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


def site_of(source: str) -> str:
    """The coarser group a :func:`source_of` source belongs to for handshakes:
    the /48 of an IPv6 /64 (``"2001:db8::/48"``), since one customer's
    allocation (a /56 or a /48) holds hundreds of /64s at no cost; any other
    source is its own site."""
    if not source.endswith("/64"):
        return source
    try:
        network = ipaddress.IPv6Network(source)
    except ValueError:
        return source
    return str(network.supernet(new_prefix=48))


@dataclass(frozen=True)
class AdmissionLimits:
    """The caps of :class:`Admission` (see the module doc for what each does)."""

    max_handshakes: int = 16
    handshakes_per_source: int = 8
    handshake_grace: float = 1.0
    first_frame_grace: float = 0.1
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
        for name in ("handshake_grace", "first_frame_grace", "silence", "idle_limit"):
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
    ``rule`` names the limit that refused (a key of :attr:`Admission.refused`).
    """

    admitted: bool
    reason: str = ""
    close: tuple[int, ...] = ()
    why_close: str = ""
    rule: str = ""


@dataclass
class _Handshake:
    source: str
    site: str
    started: float
    spoke: bool = False  # its first frame arrived


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
        site = site_of(source)
        for group in _source_groups(source):
            mine = sum(group in (h.source, h.site) for h in self._handshakes.values())
            if mine >= lim.handshakes_per_source:
                label = "source" if group == source else "/48"
                return self._refuse("handshakes_per_source",
                                    f"{mine} handshakes from {group} already in progress "
                                    f"(limit {lim.handshakes_per_source} per {label})")
        close: tuple[int, ...] = ()
        why = ""
        if len(self._handshakes) >= lim.max_handshakes:
            oldest, why = self._handshake_victim(source, site, now)
            if oldest is None:
                return self._refuse("max_handshakes",
                                    f"all {lim.max_handshakes} handshake slots are taken")
            del self._handshakes[oldest]
            self._count("handshake_displaced")
            close = (oldest,)
        self._handshakes[conn] = _Handshake(source, site, now)
        return Decision(True, close=close, why_close=why)

    def first_frame(self, conn: int) -> None:
        """``conn``'s first handshake frame arrived: it no longer gives way to
        a newcomer before the grace (unknown ids are ignored)."""
        hs = self._handshakes.get(conn)
        if hs is not None:
            hs.spoke = True

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
            others = {c: s for c, s in self._sessions.items() if c not in close}
            victim = self._most_silent(list(others), now)
            reason = "session slots are full and it was silent"
            if victim is None:
                victim = _fair_victim({c: s.source for c, s in others.items()}, source,
                                      key=lambda c: others[c].last_request)
                reason = "session slots are full and its source holds the most"
            if victim is None:
                return self._refuse("max_sessions",
                                    f"all {lim.max_sessions} session slots are taken by "
                                    "active sessions")
            close.append(victim)
            why = why or reason
        for c in close:
            del self._sessions[c]
            self._count("session_displaced")
        self._sessions[conn] = _Session(source, node_id, now, now)
        return Decision(True, close=tuple(close), why_close=why)

    def request(self, conn: int, now: float) -> None:
        """``conn`` sent a request that is work: a handler answered it without
        an error (a ping, a message that is no request or a refused one is not)."""
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

    def _handshake_victim(self, source: str, site: str, now: float
                          ) -> tuple[int | None, str]:
        """The handshake a newcomer from ``source`` (in ``site``) takes when all
        slots are taken, and why; None: it is refused. In order: fair shares
        per /48, then per source (see :func:`_fair_victim`); the oldest that has
        not delivered its first frame within ``first_frame_grace``; the oldest,
        once past ``handshake_grace``."""
        table = self._handshakes

        def started(c: int) -> float:
            return table[c].started

        for holders, newcomer in (({c: h.site for c, h in table.items()}, site),
                                  ({c: h.source for c, h in table.items()}, source)):
            victim = _fair_victim(holders, newcomer, key=started)
            if victim is not None:
                return victim, "handshake slots full: its source held the most"
        mute = [c for c, h in table.items()
                if not h.spoke and now - h.started >= self.limits.first_frame_grace]
        if mute:
            return min(mute, key=started), "handshake slots full: it had sent nothing yet"
        oldest = min(table, key=started)
        if now - table[oldest].started >= self.limits.handshake_grace:
            return oldest, "handshake slots full: the oldest handshake gave way"
        return None, ""

    def _most_silent(self, candidates: list[int], now: float) -> int | None:
        silent = [c for c in candidates
                  if now - self._sessions[c].last_request >= self.limits.silence]
        if not silent:
            return None
        return min(silent, key=lambda c: self._sessions[c].last_request)

    def _refuse(self, rule: str, reason: str) -> Decision:
        self._count(rule)
        return Decision(False, reason, rule=rule)

    def _count(self, rule: str) -> None:
        self.refused[rule] = self.refused.get(rule, 0) + 1


def _fair_victim(holders: dict[int, str], newcomer: str,
                 key: Callable[[int], float]) -> int | None:
    """Fair shares of a full table (``holders``: connection -> the source it is
    counted against): the connection to close for a newcomer from
    ``newcomer``, the first by ``key`` among those of the source holding the
    most, if that source holds at least two more than the newcomer's (a few
    sources that keep their slots fresh or busy would otherwise shut every
    other source out); None when every source is within one of it."""
    held: dict[str, int] = {}
    for group in holders.values():
        held[group] = held.get(group, 0) + 1
    most = max(held.values(), default=0)
    if most < held.get(newcomer, 0) + 2:
        return None
    return min((c for c, group in holders.items() if held[group] == most), key=key)


class FrameBudget:
    """Bytes that frames still arriving may hold, summed over all connections.

    A decoder :meth:`reserve` s a large frame when its header announces it,
    taking ``take`` bytes of the budget then (:data:`FRAME_RESERVE_STEP`, or
    the whole frame if smaller), :meth:`grow` s what the frame holds as its
    body arrives (by as much as it has received, so that it holds at most
    twice the bytes that came, or one step), and :meth:`release` s it when
    the frame is complete or its connection closes. ``limit`` <= 0 turns the
    budget off. Why in steps: a reservation of the whole announced size cost
    its sender one header, and the pace rule only limits how long it is held
    (:data:`FRAME_PACE_GRACE`): members at a few addresses that announced
    large frames, sent nothing and reconnected every few seconds kept the
    budget full, and every honest large frame out, at the price of one
    handshake per frame per grace. Held in steps, the budget costs the bytes
    sent: a frame that never arrives holds one step. The price: a frame
    admitted is no longer sure to find room for its whole body; one that finds
    none when it must grow is cut (the node is busy), and gives back what it
    held to the others.

    One source may not claim it all: once the frames announced and not yet
    complete pass ``share_pressure`` x ``limit`` (half,
    :data:`SOURCE_SHARE_PRESSURE`), a large frame whose ``source`` (a
    :func:`source_of` key; its IPv6 /48 is counted too, see :func:`site_of`)
    already has unfinished large frames is refused when their announced sizes
    and its own would pass ``source_share`` x ``limit`` (``source_limit``).
    Shares are counted on announced sizes, not on the bytes held, so that a
    source's frames never hold more than it may announce, and a frame once
    started grows with its body without being cut for its source's share.
    Below the pressure, a busy honest host (a NAT, the daemons of a local
    swarm, all one source) may burst past its share. A source with no
    unfinished frame may always start one (within ``limit``), so a frame
    larger than the share is not shut out. A frame reserved without a source
    (tests, callers that know none) is only counted against ``limit``.

    Small frames (no larger than a decoder's staging area) are counted apart,
    against ``small_limit`` (:meth:`reserve_small`), whole: they must still
    get through when large frames have spent ``limit`` (a handshake message,
    an ack), yet many of them left unfinished must not hold memory without
    bound either. ``small_limit`` <= 0 leaves them uncounted.
    """

    def __init__(self, limit: int = DEFAULT_FRAME_BUDGET,
                 small_limit: int = DEFAULT_SMALL_FRAME_BUDGET, *,
                 source_share: float = SOURCE_FRAME_SHARE,
                 share_pressure: float = SOURCE_SHARE_PRESSURE,
                 step: int = FRAME_RESERVE_STEP) -> None:
        if not 0 < source_share <= 1:
            raise ValueError(f"source_share must be in (0, 1], got {source_share}")
        if not 0 <= share_pressure < 1:
            raise ValueError(f"share_pressure must be in [0, 1), got {share_pressure}")
        if step < 1:
            raise ValueError(f"step must be >= 1 byte, got {step}")
        self.limit = limit
        self.small_limit = small_limit
        #: Bytes a large frame takes when its header arrives (see the class doc).
        self.step = step
        #: Bytes the unfinished large frames of one source (or /48) may announce.
        self.source_limit = int(limit * source_share) if limit > 0 else 0
        #: Bytes announced by unfinished large frames beyond which the sources'
        #: shares apply.
        self.share_pressure = int(limit * share_pressure)
        #: Bytes held by unfinished large frames, and by unfinished small ones.
        self.held = 0
        self.small_held = 0
        #: The announced sizes of the unfinished large frames, summed.
        self.announced = 0
        #: The most ever held at once by large frames, and frames refused
        #: (large or small, at their header or when they had to grow), over
        #: the budget's life; of those refused, the ones refused because their
        #: source had announced its share (the node had room).
        self.peak = 0
        self.refused = 0
        self.refused_by_source = 0
        # source (and IPv6 /48) -> announced sizes of its unfinished large frames
        self._by_source: dict[str, int] = {}

    def held_by(self, source: str) -> int:
        """Bytes the unfinished large frames of ``source`` (a :func:`source_of`
        key, or a /48 from :func:`site_of`) announced: what they may come to
        hold, and what its share counts."""
        return self._by_source.get(source, 0)

    def over_share(self, size: int, source: str) -> str | None:
        """The source (or its /48) whose share a large frame of ``size`` bytes
        from ``source`` would pass, or None if it fits its share."""
        if self.source_limit <= 0:
            return None
        for group in _source_groups(source):
            holds = self._by_source.get(group, 0)
            if holds and holds + size > self.source_limit:
                return group
        return None

    def refused_share(self, size: int, source: str | None) -> str | None:
        """The source (or /48) whose share refuses a large frame of ``size`` bytes
        from ``source`` now (past the share pressure only), or None."""
        if source is None or self.announced + size <= self.share_pressure:
            return None
        return self.over_share(size, source)

    def reserve(self, size: int, source: str | None = None, *, take: int | None = None
                ) -> bool:
        """Admit a large frame of ``size`` bytes from ``source``, taking ``take``
        bytes of the budget for it now (default: all of it; see :meth:`grow`);
        False (nothing taken) if it would pass the source's share or ``take``
        the budget."""
        take = size if take is None else take
        if not 0 <= take <= size:
            raise ValueError(f"take must be in 0..{size} bytes, got {take}")
        if self.refused_share(size, source) is not None:
            self.refused += 1
            self.refused_by_source += 1
            return False
        if self.limit > 0 and self.held + take > self.limit:
            self.refused += 1
            return False
        if source is not None and self.source_limit > 0:
            for group in _source_groups(source):
                self._by_source[group] = self._by_source.get(group, 0) + size
        self.announced += size
        self.held += take
        self.peak = max(self.peak, self.held)
        return True

    def grow(self, more: int) -> bool:
        """Take ``more`` bytes for a frame :meth:`reserve` admitted, as its body
        arrives; False (nothing taken) if that would pass the budget. Only the
        budget of all frames applies: the frame's source had its share checked
        against the frame's whole size when it started."""
        if more < 0:
            raise ValueError(f"a frame grows by >= 0 bytes, got {more}")
        if self.limit > 0 and self.held + more > self.limit:
            self.refused += 1
            return False
        self.held += more
        self.peak = max(self.peak, self.held)
        return True

    def release(self, size: int, source: str | None = None, *, held: int | None = None
                ) -> None:
        """Give back a frame of ``size`` bytes that :meth:`reserve` admitted
        (with the same ``source``), which holds ``held`` bytes (default: all)."""
        held = size if held is None else held
        self.held -= held
        self.announced -= size
        if self.held < 0 or self.announced < 0:
            raise RuntimeError(f"frame budget released more than it held ({self.held} "
                               f"bytes held, {self.announced} announced)")
        if source is not None and self.source_limit > 0:
            for group in _source_groups(source):
                left = self._by_source.get(group, 0) - size
                if left < 0:
                    raise RuntimeError(f"frame budget released more than {group} held")
                if left:
                    self._by_source[group] = left
                else:
                    del self._by_source[group]

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


def _source_groups(source: str) -> tuple[str, ...]:
    """What a source's handshakes and frames count against: itself and, for an
    IPv6 /64, its /48 (one customer holds many /64s)."""
    site = site_of(source)
    return (source,) if site == source else (source, site)
