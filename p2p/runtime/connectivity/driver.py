"""The node's connectivity task (trio): learn its observed address, ask for dial-backs,
advertise what peers can dial, serve other peers' dial-backs.

Every ``PROBE_INTERVAL`` (every ``UNSETTLED_INTERVAL`` while reachability is
unknown, backing off while no peer answers) it asks up to ``PROBES`` peers (bootstrap and sampled) what address
they see (``Observe``), then, while its reachability is not settled, asks them
to dial it back (:mod:`.dialback`). When the address worth advertising changes
(:class:`.reachability.Reachability`), or the relays holding its reservations
(:class:`~p2p.runtime.relay.host.NodeRelay`), the transport's HELLO and the
signed descriptor follow. Names (``node.advertise``, bootstrap) are resolved here:
one that does not resolve is a line in the log and in ``p2p status``, and is
tried again. See docs/guide/deployment.md.
"""

from __future__ import annotations

import logging
import random
import socket
from collections.abc import Callable, Sequence

import trio

from common.address import NAME, AddressError, HostPort, address_scope, parse_host_port
from p2p.runtime.connectivity.dialback import DialBackGate, DialBackReply, DialBackRequest
from p2p.runtime.connectivity.reachability import (
    Reachability,
    ReachabilityStatus,
    plan_addresses,
    wants_relay,
)
from p2p.runtime.node_transport import NodeTransport
from p2p.runtime.relay.host import NodeRelay
from p2p.wire.handshake import PeerInfo
from p2p.wire.messages import Observe, Observed, Ping, Pong
from p2p.wire.peer_text import printable
from p2p.wire.transport import PeerUnreachable, Transport, TransportError
from peersampling import PeerSampler

__all__ = ["NodeConnectivity", "interface_host"]

logger = logging.getLogger(__name__)

#: Peers asked per probe, and seconds between probes once reachability is settled
#: (while it is not: UNSETTLED_INTERVAL).
PROBES = 3
PROBE_INTERVAL = 60.0
UNSETTLED_INTERVAL = 10.0
FIRST_PROBE = 1.0
MAX_BACKOFF = 300.0
#: Seconds after which a settled reachability ("yes"/"no") is checked again.
RECHECK = 600.0


#: Where the interface probe "connects" when no peer has an IP: a documentation
#: address (TEST-NET-1); a UDP connect only asks the routing table, nothing is sent.
_ANY_ROUTE = HostPort("192.0.2.1", 9)


def interface_host(toward: Sequence[HostPort]) -> str | None:
    """The address of the interface that routes to the first of ``toward`` (names are
    resolved; unspecified hosts skipped), else to any host; None if there is no route.

    A UDP socket's ``connect`` picks the source address the kernel would use and
    sends nothing. Loopback answers count only for loopback targets.
    """
    for target in [*toward, _ANY_ROUTE]:
        scope = address_scope(target.host)
        if scope == "unspecified":
            continue
        try:
            infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_DGRAM)
        except OSError:
            continue
        for family, _, _, _, sockaddr in infos:
            try:
                with socket.socket(family, socket.SOCK_DGRAM) as s:
                    s.connect(sockaddr)
                    host = str(s.getsockname()[0])
            except OSError:
                continue
            if address_scope(host) not in ("loopback", "unspecified") or scope == "loopback":
                return host
    return None


class NodeConnectivity:
    """A node's reachability: its core, the probe task and the dial-back service.

    ``transport``: the node's; probing needs a TCP :class:`Transport` (an injected
    in-memory one is not probed: nothing on it has an IP). ``bootstrap``: the
    configured bootstrap addresses.
    """

    def __init__(self, transport: NodeTransport, *, advertise: HostPort | None,
                 bootstrap: Sequence[HostPort], seed: int | None = None,
                 relay: NodeRelay | None = None) -> None:
        self.transport = transport
        self.advertise = advertise
        self.bootstrap = list(bootstrap)
        self.gate = DialBackGate()
        self.core: Reachability | None = None  # made once the transport is bound
        self.relay = relay
        self._rng = random.Random(seed)
        self._sampler: PeerSampler | None = None
        self._settled_at = -RECHECK  # when reachability last became settled
        self._direct = ""  # the address when nothing is probed (an in-memory transport)
        self._relay_tags: frozenset[bytes] = frozenset()
        #: Called when what the node adds to its tags changes (it starts or stops relaying).
        self.on_tags: Callable[[], None] | None = None

    @property
    def probing(self) -> bool:
        """Whether this node probes its own reachability (a TCP transport)."""
        return isinstance(self.transport, Transport) and self.transport.bound_address is not None

    def start(self, bound: str) -> str:
        """The transport listens on ``bound``: the address to advertise first."""
        listen = _host_port(bound)
        self._direct = self.transport.listen_address
        if listen is not None and self.probing:
            self.core = Reachability(listen, self.advertise,
                                     interface_host=interface_host([*self.bootstrap, listen]))
        return self._apply(trio.current_time())

    def refresh(self) -> None:
        """Advertise again (the relays holding this node's reservations changed)."""
        self._apply(trio.current_time())

    def attach(self, sampler: PeerSampler) -> None:
        """Peer sampling started: its descriptor follows the advertised address, and
        a peer that does not answer at its address is tried at its descriptor's
        alternates."""
        self._sampler = sampler
        if isinstance(self.transport, Transport):
            self.transport.dialer.alternates = self._alternates_of

    def _alternates_of(self, address: str) -> tuple[str, ...]:
        sampler = self._sampler
        if sampler is not None:
            for entry in sampler.peer_entries():
                if entry.descriptor.address == address:
                    return entry.descriptor.alternates
        return ()

    def punch_candidates(self, port: int) -> list[str]:
        """Where peers may reach this node's hole punch from ``port`` (none when
        not probed)."""
        return [] if self.core is None else self.core.punch_candidates(port)

    def reachable(self) -> bool:
        """Whether peers could dial this node back."""
        return self.core is not None and self.core.reachable(trio.current_time())[0] == "yes"

    def local_swarm(self) -> bool:
        """Whether the node listens on loopback (a swarm on this host only)."""
        return self.core is not None and self.core.local_swarm

    def status(self) -> ReachabilityStatus:
        if self.core is None:
            return ReachabilityStatus("unknown", "not probed: in-memory transport",
                                      self.transport.listen_address, ())
        return self.core.status(trio.current_time())

    # ------------------------------------------------------------------ probing

    async def run(self) -> None:
        """Probe until cancelled (returns at once when not :attr:`probing`)."""
        core = self.core
        if core is None:
            return
        await trio.sleep(FIRST_PROBE)
        backoff = FIRST_PROBE
        while True:
            await self._check_names(core)
            answered = await self._probe(core)
            now = trio.current_time()
            self._apply(now)
            unsettled = core.reachable(now)[0] == "unknown"
            backoff = (UNSETTLED_INTERVAL if unsettled else PROBE_INTERVAL) if answered \
                else min(MAX_BACKOFF, max(2.0, backoff * 2))
            await trio.sleep(backoff)

    async def _check_names(self, core: Reachability) -> None:
        problems = []
        for name, what in ([(self.advertise, "node.advertise")] if self.advertise else []) + [
                (b, "bootstrap") for b in self.bootstrap]:
            if name is None or address_scope(name.host) != NAME:
                continue
            try:
                await trio.socket.getaddrinfo(name.host, name.port, type=socket.SOCK_STREAM)
            except OSError as exc:
                problems.append(f"{what} host {name.host!r} does not resolve ({exc}); "
                                "retrying")
        problem = "; ".join(problems)
        if problem and problem != core.problem:
            logger.warning("%s", problem)
        core.problem = problem

    def _peers(self) -> list[tuple[str, bytes | None]]:
        """Up to :data:`PROBES` peers to ask: sampled ones first, then bootstrap."""
        out: list[tuple[str, bytes | None]] = []
        if self._sampler is not None:
            view = list(self._sampler.view())
            self._rng.shuffle(view)
            out += [(d.address, d.node_id) for d in view]
        out += [(str(b), None) for b in self.bootstrap]
        seen: set[str] = set()
        picked = []
        for address, node_id in out:
            if address not in seen and address != self.transport.listen_address:
                seen.add(address)
                picked.append((address, node_id))
        return picked[:PROBES]

    async def _probe(self, core: Reachability) -> bool:
        """Ask peers what they see, then (if unsettled) to dial back; True if any answered."""
        now = trio.current_time()
        settled = core.reachable(now)[0] != "unknown" and now - self._settled_at < RECHECK
        answered = False
        for address, node_id in self._peers():
            try:
                reply = await self.transport.request(address, Observe(), node_id=node_id)
                if not isinstance(reply, Observed):
                    continue
                peer = node_id or self._node_id_at(address) or address.encode()
                core.observed(peer, reply.address)
                answered = True
                if settled or self.advertise is not None and not core.confirmed():
                    continue
                back = await self.transport.request(address, DialBackRequest(core.listen.port),
                                                    node_id=node_id)
                if isinstance(back, DialBackReply) and not back.refused:
                    core.dial_back(peer, printable(back.address, 80), back.ok,
                                   printable(back.reason), trio.current_time())
            except TransportError as exc:
                logger.debug("reachability probe of %s failed: %s", address, exc)
        if core.reachable(trio.current_time())[0] != "unknown" and not settled:
            self._settled_at = trio.current_time()
        return answered

    def _node_id_at(self, address: str) -> bytes | None:
        """The node the pooled connection to ``address`` proved to be (a bootstrap
        peer is asked by address: counted once, whichever way it is reached)."""
        if isinstance(self.transport, Transport):
            conn = self.transport.dialer.pool.get(address)
            if conn is not None:
                return conn.peer.node_id
        return None

    def _apply(self, now: float) -> str:
        """Advertise what the core chose (relayed addresses first while peers
        cannot dial this node), in HELLOs and the signed descriptor."""
        core = self.core
        direct = self._direct if core is None else core.advertised(now)
        reachable = "unknown" if core is None else core.reachable(now)[0]
        relayed: list[str] = []
        if self.relay is not None:
            relay = self.relay
            relay.reachable = reachable
            use = relay.config.use
            # nothing is probed in memory: relays there only when asked for
            relay.set_needed(wants_relay(use if core is not None or use != "auto" else "never",
                                         reachable, direct))
            relayed = relay.relayed_addresses(now)
            if relay.tags() != self._relay_tags:
                self._relay_tags = relay.tags()
                if self.on_tags is not None:
                    self.on_tags()
        dialled = [] if core is None else core.dialled_addresses(now)
        address, alternates = plan_addresses(direct, relayed, reachable, dialled)
        if isinstance(self.transport, Transport) and self.transport.advertise_address != address:
            if self.transport.advertise_address is not None:
                logger.info("advertising %s (was %s)", address, self.transport.advertise_address)
            self.transport.advertise_address = address
        me = None if self._sampler is None else self._sampler.self_descriptor
        if me is not None and (me.address, me.alternates) != (address, alternates):
            self._sampler.set_address(address, alternates)  # type: ignore[union-attr]
        return address

    # ------------------------------------------------------------------ serving

    async def serve_dial_back(self, peer: PeerInfo, msg: DialBackRequest) -> DialBackReply:
        """Dial ``peer`` back at its own observed IP and ``msg.port`` (if the gate allows)."""
        address, why = self.gate.admit(peer.remote, msg.port, trio.current_time())
        if address is None or not isinstance(self.transport, Transport):
            return DialBackReply(address or "", False, why or "this node cannot dial back",
                                 refused=True)
        try:
            async with self.transport.dialer.session(address, peer.node_id) as (ms, _):
                with trio.fail_after(self.transport.read_timeout):
                    await ms.send(Ping(1))
                    pong = await ms.receive(self.transport.read_timeout,
                                            self.transport.read_timeout)
            if not isinstance(pong, Pong):
                return DialBackReply(address, False, f"answered {type(pong).__name__}")
            return DialBackReply(address, True, "")
        except PeerUnreachable as exc:
            return DialBackReply(address, False, exc.reason)
        except Exception as exc:  # timeouts, a broken stream: the dial-back failed
            return DialBackReply(address, False, printable(str(exc) or type(exc).__name__))
        finally:
            self.gate.done()


def _host_port(text: str) -> HostPort | None:
    try:
        return parse_host_port(text)
    except AddressError:
        return None
