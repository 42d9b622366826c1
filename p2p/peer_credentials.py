"""Who is at the other end of a Unix socket: the kernel's word, not the file's.

The admin socket's file mode (0600) already keeps other users out, but only as
long as the file and its directory stay private. The kernel also tells each
end of a connected Unix socket the pid, uid and gid of the other
(``SO_PEERCRED``, Linux), which nobody can fake: the admin server uses it to
refuse clients that are neither its own user nor root
(:func:`admin_peer_refusal`), and the CLI uses it to refuse a server that is
not the node it meant to talk to.

On platforms without ``SO_PEERCRED`` (macOS, the BSDs) :func:`read_peer_credentials`
returns None and the checks fall back to the file modes: the socket is created
0600 in a 0700 directory, and the CLI still checks the owners of both.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "PeerCredentials",
    "SocketWithOptions",
    "admin_peer_refusal",
    "read_peer_credentials",
]

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


@dataclass(frozen=True)
class PeerCredentials:
    """The process at the other end of a Unix socket, as the kernel saw it at connect time."""

    pid: int
    uid: int
    gid: int


class SocketWithOptions(Protocol):
    """A socket (stdlib or trio) whose options can be read."""

    def getsockopt(self, level: int, optname: int, buflen: int) -> bytes: ...


def read_peer_credentials(sock: SocketWithOptions) -> PeerCredentials | None:
    """The peer's pid, uid and gid, or None where the platform cannot tell
    (no ``SO_PEERCRED``) or the socket is not a connected Unix socket."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, option, _UCRED.size)
    except OSError:
        return None
    if len(raw) < _UCRED.size:
        return None
    pid, uid, gid = _UCRED.unpack(raw[:_UCRED.size])
    return PeerCredentials(pid=pid, uid=uid, gid=gid)


def admin_peer_refusal(peer_uid: int, own_uid: int) -> str | None:
    """Why an admin client running as ``peer_uid`` may not command a node
    running as ``own_uid``, or None when it may (the node's own user or root)."""
    if peer_uid in (own_uid, 0):
        return None
    return (f"refused: uid {peer_uid} may not use this node's admin socket (only uid "
            f"{own_uid}, the node's user, and root may)")
