"""Network addresses ``host:port``: the one parser every layer uses.

The rule: ``host:port`` where the host is a name or IPv4 address without
spaces or colons, or ``[v6]:port`` where ``v6`` is an IPv6 literal (brackets are
required, so ``::1:7400`` is rejected rather than guessed). Ports are
1..65535; port 0 ("any free port") only where a caller allows it (a listen
address).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

__all__ = ["MAX_HOST_LENGTH", "AddressError", "HostPort", "parse_host_port"]

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
