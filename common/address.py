"""Network addresses ``host:port``: the one parser every layer uses.

The rule: ``host:port`` where the host is a name or IPv4 address without
spaces or colons, or ``[v6]:port`` where ``v6`` is an IPv6 literal (brackets are
required, so ``::1:7400`` is rejected rather than guessed). Ports are
1..65535; port 0 ("any free port") only where a caller allows it (a listen
address). A node reached through a relay has a *circuit* address,
``<relay host:port>/circuit/<node id, hex>`` (docs/guide/deployment.md).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

__all__ = [
    "ADVERTISABLE", "CIRCUIT", "LINK_LOCAL", "LOOPBACK", "MAX_HOST_LENGTH", "NAME", "PRIVATE",
    "PUBLIC", "UNSPECIFIED", "AddressError", "Circuit", "HostPort", "address_scope",
    "advertisable", "is_circuit", "parse_dial_address", "parse_host_port",
]

MAX_HOST_LENGTH = 253
_EXPECTED = '"host:port" such as "127.0.0.1:7400" or "[::1]:7400"'


class AddressError(ValueError):
    """An address is not ``host:port``; the message quotes it and says what was expected."""


@dataclass(frozen=True, order=True)
class HostPort:
    """A TCP address ``host:port`` (IPv6 hosts are written ``[::1]:7400``)."""

    host: str
    port: int

    def __str__(self) -> str:
        if ":" in self.host:
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"


def parse_host_port(text: object, *, allow_port_zero: bool = False) -> HostPort:
    """Parse ``"host:port"`` or ``"[v6]:port"``; raises :class:`AddressError`."""
    if not isinstance(text, str):
        raise AddressError(f"expected a string {_EXPECTED}, got {type(text).__name__} "
                           f"{text!r:.60}")
    shown = repr(text[:80])
    raw = text.strip()
    if raw.startswith("["):
        end = raw.find("]")
        if end < 0 or raw[end + 1 : end + 2] != ":":
            raise AddressError(f"cannot parse {shown}; expected {_EXPECTED}")
        host, port_text = raw[1:end], raw[end + 2 :]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise AddressError(f"{host!r:.60} in {shown} is not an IPv6 address; expected "
                               f"{_EXPECTED}") from None
    else:
        host, sep, port_text = raw.rpartition(":")
        if not sep:
            raise AddressError(f"cannot parse {shown}; expected {_EXPECTED}")
        if ":" in host:
            raise AddressError(f"cannot parse {shown}: IPv6 hosts must be bracketed; expected "
                               f"{_EXPECTED}")
        if not host or len(host) > MAX_HOST_LENGTH or not host.isprintable() or any(
            c.isspace() for c in host
        ):
            raise AddressError(f"missing or invalid host in {shown}; expected {_EXPECTED}")
    if not (port_text.isascii() and port_text.isdigit()) or len(port_text) > 5:
        raise AddressError(f"port in {shown} is not a number; expected {_EXPECTED}")
    port = int(port_text)
    low = 0 if allow_port_zero else 1
    if not low <= port <= 65535:
        raise AddressError(f"port {port} in {shown} is out of range; expected {low}..65535"
                           + (" (0 = pick a free port)" if allow_port_zero else ""))
    return HostPort(host, port)


# --------------------------------------------------------------------------- circuits

#: What separates a relay's address from the node id it relays to.
CIRCUIT = "/circuit/"
#: Node ids in circuit addresses: 1 to 64 bytes (Ed25519 keys are 32), in hex.
_MAX_TARGET = 64


@dataclass(frozen=True, order=True)
class Circuit:
    """A node reached through a relay: ``<relay>/circuit/<target hex>``."""

    relay: HostPort
    target: bytes

    def __str__(self) -> str:
        return f"{self.relay}{CIRCUIT}{self.target.hex()}"


def is_circuit(text: str) -> bool:
    """Whether ``text`` has the form of a circuit address (checked by
    :func:`parse_dial_address`)."""
    return CIRCUIT in text


def parse_dial_address(text: object) -> HostPort | Circuit:
    """A direct ``host:port`` or a :class:`Circuit`; raises :class:`AddressError`."""
    if not isinstance(text, str) or CIRCUIT not in text:
        return parse_host_port(text)
    relay_text, _, target_text = text.partition(CIRCUIT)
    relay = parse_host_port(relay_text)
    try:
        target = bytes.fromhex(target_text)
    except ValueError:
        target = b""
    if not 0 < len(target) <= _MAX_TARGET or target_text != target.hex():
        raise AddressError(f"the node id in {text[:160]!r} is not 1 to {_MAX_TARGET} bytes "
                           "in lower-case hex; expected \"<relay host:port>/circuit/<node id>\"")
    return Circuit(relay, target)


# --------------------------------------------------------------------------- scopes
# Which hosts an address reaches decides whether it may be advertised to peers
# on other hosts (docs/guide/deployment.md, "Addresses").

#: Not an address to dial: ``0.0.0.0``, ``::`` (a listen address meaning "every interface").
UNSPECIFIED = "unspecified"
#: This host only: ``127.0.0.0/8``, ``::1``.
LOOPBACK = "loopback"
#: This link only: ``169.254.0.0/16``, ``fe80::/10``.
LINK_LOCAL = "link-local"
#: A private network (behind a NAT, most likely): RFC 1918, CGNAT ``100.64.0.0/10``, ``fc00::/7``.
PRIVATE = "private"
#: Any other IP address: reachable across the internet unless a firewall says otherwise.
PUBLIC = "public"
#: A host name: resolved by whoever dials it.
NAME = "name"

_PRIVATE_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"))


def address_scope(host: str) -> str:
    """Which hosts ``host`` (an IP literal or a name) reaches: one of :data:`UNSPECIFIED`,
    :data:`LOOPBACK`, :data:`LINK_LOCAL`, :data:`PRIVATE`, :data:`PUBLIC`, :data:`NAME`.

    Documentation ranges (``203.0.113.0/24`` ...) count as public: the real-network
    testbed uses them for its public segment, inside network namespaces.
    """
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return LOOPBACK if host.lower() in ("localhost", "localhost.") else NAME
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified:
        return UNSPECIFIED
    if ip.is_loopback:
        return LOOPBACK
    if ip.is_link_local:
        return LINK_LOCAL
    if any(ip in net for net in _PRIVATE_NETWORKS if net.version == ip.version):
        return PRIVATE
    return PUBLIC


#: Scopes an address may be advertised in to peers on other hosts, best first.
ADVERTISABLE = (PUBLIC, NAME, PRIVATE)


def advertisable(address: HostPort, *, local_swarm: bool = False) -> bool:
    """Whether ``address`` may go into what a node tells peers about itself.

    Never an unspecified or link-local one; a loopback one only in a swarm
    that lives on this host (``local_swarm``: the node listens on loopback).
    """
    scope = address_scope(address.host)
    if scope == LOOPBACK:
        return local_swarm
    return scope in ADVERTISABLE
