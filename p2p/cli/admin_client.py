"""Admin socket client: send one command to a running node and return its result.

Synchronous and dependency-free (plain :mod:`socket`), so the CLI starts fast
and scripts can use it without trio::

    from p2p.cli.admin_client import AdminClient
    status = AdminClient.for_data_dir("/var/lib/p2p").request("status")

Before it trusts an answer, the client checks who is talking: the socket must
be owned by its directory's owner (the node's user), in a directory no one
else can write, and, on Linux, the process that answers must run as that user
(``SO_PEERCRED``). Otherwise :class:`AdminSocketUntrusted` says why; a local
user who planted a fake ``admin.sock`` cannot make ``p2p stop`` report success.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from p2p.file_safety import admin_socket_problem, describe_uid
from p2p.peer_credentials import PeerCredentials, read_peer_credentials
from p2p.runtime.admin_server import ADMIN_SOCKET_NAME

__all__ = [
    "AdminClient",
    "AdminClientError",
    "AdminCommandError",
    "AdminConnectionError",
    "AdminProtocolError",
    "AdminSocketUntrusted",
    "admin_request",
]

MAX_REPLY_BYTES = 64 * 1024 * 1024


class AdminClientError(Exception):
    """Talking to a node's admin socket failed; the message says why."""


class AdminConnectionError(AdminClientError):
    """No node answers on the socket (not running, wrong path, permissions, timeout)."""


class AdminCommandError(AdminClientError):
    """The node answered with ``{"ok": false, "error": ...}``."""


class AdminProtocolError(AdminClientError):
    """The reply was not a well-formed admin reply."""


class AdminSocketUntrusted(AdminClientError):
    """The socket, its directory or the process answering on it belongs to
    another user than the node's: the client refused to talk to it.

    Deliberately not an :class:`AdminConnectionError`: "no node answers" must
    never be concluded from a socket that answers but is not trusted.
    """


class AdminClient:
    """Client for the admin socket at ``socket_path``; one connection per request."""

    def __init__(self, socket_path: str | os.PathLike[str], *, timeout: float = 10.0) -> None:
        self.socket_path = Path(socket_path)
        self.timeout = timeout
        #: the process that answered the last request (None where SO_PEERCRED is missing)
        self.last_peer: PeerCredentials | None = None

    @classmethod
    def for_data_dir(cls, data_dir: str | os.PathLike[str], *,
                     timeout: float = 10.0) -> AdminClient:
        """Client for the node whose data directory is ``data_dir``."""
        return cls(Path(data_dir) / ADMIN_SOCKET_NAME, timeout=timeout)

    def request(self, cmd: str) -> dict[str, Any]:
        """Send ``{"cmd": cmd}`` and return the reply's ``result``.

        Raises :class:`AdminConnectionError` when no node answers,
        :class:`AdminSocketUntrusted` when the socket or the process answering
        belongs to another user, :class:`AdminCommandError` when the node
        reports an error, and :class:`AdminProtocolError` on a malformed reply.
        """
        return self.request_many([cmd])[0]

    def request_many(self, cmds: Sequence[str]) -> list[dict[str, Any]]:
        """Send every command of ``cmds`` on one connection and return their results in
        order (a watcher asking several each second opens one connection, not several);
        raises as :meth:`request` does, for the first command that failed."""
        request = b"".join(json.dumps({"cmd": cmd}).encode() + b"\n" for cmd in cmds)
        results = [self._result(reply) for reply in self._exchange(request, len(cmds))]
        if len(results) < len(cmds):
            raise AdminProtocolError(f"the node closed {self.socket_path} after "
                                     f"{len(results)} of {len(cmds)} answers")
        return results

    def _result(self, reply: dict[str, Any]) -> dict[str, Any]:
        if reply.get("ok") is True and isinstance(reply.get("result"), dict):
            result: dict[str, Any] = reply["result"]
            return result
        if reply.get("ok") is False:
            raise AdminCommandError(f"node error: {reply.get('error', 'unknown error')}")
        raise AdminProtocolError(f"malformed reply from {self.socket_path}: expected "
                                 '{"ok": ..., "result"|"error": ...}')

    def _check_owner(self) -> int | None:
        """The node's uid (the socket directory's owner) once the socket and its
        directory check out; None when they cannot be examined (connect says why)."""
        path = self.socket_path
        try:
            socket_st = os.stat(path)
            dir_st = os.stat(path.parent)
        except FileNotFoundError:
            raise AdminConnectionError(
                f"no admin socket at {path}: is the node running with this data "
                "directory?") from None
        except OSError:
            return None
        if not stat.S_ISSOCK(socket_st.st_mode):
            raise AdminConnectionError(f"{path} is not a node's admin socket")
        problem = admin_socket_problem(path, socket_st, dir_st, os.geteuid())
        if problem is not None:
            raise AdminSocketUntrusted(problem)
        return dir_st.st_uid

    def _check_peer(self, sock: socket.socket, daemon_uid: int | None) -> None:
        """Refuse a server process that runs as another user than the node's."""
        self.last_peer = creds = read_peer_credentials(sock)
        if creds is None or daemon_uid is None or creds.uid == daemon_uid:
            return
        raise AdminSocketUntrusted(
            f"the process answering on admin socket {self.socket_path} (pid {creds.pid}) runs "
            f"as {describe_uid(creds.uid)}, not as the daemon's user "
            f"({describe_uid(daemon_uid)}): refusing to talk to it")

    def _exchange(self, request: bytes, count: int) -> list[dict[str, Any]]:
        path = self.socket_path
        daemon_uid = self._check_owner()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            try:
                sock.connect(os.fspath(path))
            except FileNotFoundError:
                raise AdminConnectionError(
                    f"no admin socket at {path}: is the node running with this data "
                    "directory?") from None
            except ConnectionRefusedError:
                raise AdminConnectionError(
                    f"nothing listens on {path}: the node is not running "
                    "(stale socket file)") from None
            except PermissionError:
                raise AdminConnectionError(
                    f"permission denied on {path}: run as the node's user") from None
            except TimeoutError:
                raise AdminConnectionError(f"timed out connecting to {path}") from None
            except OSError as exc:
                if exc.errno == errno.ENOTSOCK or exc.errno == errno.ECONNREFUSED:
                    raise AdminConnectionError(f"{path} is not a node's admin socket") from None
                raise AdminConnectionError(f"cannot connect to {path}: "
                                           f"{exc.strerror or exc}") from None
            self._check_peer(sock, daemon_uid)
            try:
                try:
                    sock.sendall(request)
                except (BrokenPipeError, ConnectionResetError):
                    # A server that refuses us (too many clients) writes its
                    # reason and closes, possibly before we finish sending:
                    # the reason may still be waiting to be read.
                    pass
                lines = self._read_lines(sock, count)
            except TimeoutError:
                raise AdminConnectionError(
                    f"the node did not answer within {self.timeout:g} s on {path}") from None
            except OSError as exc:
                raise AdminConnectionError(f"connection to {path} failed: "
                                           f"{exc.strerror or exc}") from None
        finally:
            sock.close()
        return [self._parse(line) for line in lines]

    def _parse(self, data: bytes) -> dict[str, Any]:
        try:
            reply = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise AdminProtocolError(f"malformed reply from {self.socket_path}: not JSON"
                                     ) from None
        if not isinstance(reply, dict):
            raise AdminProtocolError(f"malformed reply from {self.socket_path}: not a JSON "
                                     "object")
        return reply

    def _read_lines(self, sock: socket.socket, count: int) -> list[bytes]:
        """Up to ``count`` reply lines: fewer when the server closes first (a refusal is
        one error line, perhaps without its newline, then the close)."""
        buffer = bytearray()
        lines: list[bytes] = []
        while len(lines) < count:
            newline = buffer.find(b"\n")
            if newline >= 0:
                lines.append(bytes(buffer[:newline]))
                del buffer[: newline + 1]
                continue
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:  # a refusal's close: keep what came before it
                if not buffer and not lines:
                    raise
                chunk = b""
            if not chunk:
                if buffer:
                    lines.append(bytes(buffer))
                if not lines:
                    raise AdminProtocolError(
                        f"the node closed {self.socket_path} without answering")
                return lines
            buffer += chunk
            if len(buffer) > MAX_REPLY_BYTES:
                raise AdminProtocolError(f"reply from {self.socket_path} exceeds "
                                         f"{MAX_REPLY_BYTES} bytes")
        return lines


def admin_request(socket_path: str | os.PathLike[str], cmd: str, *,
                  timeout: float = 10.0) -> dict[str, Any]:
    """One-shot helper: ``AdminClient(socket_path, timeout=timeout).request(cmd)``."""
    return AdminClient(socket_path, timeout=timeout).request(cmd)
