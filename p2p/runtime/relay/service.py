"""A relay's service (trio): reservations wait here, circuits are piped here.

``RelayWait`` holds the connection of a node that reserved until a circuit
for it comes (then the connection is handed over to the circuit) or up to
``KEEPALIVE`` seconds pass (then :class:`RelayIdle` is answered and the node
waits again: the connection stays fresh through its NAT). ``RelayConnect``
claims one of the target's waiting connections and pipes the two: bytes are
copied as they come, each way at most ``circuit_rate`` bytes per second, for
at most ``circuit_duration`` seconds, and counted. The relay only forwards
bytes: the two nodes' session is sealed end to end (:mod:`p2p.wire.circuit`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from p2p.runtime.relay.book import RelayBook, RelayLimits
from p2p.wire.admission import source_of
from p2p.wire.circuit import (
    RelayConnect,
    RelayConnected,
    RelayIdle,
    RelayIncoming,
    RelayLimit,
    RelayWait,
)
from p2p.wire.dispatch import RequestDispatcher
from p2p.wire.errors import PeerUnreachable
from p2p.wire.handshake import PeerInfo
from p2p.wire.messages import ERROR_REJECTED, Error
from p2p.wire.responder import Handover

__all__ = ["CLAIM_WAIT", "JOIN_WAIT", "KEEPALIVE", "RelayService"]

logger = logging.getLogger(__name__)

#: Seconds a reservation's connection waits before it is answered :class:`RelayIdle`
#: (below the 15 s after which a silent session may be closed).
KEEPALIVE = 10.0
#: Seconds a circuit request waits for one of the target's connections to be free.
CLAIM_WAIT = 2.0
#: Seconds one side of a circuit waits for the other to be handed over.
JOIN_WAIT = 10.0
_CHUNK = 64 * 1024


class _Bucket:
    """Token bucket: ``rate`` bytes per second, bursts of one chunk (0: unlimited)."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.capacity = float(max(rate // 4, _CHUNK)) if rate else 0.0
        self.tokens = self.capacity
        self.updated = trio.current_time()

    async def take(self, nbytes: int) -> None:
        if not self.rate:
            return
        now = trio.current_time()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        self.tokens -= nbytes
        if self.tokens < 0:
            await trio.sleep(-self.tokens / self.rate)


class _Circuit:
    """Two handed-over connections, piped once both are there."""

    def __init__(self, book: RelayBook, cid: int, initiator: bytes,
                 forget: Callable[[int], object]) -> None:
        self.book = book
        self.service_forget = forget
        self.ended = False
        self.cid = cid
        self.initiator = initiator
        self.streams: list[trio.abc.Stream | None] = [None, None]
        self.joined = trio.Event()
        self.scopes: list[trio.CancelScope] = []
        self.opened = trio.current_time()
        self.claimed = False  # a waiting connection of the target was given to it

    def end(self) -> None:
        """Stop both ways now (or never start them)."""
        self.ended = True
        for scope in self.scopes:
            scope.cancel()
        self.joined.set()

    async def run(self, side: int, stream: trio.abc.Stream) -> None:
        """Side 0 (the initiator's) or 1 (the target's): copy what comes in on
        ``stream`` to the other side until either ends, the duration is up, or
        the other side never comes."""
        self.streams[side] = stream
        if all(s is not None for s in self.streams):
            self.joined.set()
        limits = self.book.limits
        try:
            # from the circuit's opening, not this side's start (late under load): a
            # circuit holds its slot at most circuit_duration seconds, waiting included
            with trio.move_on_at(self.opened + min(JOIN_WAIT, limits.circuit_duration)):
                await self.joined.wait()
            other = self.streams[1 - side]
            if not self.joined.is_set() or other is None or self.ended:
                return
            with trio.CancelScope(deadline=self.opened + limits.circuit_duration) as scope:
                self.scopes.append(scope)
                await self._copy(stream, other, side, _Bucket(limits.circuit_rate))
        finally:
            self.end()
            record = self.book.close(self.cid)
            self.service_forget(self.cid)
            if record is not None:
                logger.debug("circuit %d closed after %.1f s: %d / %d bytes", self.cid,
                             trio.current_time() - record.opened, *record.sent)

    async def _copy(self, src: trio.abc.Stream, dst: trio.abc.Stream, direction: int,
                    bucket: _Bucket) -> None:
        try:
            while True:
                data = await src.receive_some(_CHUNK)
                if not data:
                    return
                await bucket.take(len(data))
                await dst.send_all(data)
                self.book.count(self.cid, direction, len(data))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return


class _Waiting:
    """A reservation's connection waiting for a circuit."""

    def __init__(self) -> None:
        self.circuit: _Circuit | None = None
        self.claimed = trio.Event()


class RelayService:
    """The handlers of a relay. ``serving()`` says whether this node relays now
    (``relay.serve``, and not found unreachable)."""

    def __init__(self, limits: RelayLimits, *, serving: Callable[[], bool],
                 node_id: bytes = b"") -> None:
        self.book = RelayBook(limits)
        self.serving = serving
        self.node_id = node_id  # this relay's own: the initiator of its local circuits
        self._nursery: trio.Nursery | None = None
        self._waiting: dict[bytes, list[_Waiting]] = {}
        self._circuits: dict[int, _Circuit] = {}  # open, by id
        self._freed = trio.Event()  # a connection started waiting

    def register(self, requests: RequestDispatcher) -> None:
        requests.add(RelayWait, self.serve_wait)
        requests.add(RelayConnect, self.serve_connect)

    @property
    def limit(self) -> RelayLimit:
        lim = self.book.limits
        return RelayLimit(lim.circuit_duration, lim.circuit_rate)

    def _refuse(self, why: str) -> Error:
        return Error(ERROR_REJECTED, why)

    async def serve_wait(self, peer: PeerInfo, msg: RelayWait) -> Error | RelayIdle | Handover:
        if not self.serving():
            return self._refuse("this node is not a relay (relay.serve is off)")
        now = trio.current_time()
        why = self.book.wait(peer.node_id, source_of(peer.remote), now)
        if why is not None:
            return self._refuse(f"reservation refused: {why}")
        slot = _Waiting()
        slots = self._waiting.setdefault(peer.node_id, [])
        slots.append(slot)
        self._freed.set()
        self._freed = trio.Event()
        try:
            with trio.move_on_after(min(max(msg.seconds, 0.0), KEEPALIVE)):
                await slot.claimed.wait()
        finally:
            if slot in slots:
                slots.remove(slot)
            if not slots:
                self._waiting.pop(peer.node_id, None)
            self.book.end_wait(peer.node_id, trio.current_time())
        circuit = slot.circuit
        if circuit is None:
            return RelayIdle(self.book.limits.reservation_ttl, self.limit)
        return Handover(RelayIncoming(circuit.initiator, self.limit),
                        lambda stream, _: circuit.run(1, self.wrap(stream, 1)))

    async def serve_connect(self, peer: PeerInfo,
                            msg: RelayConnect) -> Error | RelayConnected | Handover:
        if not self.serving():
            return self._refuse("this node is not a relay (relay.serve is off)")
        cid, why, evicted = self.book.open(peer.node_id, source_of(peer.remote), msg.target,
                                           trio.current_time())
        if cid is None:
            return self._refuse(f"circuit refused: {why}")
        for old in evicted:  # closed to make room (fair shares): the book forgot them
            gone = self._circuits.pop(old, None)
            if gone is not None:
                gone.end()
        circuit = self._circuits[cid] = _Circuit(self.book, cid, peer.node_id,
                                                 lambda c: self._circuits.pop(c, None))
        with trio.move_on_after(CLAIM_WAIT):
            while not self._claim(msg.target, circuit):
                await self._freed.wait()
        if not circuit.claimed:
            self._circuits.pop(cid, None)
            self.book.close(cid)
            return self._refuse("circuit refused: the target has no connection waiting at "
                                "the moment (busy); try again")
        return Handover(RelayConnected(self.limit),
                        lambda stream, _: circuit.run(0, self.wrap(stream, 0)))

    def wrap(self, stream: trio.abc.Stream, side: int) -> trio.abc.Stream:
        """The stream a circuit copies from and to (side 0: the initiator's, 1: the
        target's). Here the connection itself; the tests' hostile relays
        substitute one that records or flips bits."""
        return stream

    async def run(self) -> None:
        """Pipe this node's own circuits (:meth:`local_circuit`) until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await trio.sleep_forever()

    async def local_circuit(self, target: bytes) -> trio.abc.Stream:
        """A circuit from this node itself to ``target``, which reserved here (the
        node dials a peer whose relayed address is its own): one end of a socket
        pair, the other piped like any initiator's connection. Raises
        :class:`PeerUnreachable` when the books refuse."""
        address = f"(this relay)/circuit/{target.hex()}"
        if not self.serving() or self._nursery is None:
            raise PeerUnreachable(address, "this node does not relay now")
        cid, why, evicted = self.book.open(self.node_id, "local", target, trio.current_time())
        if cid is None:
            raise PeerUnreachable(address, f"circuit refused: {why}")
        for old in evicted:
            gone = self._circuits.pop(old, None)
            if gone is not None:
                gone.end()
        circuit = self._circuits[cid] = _Circuit(self.book, cid, self.node_id,
                                                 lambda c: self._circuits.pop(c, None))
        with trio.move_on_after(CLAIM_WAIT):
            while not self._claim(target, circuit):
                await self._freed.wait()
        if not circuit.claimed:
            self._circuits.pop(cid, None)
            self.book.close(cid)
            raise PeerUnreachable(address, "the target has no connection waiting here")
        mine, theirs = trio.socket.socketpair()
        self._nursery.start_soon(_run_and_close, circuit, trio.SocketStream(theirs))
        return trio.SocketStream(mine)

    def _claim(self, target: bytes, circuit: _Circuit) -> bool:
        """Give ``circuit`` a waiting connection of ``target``; False if none is free."""
        for slot in self._waiting.get(target, []):
            if slot.circuit is None:
                slot.circuit = circuit
                slot.claimed.set()
                circuit.claimed = True
                return True
        return False

    def status(self) -> dict[str, int]:
        return self.book.status()


async def _run_and_close(circuit: _Circuit, stream: trio.SocketStream) -> None:
    try:
        await circuit.run(0, stream)
    finally:
        await trio.aclose_forcefully(stream)
