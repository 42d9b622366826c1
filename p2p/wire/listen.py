"""Binding the node's TCP listening sockets, with errors an operator can act on.

:func:`bind_tcp_listeners` does synchronously what :func:`trio.open_tcp_listeners`
does (one socket per address ``host`` resolves to, ``SO_REUSEADDR``, IPv6 sockets
IPv6-only), so that a node can bind its port *before* it resumes its
checkpoint or logs anything, and fail at once with one line naming the cause
and the fix (:class:`ListenError`) when the port is taken.
"""

from __future__ import annotations

import errno
import socket

__all__ = ["ListenError", "bind_tcp_listeners", "describe_listen_error"]

_BACKLOG = min(socket.SOMAXCONN, 0xFFFF)


class ListenError(Exception):
    """The listen address cannot be bound; the message names it, the cause and the fix.

    ``errno`` is the OS error number when there is one; ``in_use`` is True when
    another program holds the port (not a configuration error).
    """

    def __init__(self, address: str, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.address = address
        self.errno = code
        self.in_use = code == errno.EADDRINUSE


def _display(host: str | None, port: int) -> str:
    shown = host or "*"
    return f"[{shown}]:{port}" if ":" in shown else f"{shown}:{port}"


def describe_listen_error(host: str | None, port: int, exc: OSError, *,
                          setting: str = "--listen") -> ListenError:
    """The :class:`ListenError` for ``exc`` raised while binding ``host:port``;
    ``setting`` names the option and key that choose the address."""
    where = _display(host, port)
    code = exc.errno
    if isinstance(exc, socket.gaierror):
        text = (f"cannot listen on {where}: host {host!r} does not resolve "
                f"({exc.strerror or exc}); use an IP address such as 127.0.0.1 or 0.0.0.0 "
                f"in {setting}")
        return ListenError(where, text, code=None)
    if code == errno.EADDRINUSE:
        text = (f"cannot listen on {where}: address already in use (another program holds "
                f"it; choose another port with {setting}, or port 0 for any free port)")
    elif code == errno.EADDRNOTAVAIL:
        text = (f"cannot listen on {where}: {host} is not an address of this machine "
                f"(use one of its addresses, or 0.0.0.0 for all, in {setting})")
    elif code in (errno.EACCES, errno.EPERM):
        text = (f"cannot listen on {where}: permission denied (ports below 1024 need "
                f"privileges; choose a port of 1024 or above with {setting})")
    else:
        text = f"cannot listen on {where}: {exc.strerror or exc}"
    return ListenError(where, text, code=code)


def bind_tcp_listeners(host: str | None, port: int, *,
                       setting: str = "--listen") -> list[socket.socket]:
    """Listening TCP sockets on every address ``host`` resolves to (None: all).

    Raises :class:`ListenError` (its fix names ``setting``); on failure no socket
    is left open.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise describe_listen_error(host, port, exc, setting=setting) from None
    sockets: list[socket.socket] = []
    seen: set[tuple[int, object]] = set()
    try:
        for family, kind, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                # as trio does: an IPv6 socket never also takes the IPv4 port
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(_BACKLOG)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise describe_listen_error(host, port, exc, setting=setting) from None
    if not sockets:
        raise ListenError(_display(host, port), f"cannot listen on {_display(host, port)}: "
                          "the host resolves to no address")
    return sockets
