"""Hole punching (trio): moving relayed sessions to direct connections (:mod:`.punch`).

:class:`NodePunch` hears of every new relayed connection from the dialer, and
every ``RETRY`` seconds looks for relayed connections whose peer may be tried
again. The initiator's side: offer, then wait for the peer's reversal, or
synchronise and dial. The peer's side: answer offers that come over relayed
sessions, dial back (reversal) or dial at the sync. Every dial goes out from
the listen port (``SO_REUSEPORT``). A connection this node dialled to the
initiator is served only once the initiator speaks first (it runs the
handshake); one the initiator dialled is served by the listener as usual.
"""

from __future__ import annotations

import logging
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
from p2p.wire.listen import connect_from
from p2p.wire.messages import ERROR_REJECTED, Error
from p2p.wire.responder import Handover
from p2p.wire.stream import ConnectionFailure, Prepended
from p2p.wire.transport import PeerUnreachable, Transport, TransportError

__all__ = ["NodePunch"]

logger = logging.getLogger(__name__)

#: Seconds both sides keep dialling; a dropped SYN is sent again after 1 s, 3 s.
PUNCH_TIMEOUT = 10.0
#: Seconds between looks for relayed connections worth another try.
RETRY = 30.0
#: Seconds a peer's offer is remembered for its sync.
OFFER_TTL = 30.0


class NodePunch:
    """A node's hole punching (see the module docstring). ``candidates()``: where
    this node may be reached; ``reachable()``: whether peers can dial it."""

    def __init__(self, transport: Transport, *, candidates: Callable[[], list[str]],
                 reachable: Callable[[], bool], local_swarm: Callable[[], bool],
                 enabled: bool = True) -> None:
        self.t = transport
        self.candidates = candidates
        self.reachable = reachable
        self.local_swarm = local_swarm
        self.enabled = enabled
        self.policy = PunchPolicy()
        self._offers: dict[bytes, tuple[list[HostPort], float]] = {}  # peer -> its addresses
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
        except TransportError as exc:
            logger.debug("hole punch with %s failed: %s", address, exc)
        finally:
            self.policy.finished(peer, how, trio.current_time())
        if how is not None:
            logger.info("direct connection to %s (%s), no longer through the relay",
                        address, "hole punch" if how == "punched" else "it dialled back")

    async def _attempt(self, address: str, peer: bytes) -> str | None:
        reachable = self.reachable()
        started = trio.current_time()
        answer = await self.t.request(address, PunchOffer(tuple(self.candidates()), reachable),
                                      node_id=peer)
        rtt = trio.current_time() - started
        if not isinstance(answer, PunchAnswer) or answer.mode == DECLINED:
            return None
        if answer.mode == REVERSE:
            done = trio.Event()
            self._reversals[peer] = (address, done)
            with trio.move_on_after(2 * self.t.connect_timeout):
                await done.wait()
            self._reversals.pop(peer, None)
            return "reversed" if self.t.path_to(address) == "reversed" else None
        targets = usable_candidates(answer.addresses, local_swarm=self.local_swarm())
        if not targets:
            return None
        assert self._nursery is not None
        self._nursery.start_soon(self._sync, address, peer)
        await trio.sleep(rtt / 2)  # the sync reaches the peer then: both dial at once
        stream = await self._race(targets)
        if stream is None:
            return None
        await self.t.dialer.adopt(address, stream, peer, "punched")
        return "punched"

    async def _sync(self, address: str, peer: bytes) -> None:
        try:
            await self.t.request(address, PunchSync(), node_id=peer)
        except TransportError as exc:
            logger.debug("hole punch sync with %s failed: %s", address, exc)

    async def _race(self, targets: list[HostPort]) -> trio.SocketStream | None:
        """The first connection to any of ``targets``, dialled from the listen port
        and again after each refusal, within :data:`PUNCH_TIMEOUT`."""
        bound = self.t.bound_address
        if bound is None:
            return None
        local = parse_host_port(bound)
        here = "" if local.host in ("0.0.0.0", "::") else local.host
        won: list[trio.SocketStream] = []

        async def attempt(target: HostPort, scope: trio.CancelScope) -> None:
            while True:
                try:
                    stream = await connect_from(target.host, target.port, here, local.port)
                except OSError:
                    await trio.sleep(0.25)  # refused or unreachable: the peer's NAT opens soon
                    continue
                if won:
                    await trio.aclose_forcefully(stream)
                else:
                    won.append(stream)
                    scope.cancel()
                return

        with trio.move_on_after(PUNCH_TIMEOUT):
            async with trio.open_nursery() as nursery:
                for target in targets:
                    nursery.start_soon(attempt, target, nursery.cancel_scope)
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
        if not targets:
            return PunchAnswer(DECLINED, (), "no address to dial")
        assert self._nursery is not None
        if msg.reachable:
            self._nursery.start_soon(self._reverse, str(targets[0]), peer.node_id)
            return PunchAnswer(REVERSE, (), "")
        self._offers[peer.node_id] = (targets, trio.current_time() + OFFER_TTL)
        return PunchAnswer(PUNCH, tuple(self.candidates()), "")

    async def serve_sync(self, peer: PeerInfo, msg: PunchSync) -> PunchSynced | Error:
        targets, until = self._offers.pop(peer.node_id, ([], 0.0))
        if not targets or trio.current_time() > until:
            return Error(ERROR_REJECTED, "no hole punch agreed with you")
        assert self._nursery is not None
        self._nursery.start_soon(self._dial_and_serve, targets)
        return PunchSynced()

    async def _dial_and_serve(self, targets: list[HostPort]) -> None:
        """Dial at the sync; serve what connects once the initiator speaks first (its
        own dial may have reached our listener instead: then this one stays mute)."""
        stream = await self._race(targets)
        handler = self.t.handler
        if stream is None or handler is None:
            return
        first = b""
        with trio.move_on_after(self.t.connect_timeout):
            try:
                first = bytes(await stream.receive_some(4096))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        if not first:
            await trio.aclose_forcefully(stream)
            return
        await self.t.serve_stream(Prepended(first, stream), handler, _remote(stream))

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
