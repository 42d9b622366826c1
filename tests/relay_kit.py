"""What the relay tests share: a relay, a node behind a NAT that reserves with it, and
a peer that reaches that node through it, on one in-memory network (:func:`relay_lab`)
or over sockets, punching holes (:func:`punch_pair`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from common.address import HostPort
from p2p.runtime.connectivity.puncher import NodePunch
from p2p.runtime.protocol import register_node_messages
from p2p.runtime.relay.client import RelayReservations
from p2p.runtime.relay.service import RelayService
from p2p.testing import MemoryNetwork, wait_until
from p2p.wire import codec
from p2p.wire.circuit import RelayLimits
from p2p.wire.codec import Message
from p2p.wire.dispatch import RequestDispatcher
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.transport import Transport

RELAY = "203.0.113.1:7661"
BEHIND = "10.1.0.10:7661"  # a node behind a NAT: nobody can dial it
PEER = "10.2.0.10:7661"


@dataclass(frozen=True)
class Echo:
    """A request answered with itself (what a push is to the relay: bytes)."""

    data: bytes


codec.register(Echo, "relay_test_echo")


@dataclass
class Lab:
    net: MemoryNetwork
    relay: Transport
    service: RelayService
    behind: Transport
    reservations: RelayReservations
    peer: Transport
    received: list[bytes] = field(default_factory=list)  # what the node behind got
    dialled: list[str] = field(default_factory=list)  # every address anyone connected to

    @property
    def circuit(self) -> str:
        return f"{RELAY}/circuit/{self.behind.identity.node_id.hex()}"


@asynccontextmanager
async def relay_lab(*, swarm_key: bytes | None = None, limits: RelayLimits | None = None,
                    service: type[RelayService] = RelayService,
                    waiting: int = 1) -> AsyncIterator[Lab]:
    """A relay, a node behind a NAT holding a reservation with it (already active),
    and a peer; yields once the reservation holds."""
    register_node_messages()
    net = MemoryNetwork(seed=1)
    dialled: list[str] = []
    connect = net.connect

    async def recording_connect(address: str) -> trio.abc.Stream:
        dialled.append(address)
        return await connect(address)

    net.connect = recording_connect  # type: ignore[method-assign]
    relay = net.transport(Identity.generate(), RELAY, swarm_key=swarm_key)
    behind = net.transport(Identity.generate(), BEHIND, swarm_key=swarm_key)
    peer = net.transport(Identity.generate(), PEER, swarm_key=swarm_key)
    net.unreachable.add(BEHIND)
    svc = service(limits or RelayLimits(), serving=lambda: True, node_id=relay.identity.node_id)
    relay.local_circuit = svc.local_circuit
    relay_requests = RequestDispatcher()
    svc.register(relay_requests)
    received: list[bytes] = []

    async def echo(peer_info: PeerInfo, msg: Echo) -> Message:
        received.append(msg.data)
        return Echo(msg.data)

    behind_requests = RequestDispatcher()
    behind_requests.add(Echo, echo)
    reservations = RelayReservations(behind, behind.identity.node_id,
                                     candidates=lambda: [(RELAY, None)], on_change=lambda: None,
                                     wanted=1, waiting=waiting)
    reservations.needed = True
    async with trio.open_nursery() as nursery:
        await nursery.start(relay.serve, relay_requests)
        await nursery.start(behind.serve, behind_requests)
        await nursery.start(peer.serve, RequestDispatcher())
        nursery.start_soon(svc.run)
        nursery.start_soon(reservations.run)
        await wait_until(lambda: reservations.relayed_addresses(trio.current_time()),
                         what="the reservation holds")
        lab = Lab(net, relay, svc, behind, reservations, peer, received, dialled)
        yield lab
        nursery.cancel_scope.cancel()
    for t in (relay, behind, peer):
        await t.aclose()


@dataclass
class Pair:
    relay: Transport
    behind: Transport
    peer: Transport
    behind_punch: NodePunch
    peer_punch: NodePunch
    circuit: str
    remotes: list[str]  # how the node behind saw each request's connection


@asynccontextmanager
async def punch_pair(*, host: str = "127.0.0.1", peer_reachable: bool = False,
                     behind_offers: list[str] | None = None,
                     peer_offers: list[str] | None = None) -> AsyncIterator[Pair]:
    """A relay, a node reachable only through it (it reserved) and a peer, over real
    sockets on ``host``; each punches holes (:class:`NodePunch`) with ``host`` as
    its only candidate (``behind_offers``, ``peer_offers``: each side's instead)."""
    register_node_messages()
    relay, behind, peer = (Transport(Identity.generate(), host, 0, connect_timeout=5.0)
                           for _ in range(3))
    service = RelayService(RelayLimits(), serving=lambda: True)
    relay_requests = RequestDispatcher()
    service.register(relay_requests)
    remotes: list[str] = []

    async def echo(info: PeerInfo, msg: Echo) -> Message:
        remotes.append(info.remote)
        return Echo(msg.data)

    def punch(t: Transport, reachable: bool, offers: list[str] | None) -> NodePunch:
        return NodePunch(t, candidates=lambda port: offers if offers is not None else [
            str(HostPort(host, port))], reachable=lambda: reachable, local_swarm=lambda: True)

    behind_punch = punch(behind, False, behind_offers)
    peer_punch = punch(peer, peer_reachable, peer_offers)
    behind_requests, peer_requests = RequestDispatcher(), RequestDispatcher()
    behind_requests.add(Echo, echo)
    behind_punch.register(behind_requests)
    peer_punch.register(peer_requests)
    async with trio.open_nursery() as nursery:
        relay_address = await nursery.start(relay.serve, relay_requests)
        await nursery.start(behind.serve, behind_requests)
        await nursery.start(peer.serve, peer_requests)
        reservations = RelayReservations(behind, behind.identity.node_id,
                                         candidates=lambda: [(relay_address, None)],
                                         on_change=lambda: None, wanted=1)
        reservations.needed = True
        nursery.start_soon(reservations.run)
        nursery.start_soon(behind_punch.run)
        nursery.start_soon(peer_punch.run)
        await wait_until(lambda: reservations.relayed_addresses(trio.current_time()))
        circuit = reservations.relayed_addresses(trio.current_time())[0]
        yield Pair(relay, behind, peer, behind_punch, peer_punch, circuit, remotes)
        nursery.cancel_scope.cancel()
    for t in (relay, behind, peer):
        await t.aclose()
