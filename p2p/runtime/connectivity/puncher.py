"""Hole punching (trio): moving relayed sessions to direct connections (:mod:`.punch`).

:class:`NodePunch` hears of every new relayed connection from the dialer, and
every ``RETRY`` seconds looks for relayed connections whose peer may be tried
again. The initiator's side: offer, then wait for the peer's reversal, or
synchronise and dial. The peer's side: answer offers that come over relayed
sessions, dial back (reversal) or dial at the sync. Every dial goes out from
a port of its own, bound before the addresses are exchanged and announced
with them: a NAT that keeps a source port it can keep (most do) then maps it to
itself, and no other connection (the other direction's punch, another host
behind the same NAT on the same listen port) holds the same pair of outside
addresses. A reversal dials the listen port. Both sides also accept on their
punch port; the peer serves the connection the initiator speaks on first (the
initiator runs the handshake on the first it gets) and closes the others.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

import trio

from common.address import HostPort, is_circuit, parse_host_port
from p2p.runtime.connectivity.driver import NodeConnectivity
from p2p.runtime.connectivity.punch import (
    DECLINED,
    PUNCH,
    REVERSE,
    PunchAnswer,
    PunchOffer,
    PunchPolicy,
    PunchSync,
    PunchSynced,
    Reverse,
    Reversed,
    usable_candidates,
)
from p2p.wire.dispatch import RequestDispatcher
from p2p.wire.handshake import PeerInfo
from p2p.wire.listen import REUSE_PORT, connect_from
from p2p.wire.messages import ERROR_REJECTED, Error
from p2p.wire.responder import Handover
from p2p.wire.stream import ConnectionFailure, Prepended
from p2p.wire.transport import PeerUnreachable, Transport, TransportError

__all__ = ["NodePunch"]

logger = logging.getLogger(__name__)

#: Seconds both sides keep dialling; a dropped SYN is sent again after 1 s, 3 s.
PUNCH_TIMEOUT = 10.0
#: Seconds between looks for relayed connections worth another try.
RETRY = 10.0
#: Seconds a peer's offer is remembered for its sync.
OFFER_TTL = 30.0


class NodePunch:
    """A node's hole punching (see the module docstring). ``candidates(port)``: where
    this node's punch from ``port`` may be reached; ``reachable()``: whether peers
    can dial it."""

    def __init__(self, transport: Transport, *, candidates: Callable[[int], list[str]],
                 reachable: Callable[[], bool], local_swarm: Callable[[], bool],
                 enabled: bool = True) -> None:
        self.t = transport
        self.candidates = candidates
        self.reachable = reachable
        self.local_swarm = local_swarm
        self.enabled = enabled
        self.policy = PunchPolicy()
        # peer -> its addresses, until when, and the port (held bound) we dial from
        self._offers: dict[bytes, tuple[list[HostPort], float, _Port]] = {}
        self._reversals: dict[bytes, tuple[str, trio.Event]] = {}  # peer -> (address, done)
        self._nursery: trio.Nursery | None = None

    @classmethod
    def for_node(cls, transport: object, connectivity: NodeConnectivity,
                 requests: RequestDispatcher, *, enabled: bool) -> NodePunch | None:
        """A node's hole punching, its handlers registered (None on a transport
        without sockets: an in-memory one cannot punch)."""
        if not isinstance(transport, Transport) or transport.closed:
            return None
        punch = cls(transport, candidates=connectivity.punch_candidates,
                    reachable=connectivity.reachable, local_swarm=connectivity.local_swarm,
                    enabled=enabled)
        punch.register(requests)
        return punch

    def register(self, requests: RequestDispatcher) -> None:
        requests.add(PunchOffer, self.serve_offer)
        requests.add(PunchSync, self.serve_sync)
        requests.add(Reverse, self.serve_reverse)

    async def run(self) -> None:
        """Upgrade relayed connections until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self.t.dialer.on_relayed = lambda address, peer: self._consider(address,
                                                                            peer.node_id)
            while True:
                await trio.sleep(RETRY)
                now = trio.current_time()
                for peer, (_, until, port) in list(self._offers.items()):
                    if until < now:  # never synced
                        del self._offers[peer]
                        port.close()
                for address, conn in list(self.t.dialer.pool.items()):
                    if conn.path == "relayed" and not conn.closed:
                        self._consider(address, conn.peer.node_id)

    def _consider(self, address: str, peer: bytes) -> None:
        now = trio.current_time()
        if self.enabled and self._nursery is not None and self.policy.should_try(peer, now):
            self.policy.started(peer)
            self._nursery.start_soon(self._upgrade, address, peer)

    # ------------------------------------------------------------------ initiator

    async def _upgrade(self, address: str, peer: bytes) -> None:
        how: str | None = None
        try:
            how = await self._attempt(address, peer)
        except (TransportError, OSError) as exc:
            logger.debug("hole punch with %s failed: %s", address, exc)
        finally:
            self.policy.finished(peer, how, trio.current_time())
        if how is not None:
            logger.info("direct connection to %s (%s), no longer through the relay",
                        address, "hole punch" if how == "punched" else "it dialled back")

    async def _attempt(self, address: str, peer: bytes) -> str | None:
        listen = self._listen()
        if listen is None:
            return None
        reachable = self.reachable()
        port = None if reachable else _Port.bind(listen)
        try:
            mine = self.candidates(listen.port if port is None else port.number)
            started = trio.current_time()
            answer = await self.t.request(address, PunchOffer(tuple(mine), reachable),
                                          node_id=peer)
            rtt = trio.current_time() - started
            if not isinstance(answer, PunchAnswer) or answer.mode == DECLINED:
                return None
            if answer.mode == REVERSE:
                return await self._await_reversal(address, peer)
            targets = usable_candidates(answer.addresses, local_swarm=self.local_swarm())
            if not targets or port is None:
                return None
            assert self._nursery is not None
            self._nursery.start_soon(self._sync, address, peer)
            await trio.sleep(rtt / 2)  # the sync reaches the peer then: both dial at once
            stream = await self._first(targets, port)
        finally:
            if port is not None:
                port.close()
        if stream is None:
            return None
        await self.t.dialer.adopt(address, stream, peer, "punched")
        return "punched"

    async def _await_reversal(self, address: str, peer: bytes) -> str | None:
        done = trio.Event()
        self._reversals[peer] = (address, done)
        with trio.move_on_after(2 * self.t.connect_timeout):
            await done.wait()
        self._reversals.pop(peer, None)
        return "reversed" if self.t.path_to(address) == "reversed" else None

    async def _sync(self, address: str, peer: bytes) -> None:
        try:
            await self.t.request(address, PunchSync(), node_id=peer)
        except TransportError as exc:
            logger.debug("hole punch sync with %s failed: %s", address, exc)

    def _listen(self) -> HostPort | None:
        """The listen address (its host ``""`` for every interface); None: not on TCP."""
        bound = self.t.bound_address
        if bound is None:
            return None
        local = parse_host_port(bound)
        return HostPort("" if local.host in ("0.0.0.0", "::") else local.host, local.port)

    async def _race(self, targets: list[HostPort], port: _Port,
                    take: Callable[[trio.SocketStream], bool]) -> None:
        """Connect ``port`` to ``targets``: dial each (again after each refusal) and
        accept on ``port``, handing every connection to ``take`` until it returns True
        or :data:`PUNCH_TIMEOUT` passes. Through NATs both dials meet as one
        connection (a simultaneous open); without a NAT in between one side's dial
        reaches the other's port first."""

        async def attempt(target: HostPort, scope: trio.CancelScope) -> None:
            while True:
                try:
                    stream = await connect_from(target.host, target.port, port.host,
                                                port.number)
                except OSError:
                    await trio.sleep(0.25)  # refused or unreachable: the peer's NAT opens soon
                    continue
                if take(stream):
                    scope.cancel()
                return

        async def accept(scope: trio.CancelScope) -> None:
            while True:
                sock, _ = await port.sock.accept()
                if take(trio.SocketStream(sock)):
                    scope.cancel()
                    return

        with trio.move_on_after(PUNCH_TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(accept, nursery.cancel_scope)
                for target in targets:
                    nursery.start_soon(attempt, target, nursery.cancel_scope)

    async def _first(self, targets: list[HostPort], port: _Port) -> trio.SocketStream | None:
        """The initiator's side of :meth:`_race`: the first connection (it runs the
        handshake on it); any later one is closed."""
        won: list[trio.SocketStream] = []

        def take(stream: trio.SocketStream) -> bool:
            won.append(stream)
            return True

        await self._race(targets, port, take)
        for extra in won[1:]:
            await trio.aclose_forcefully(extra)
        return won[0] if won else None

    # ------------------------------------------------------------------ the peer's side

    async def serve_offer(self, peer: PeerInfo, msg: PunchOffer) -> PunchAnswer | Error:
        if not is_circuit(peer.remote):
            return Error(ERROR_REJECTED, "hole punching is for sessions through a relay")
        why = "hole punching is off here (relay.hole_punch)" if not self.enabled else \
            self.policy.admit_offer(peer.node_id, trio.current_time())
        if why:
            return PunchAnswer(DECLINED, (), why)
        targets = usable_candidates(msg.addresses, local_swarm=self.local_swarm())
        listen = self._listen()
        if not targets or listen is None:
            return PunchAnswer(DECLINED, (), "no address to dial")
        assert self._nursery is not None
        if msg.reachable:
            self._nursery.start_soon(self._reverse, str(targets[0]), peer.node_id)
            return PunchAnswer(REVERSE, (), "")
        try:
            port = _Port.bind(listen)
        except OSError as exc:  # no port left: as if behind a symmetric NAT
            logger.warning("cannot bind a port for a hole punch: %s", exc)
            return PunchAnswer(DECLINED, (), "no port to punch from")
        old = self._offers.pop(peer.node_id, None)
        if old is not None:
            old[2].close()
        self._offers[peer.node_id] = (targets, trio.current_time() + OFFER_TTL, port)
        return PunchAnswer(PUNCH, tuple(self.candidates(port.number)), "")

    async def serve_sync(self, peer: PeerInfo, msg: PunchSync) -> PunchSynced | Error:
        offer = self._offers.pop(peer.node_id, None)
        if offer is None or trio.current_time() > offer[1]:
            if offer is not None:
                offer[2].close()
            return Error(ERROR_REJECTED, "no hole punch agreed with you")
        assert self._nursery is not None
        self._nursery.start_soon(self._dial_and_serve, offer[0], offer[2])
        return PunchSynced()

    async def _dial_and_serve(self, targets: list[HostPort], port: _Port) -> None:
        """Dial at the sync and accept; serve the connection on which the initiator
        speaks first (it runs the handshake on the one it got first, which may not be
        the one this side got first); the others stay mute and are closed."""
        spoken = trio.Event()

        async def hear(stream: trio.SocketStream) -> None:
            first = b""
            with trio.move_on_after(self.t.connect_timeout):
                try:
                    first = bytes(await stream.receive_some(4096))
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass
            handler = self.t.handler
            if not first or spoken.is_set() or handler is None:
                await trio.aclose_forcefully(stream)
                return
            spoken.set()
            await self.t.serve_stream(Prepended(first, stream), handler, _remote(stream))

        def take(stream: trio.SocketStream) -> bool:
            assert self._nursery is not None
            self._nursery.start_soon(hear, stream)
            return False

        try:
            with trio.move_on_after(PUNCH_TIMEOUT + self.t.connect_timeout):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._race, targets, port, take)
                    await spoken.wait()
                    nursery.cancel_scope.cancel()
        finally:
            port.close()

    async def _reverse(self, address: str, peer: bytes) -> None:
        """Dial the initiator at ``address`` and hand the connection to it."""
        handler = self.t.handler
        try:
            async with self.t.dialer.session(address, peer) as (ms, _):
                ms.set_receive_limit(ms.max_frame_size, exact=True)
                await ms.send(Reverse())
                reply = await ms.receive(self.t.read_timeout, self.t.read_timeout)
                if not isinstance(reply, Reversed) or handler is None:
                    return
                stream = ms.detach()
        except (PeerUnreachable, ConnectionFailure) as exc:
            logger.debug("dialling back %s failed: %s", address, exc)
            return
        await self.t.serve_stream(stream, handler, address)

    async def serve_reverse(self, peer: PeerInfo, msg: Reverse) -> Handover | Error:
        expected = self._reversals.get(peer.node_id)
        if expected is None:
            return Error(ERROR_REJECTED, "no connection reversal expected from you")
        address, done = expected

        async def adopt(stream: trio.abc.Stream, _: PeerInfo) -> None:
            try:
                await self.t.dialer.adopt(address, stream, peer.node_id, "reversed")
            except PeerUnreachable as exc:
                logger.debug("connection reversal from %s failed: %s", address, exc)
            done.set()

        return Handover(Reversed(), adopt, close=False)

    def status(self) -> dict[str, int]:
        return self.policy.status()


def _remote(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        return "unknown"
    return str(HostPort(host, port))


class _Port:
    """A port of its own for one hole punch, bound and listening (``SO_REUSEPORT``: the
    dials share it) from the moment it is announced until the punch is over."""

    def __init__(self, sock: socket.socket, host: str) -> None:
        self.sock = trio.socket.from_stdlib_socket(sock)
        self.host = host
        self.number: int = sock.getsockname()[1]

    @classmethod
    def bind(cls, listen: HostPort) -> _Port:
        """A fresh port on the listener's host (OSError if none can be bound)."""
        family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if REUSE_PORT:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((listen.host or ("::" if family == socket.AF_INET6 else "0.0.0.0"), 0))
            sock.listen(4)
        except OSError:
            sock.close()
            raise
        return cls(sock, listen.host)

    def close(self) -> None:
        self.sock.close()
