"""What a node knows of how peers reach it (sans-IO): observed addresses, dial-backs,
the address it advertises.

Peers tell the node which address its connections come from (an ``Observed``
reply, as libp2p's identify); a host observed by ``confirmations`` distinct
peers is *confirmed*. Peers then dial the node back there (a ``DialBack``, as
libp2p's AutoNAT), each peer's latest result counting: reachable "yes" once
``confirmations`` peers succeeded and successes outnumber failures, "no" the
other way round, "unknown" until then (several peers and the majority, since
any may lie). The advertised address, best first: ``node.advertise``, a
confirmed address dialled back, a listen address meaningful to other hosts,
the interface address found; a node peers cannot dial puts its relayed
addresses first (:func:`plan_addresses`; :func:`wants_relay`).

See docs/guide/deployment.md.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from common.address import (
    LOOPBACK,
    PRIVATE,
    PUBLIC,
    AddressError,
    HostPort,
    address_scope,
    advertisable,
    parse_host_port,
)
from peersampling.descriptor import MAX_ALTERNATES

__all__ = ["DIAL_BACK_RESULTS_KEPT", "Reachability", "ReachabilityStatus", "plan_addresses",
           "wants_relay"]

#: Hosts whose observations are remembered, and observers per host.
MAX_OBSERVED_HOSTS = 16
MAX_OBSERVERS = 16
#: Addresses offered to a peer for a hole punch.
MAX_CANDIDATES = 8
#: Dial-back results remembered (the latest of each peer, newest peers kept).
DIAL_BACK_RESULTS_KEPT = 8
#: Seconds a dial-back result counts.
DIAL_BACK_TTL = 1800.0


@dataclass(frozen=True)
class ReachabilityStatus:
    """What ``p2p status`` shows about connectivity."""

    reachable: str  # "yes", "no" or "unknown"
    reason: str  # why (empty for "yes")
    advertised: str  # the address in this node's descriptor and HELLO
    confirmed: tuple[str, ...]  # addresses confirmed by several peers


class Reachability:
    """One node's observed addresses and dial-back results (see the module docstring).

    ``listen``: the bound address; ``advertise``: ``node.advertise`` (or None);
    ``interface_host``: the address of the interface that routes to the
    bootstrap peers, used when ``listen`` is unspecified.
    """

    def __init__(self, listen: HostPort, advertise: HostPort | None = None, *,
                 interface_host: str | None = None, confirmations: int = 2) -> None:
        if confirmations < 1:
            raise ValueError(f"confirmations must be >= 1, got {confirmations}")
        self.listen = listen
        self.advertise = advertise
        self.interface_host = interface_host
        self.confirmations = confirmations
        # a swarm on this host only: loopback addresses are fine to advertise
        self.local_swarm = address_scope(listen.host) == LOOPBACK
        self._observed: OrderedDict[str, set[bytes]] = OrderedDict()  # host -> observers
        self._seen: OrderedDict[str, None] = OrderedDict()  # observed "host:port", newest last
        # peer -> (address dialled, ok, reason, when): its latest dial-back
        self._results: OrderedDict[bytes, tuple[str, bool, str, float]] = OrderedDict()
        self.problem = ""  # what the driver could not do (an unresolvable name...)

    # ------------------------------------------------------------------ input

    def observed(self, peer: bytes, address: str) -> None:
        """Peer ``peer`` sees this node's connections come from ``address``."""
        try:
            host = parse_host_port(address).host
        except AddressError:
            return  # in-memory labels, or a peer's junk: nothing to learn
        if address_scope(host) == LOOPBACK and not self.local_swarm:
            return
        observers = self._observed.pop(host, set())
        if len(observers) < MAX_OBSERVERS:
            observers.add(peer)
        self._observed[host] = observers  # newest last
        while len(self._observed) > MAX_OBSERVED_HOSTS:
            self._observed.popitem(last=False)
        seen = str(parse_host_port(address))
        self._seen.pop(seen, None)
        self._seen[seen] = None  # newest last
        while len(self._seen) > MAX_OBSERVED_HOSTS:
            self._seen.popitem(last=False)

    def punch_candidates(self, port: int) -> list[str]:
        """Where a peer may reach this node's hole punch from ``port``, best first:
        the hosts peers saw its connections come from (newest first: its NAT's
        outside address), then its own host (a peer on its LAN), each at ``port``
        (a NAT that keeps a port it can keep maps it to itself)."""
        hosts = [parse_host_port(a).host for a in reversed(self._seen)]
        own = HostPort(self.listen_host(), port)
        if advertisable(own, local_swarm=self.local_swarm):
            hosts.append(own.host)
        return [str(HostPort(h, port)) for h in dict.fromkeys(hosts)][:MAX_CANDIDATES]

    def dial_back(self, peer: bytes, address: str, ok: bool, reason: str, now: float) -> None:
        """Peer ``peer`` tried to dial this node at ``address``; ``reason`` if it failed."""
        self._results.pop(peer, None)
        self._results[peer] = (address, ok, reason, now)
        while len(self._results) > DIAL_BACK_RESULTS_KEPT:
            self._results.popitem(last=False)

    # ------------------------------------------------------------------ output

    def confirmed(self) -> list[HostPort]:
        """Addresses several peers observed: the host they saw with the listen port."""
        return [HostPort(host, self.listen.port) for host, peers in self._observed.items()
                if len(peers) >= self.confirmations]

    def _recent(self, now: float) -> list[tuple[str, bool, str, float]]:
        return [r for r in self._results.values() if now - r[3] < DIAL_BACK_TTL]

    def _counted(self, now: float) -> list[tuple[str, bool, str, float]]:
        """The dial-backs the verdict counts: those at an address outside private
        networks when there are any (a peer on the node's own LAN reaching it says
        nothing about peers beyond its NAT); else all, unless a peer saw this node
        come from a public address (then it talks beyond its LAN: none count yet);
        a swarm on one LAN counts all."""
        recent = self._recent(now)
        outside = [r for r in recent if not _private(r[0])]
        if outside or not self._seen_from_outside():
            return outside or recent
        return []

    def _seen_from_outside(self) -> bool:
        return any(address_scope(host) == PUBLIC for host in self._observed)

    def reachable(self, now: float) -> tuple[str, str]:
        """("yes" | "no" | "unknown", why)."""
        recent = self._counted(now)
        ok = [r for r in recent if r[1]]
        failed = [r for r in recent if not r[1]]
        if len(ok) >= self.confirmations and len(ok) > len(failed):
            return "yes", ""
        if len(failed) >= self.confirmations and len(failed) > len(ok):
            last = failed[-1]
            return "no", (f"{len(failed)} peers could not dial back {last[0]} (last: "
                          f"{last[2]}): behind a NAT or a firewall? Forward the port and set "
                          "node.advertise, or use a relay")
        if self.problem:
            return "unknown", self.problem
        if not recent:
            lan = [r for r in self._recent(now) if r[1]]
            if lan:
                return "unknown", (f"only peers on its own network dialled it back "
                                   f"({lan[-1][0]}); peers elsewhere see it behind a NAT and "
                                   "none has dialled it back yet")
            if not self.confirmed() and address_scope(self.listen_host()) != PUBLIC:
                return "unknown", (f"no peer has confirmed an address yet (listening on "
                                   f"{self.listen})")
            return "unknown", "no peer has tried to dial back yet"
        return "unknown", (f"{len(ok)} dial-backs succeeded and {len(failed)} failed; "
                           f"{self.confirmations} agreeing peers are needed")

    def listen_host(self) -> str:
        """The host this node listens on, or its interface address for ``0.0.0.0``/``::``."""
        if address_scope(self.listen.host) == "unspecified" and self.interface_host:
            return self.interface_host
        return self.listen.host

    def advertised(self, now: float) -> str:
        """The address to put in this node's descriptor (see the module docstring)."""
        if self.advertise is not None:
            return str(self.advertise)
        dialled = {r[0] for r in self._counted(now) if r[1]}
        for address in self.confirmed():
            if str(address) in dialled:
                return str(address)
        own = HostPort(self.listen_host(), self.listen.port)
        if advertisable(own, local_swarm=self.local_swarm):
            return str(own)
        for address in self.confirmed():  # better than nothing: peers may be told later
            if advertisable(address, local_swarm=self.local_swarm):
                return str(address)
        return str(own)  # nothing better known yet (the status says why)

    def dialled_addresses(self, now: float) -> list[str]:
        """Confirmed addresses peers dialled it back at (a dual-stack node's other
        family): alternates for peers that cannot use the advertised one."""
        dialled = {r[0] for r in self._counted(now) if r[1]}
        return [str(a) for a in self.confirmed() if str(a) in dialled]

    def status(self, now: float) -> ReachabilityStatus:
        reachable, reason = self.reachable(now)
        return ReachabilityStatus(reachable, reason, self.advertised(now),
                                  tuple(str(a) for a in self.confirmed()))


def wants_relay(use: str, reachable: str, direct: str) -> bool:
    """Whether a node reserves with relays: ``relay.use`` "always" or "never", or
    ("auto") when peers could not dial it back, or while that is unknown and its
    own address is a private one (a NAT's LAN)."""
    if use != "auto":
        return use == "always"
    if reachable != "unknown":
        return reachable == "no"
    try:
        host = parse_host_port(direct).host
    except AddressError:
        return False
    return address_scope(host) == PRIVATE


def plan_addresses(direct: str, relayed: list[str], reachable: str,
                   dialled: list[str] | None = None) -> tuple[str, tuple[str, ...]]:
    """(the address to advertise, the alternates tried after it, in order).

    Relayed addresses come first unless peers can dial the node; its own
    address then comes last, and only if it means something on another host.
    A node peers can dial offers the other addresses they dialled it at
    (``dialled``: IPv4 after IPv6 on a dual-stack host) as alternates.
    """
    if not relayed or reachable == "yes":
        others = [a for a in dialled or [] if a != direct] if reachable == "yes" else []
        return direct, tuple(others[:MAX_ALTERNATES])
    alternates = list(relayed[1:])
    try:
        own = parse_host_port(direct)
    except AddressError:
        own = None
    if own is not None and advertisable(own):
        alternates.append(direct)
    return relayed[0], tuple(alternates)


def _private(address: str) -> bool:
    try:
        return address_scope(parse_host_port(address).host) == PRIVATE
    except AddressError:
        return False
