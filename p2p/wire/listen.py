"""Binding the node's TCP listening sockets, with errors an operator can act on, and
dialling out from the listen port.

:func:`bind_tcp_listeners` does synchronously what :func:`trio.open_tcp_listeners`
does (one socket per address ``host`` resolves to, ``SO_REUSEADDR``, IPv6 sockets
IPv6-only), so that a node can bind its port *before* it resumes its
checkpoint or logs anything, and fail at once with one line naming the cause
and the fix (:class:`ListenError`) when the port is taken. With ``reuse_port``
the listeners also take ``SO_REUSEPORT`` (after checking that nobody holds the
port), so that :func:`connect_from` can dial out *from* the listen port: a NAT
then maps every connection of the node to one outside port, which peers
observe and a hole punch can aim at (docs/design/transport.md).
"""

from __future__ import annotations

import errno
import socket

import trio

__all__ = ["REUSE_PORT", "ListenError", "bind_tcp_listeners", "connect_from",
           "describe_listen_error"]

#: Whether this system lets several sockets bind one port (Linux, the BSDs).
REUSE_PORT = hasattr(socket, "SO_REUSEPORT")

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
                       reuse_port: bool = False,
                       setting: str = "--listen") -> list[socket.socket]:
    """Listening TCP sockets on every address ``host`` resolves to (None: all);
    ``reuse_port``: with ``SO_REUSEPORT`` (see the module docstring).

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
            # "[::]" alone is dual-stack: IPv4 peers too (as ::ffff:a.b.c.d, which
            # the responder reads as a.b.c.d); otherwise, as trio does, an IPv6
            # socket never also takes the IPv4 port
            v6only = int(not (host == "::" and len(infos) == 1))
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, v6only)
            if reuse_port and REUSE_PORT:
                if port:  # another listener with SO_REUSEPORT would not refuse us
                    _check_free(family, kind, proto, address, v6only)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
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


def _check_free(family: int, kind: int, proto: int, address: tuple[object, ...],
                v6only: int) -> None:
    """Raise ``OSError(EADDRINUSE)`` if any socket holds ``address`` (a bind
    without ``SO_REUSEPORT`` conflicts with every other socket on the port)."""
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, v6only)
        probe.bind(address)


async def connect_from(host: str, port: int, local_host: str,
                       local_port: int) -> trio.SocketStream:
    """A TCP connection to ``host:port`` from ``local_host:local_port`` (``""``: any
    address of the right family), sharing the port with the node's listeners.

    Where the port cannot be shared for this connection (another one to the
    same peer address uses it, or one in ``TIME_WAIT``) it falls back to a port
    of the system's choice. Raises ``OSError`` when the connection fails.
    """
    if not REUSE_PORT or not local_port:
        return await trio.open_tcp_stream(host, port)
    infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    failure: OSError | None = None
    for family, kind, proto, _, sockaddr in infos:
        sock = trio.socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            wildcard = "::" if family == socket.AF_INET6 else "0.0.0.0"
            here = local_host if local_host and (":" in local_host) == (
                family == socket.AF_INET6) else wildcard
            try:
                await sock.bind((here, local_port))
                await sock.connect(sockaddr)
                if sock.getsockname()[:2] == sock.getpeername()[:2]:
                    # dialled its own port on its own host: TCP connects a socket to
                    # itself then; the listener must answer instead
                    raise OSError(errno.EADDRINUSE, "connected to itself")
            except OSError as exc:
                if exc.errno not in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
                    raise
                sock.close()
                return await trio.open_tcp_stream(host, port)
            return trio.SocketStream(sock)
        except OSError as exc:
            sock.close()
            failure = exc
        except BaseException:
            sock.close()
            raise
    raise failure or OSError(errno.EHOSTUNREACH, f"{host} resolves to no address")
