"""Admin socket server: a local control channel for a running node.

The node listens on a Unix stream socket, ``admin.sock`` in its data directory,
mode 0600; on Linux it also asks the kernel who connected (``SO_PEERCRED``) and
refuses any user but the node's own and root. One JSON object per line each
way, so ``socat`` works: a request ``{"cmd": NAME}`` (or a bare command word),
a reply ``{"ok": true, "result": {...}}`` or ``{"ok": false, "error": "..."}``.
Malformed, unknown or over-long lines get an error reply, a handler that
raises gets an error reply and a log line, and a client that disconnects or
stalls never affects the server or other clients. Commands: ``status``,
``peers``, ``models``, ``metrics``, ``groups``, ``checkpoint``, ``stop``,
``help``; the report dataclasses below build their results.

Every command's result fields: docs/guide/operations.md ("The admin protocol").
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import inspect
import json
import logging
import math
import os
import socket as stdlib_socket
import stat
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeAlias, runtime_checkable

import trio

from p2p.peer_credentials import admin_peer_refusal, read_peer_credentials
from p2p.web.http import accept_forever

logger = logging.getLogger(__name__)

__all__ = [
    "ADMIN_COMMANDS",
    "ADMIN_SOCKET_NAME",
    "AdminError",
    "AdminHandler",
    "AdminServer",
    "CheckpointReport",
    "JsonValue",
    "MAX_REQUEST_BYTES",
    "MetricsReport",
    "ModelReport",
    "ModelsReport",
    "PeerReport",
    "PeersReport",
    "Report",
    "ReportDataclass",
    "StatusReport",
    "StopReport",
    "TimingReport",
    "admin_socket_path",
    "serve_admin",
    "to_jsonable",
]

ADMIN_SOCKET_NAME = "admin.sock"
ADMIN_COMMANDS = ("status", "peers", "models", "metrics", "checkpoint", "stop", "groups")
MAX_REQUEST_BYTES = 64 * 1024
# AF_UNIX paths are limited to sizeof(sun_path) - 1 on Linux.
_MAX_UNIX_PATH = 107


class AdminError(Exception):
    """The admin socket cannot be set up (path too long, in use, ...)."""


def admin_socket_path(data_dir: str | os.PathLike[str]) -> Path:
    """Where a node with data directory ``data_dir`` listens for admin commands."""
    return Path(data_dir) / ADMIN_SOCKET_NAME


# --------------------------------------------------------------------------- reports


@dataclass(frozen=True)
class StatusReport:
    """Result of ``status``."""

    id: str
    name: str
    addresses: list[str]
    uptime: float
    round: int
    steps: int
    loss: float | None
    accuracy: float | None
    isolated: bool
    view_size: int = 0
    connections: int = 0
    pid: int = field(default_factory=os.getpid)
    data_dir: str | None = None
    collaborating: bool | None = None
    collaboration_state: str | None = None
    collaboration_reason: str | None = None
    isolation_reason: str | None = None
    rounds: int = 0
    training: str | None = None
    privacy: dict[str, Any] | None = None
    # privacy "masked": model name -> masking epochs' state (phase, pairs, folds, warning)
    masking: dict[str, Any] | None = None
    groups: dict[str, Any] | None = None  # clustering on: summary of the ``groups`` command
    # the collaboration strategy ([strategy]): its name and what it reports
    strategy: dict[str, Any] | None = None
    # connectivity (docs/guide/deployment.md): "yes" / "no" / "unknown", why, and the
    # addresses several peers confirmed
    reachable: str | None = None
    reachable_reason: str | None = None
    confirmed_addresses: list[str] | None = None
    # relaying (docs/guide/deployment.md#relays): serving, circuits, reservations held
    relay: dict[str, Any] | None = None
    # set when the node did not resume its newest checkpoint, or moved one aside
    checkpoint: str | None = None
    metrics_url: str | None = None  # the Prometheus endpoint's URL ([metrics]), or None
    # the test set's metrics at the last evaluation: accuracy, or training.metrics' values
    metrics: dict[str, float] | None = None
    test_loss: float | None = None


@dataclass(frozen=True)
class PeerReport:
    """One peer in ``peers``."""

    id: str
    address: str
    age: int
    last_contact: float | None = None
    failures: int = 0
    models: list[str] = field(default_factory=list)
    # how this node's connection to the peer goes: direct, relayed, punched, reversed
    path: str | None = None


@dataclass(frozen=True)
class PeersReport:
    """Result of ``peers``: the view and the per-model views."""

    view: list[PeerReport]
    models: dict[str, list[PeerReport]] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelReport:
    """One partial model in ``models``."""

    name: str
    kind: str
    size: int
    fingerprint: str | None = None
    weight: float | None = None
    holders: int | None = None
    pushes_sent: int = 0
    pushes_received: int = 0
    pushes_rejected: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0


@dataclass(frozen=True)
class ModelsReport:
    """Result of ``models``."""

    models: list[ModelReport]


@dataclass(frozen=True)
class TimingReport:
    """Summary of one timed operation (seconds)."""

    count: int
    mean: float
    max: float
    total: float


@dataclass(frozen=True)
class MetricsReport:
    """Result of ``metrics``."""

    counters: dict[str, int | float] = field(default_factory=dict)
    timings: dict[str, TimingReport] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckpointReport:
    """Result of ``checkpoint``."""

    path: str
    bytes: int
    round: int
    seconds: float


@dataclass(frozen=True)
class StopReport:
    """Result of ``stop``."""

    stopping: bool = True


class ReportDataclass(Protocol):
    """An instance of a dataclass, such as the reports above."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


#: What an admin command returns: a mapping or one of the report dataclasses.
Report: TypeAlias = Mapping[str, object] | ReportDataclass
#: A value of the admin protocol's JSON (what :func:`to_jsonable` returns).
JsonValue: TypeAlias = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]


@runtime_checkable
class AdminHandler(Protocol):
    """What the node implements to answer admin commands.

    Each method returns a dict or a report dataclass, or an awaitable of one
    (``async def`` is fine). Methods run in the admin server's trio task: keep
    them quick (``stop`` should only *request* shutdown).
    """

    def status(self) -> Report | Awaitable[Report]: ...

    def peers(self) -> Report | Awaitable[Report]: ...

    def models(self) -> Report | Awaitable[Report]: ...

    def metrics(self) -> Report | Awaitable[Report]: ...

    def checkpoint(self) -> Report | Awaitable[Report]: ...

    def stop(self) -> Report | Awaitable[Report]: ...

    def groups(self) -> Report | Awaitable[Report]: ...


# --------------------------------------------------------------------------- JSON


def to_jsonable(value: object) -> JsonValue:
    """Convert a result to JSON-ready values: dataclasses to dicts, bytes to hex,
    paths to strings, numpy scalars/arrays to Python numbers/lists, non-finite
    floats to null."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "tolist"):  # numpy scalars and arrays, torch tensors
        return to_jsonable(value.tolist())
    return str(value)


def _reply_ok(result: dict[str, JsonValue]) -> bytes:
    return (json.dumps({"ok": True, "result": result}, allow_nan=False) + "\n").encode()


def _reply_error(message: str) -> bytes:
    return (json.dumps({"ok": False, "error": message}) + "\n").encode()


# --------------------------------------------------------------------------- server


class AdminServer:
    """Serves admin commands on a Unix socket, dispatching to ``handler``.

    Use ``await nursery.start(server.serve)``; cancelling the task closes the
    socket and removes the socket file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        handler: AdminHandler,
        *,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        max_clients: int = 16,
        idle_timeout: float = 300.0,
    ) -> None:
        self.path = Path(path)
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self.max_clients = max_clients
        self.idle_timeout = idle_timeout
        self._clients = 0
        self._refused_uids: set[int] = set()
        self._commands: dict[str, Callable[[], Report | Awaitable[Report]]] = {
            "status": handler.status,
            "peers": handler.peers,
            "models": handler.models,
            "metrics": handler.metrics,
            "checkpoint": handler.checkpoint,
            "stop": handler.stop,
            "groups": handler.groups,
            "help": lambda: {"commands": [*ADMIN_COMMANDS, "help"]},
        }

    @property
    def clients(self) -> int:
        """Admin clients connected right now."""
        return self._clients

    async def serve(self, *, task_status: trio.TaskStatus[Path] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        """Bind the socket (mode 0600), report started, and serve until cancelled."""
        sock = self._bind()
        listener = trio.SocketListener(sock)
        bound_inode = os.stat(self.path).st_ino
        logger.info("admin socket listening on %s", self.path)
        try:
            async with trio.open_nursery() as nursery:
                task_status.started(self.path)
                await accept_forever(listener, nursery, self._serve_client, "admin socket")
        finally:
            with contextlib.suppress(OSError):
                sock.close()
            # Remove the file only if it is still ours (not a successor's socket).
            with contextlib.suppress(OSError):
                if os.stat(self.path).st_ino == bound_inode:
                    os.unlink(self.path)

    def _bind(self) -> trio.socket.SocketType:
        path = self.path
        if len(os.fsencode(path)) > _MAX_UNIX_PATH:
            raise AdminError(
                f"admin socket path {path} is {len(os.fsencode(path))} bytes long; Unix sockets "
                f"allow at most {_MAX_UNIX_PATH}: use a shorter data directory path"
            )
        self._remove_stale(path)
        sock = stdlib_socket.socket(stdlib_socket.AF_UNIX, stdlib_socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # the file is created 0600: no window where others connect
        try:
            sock.bind(os.fspath(path))
        except OSError as exc:
            sock.close()
            raise AdminError(f"cannot create admin socket {path}: "
                             f"{exc.strerror or exc}") from exc
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)
        sock.listen(16)
        return trio.socket.from_stdlib_socket(sock)

    @staticmethod
    def _remove_stale(path: Path) -> None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise AdminError(f"{path} exists and is not a socket; refusing to replace it")
        probe = stdlib_socket.socket(stdlib_socket.AF_UNIX, stdlib_socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(os.fspath(path))
        except OSError as exc:
            if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
                raise AdminError(f"cannot check existing admin socket {path}: "
                                 f"{exc.strerror or exc}") from exc
            logger.info("removing stale admin socket %s", path)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        else:
            raise AdminError(f"another node is already running with this data directory "
                             f"(it answers on {path})")
        finally:
            probe.close()

    async def _serve_client(self, stream: trio.SocketStream) -> None:
        self._clients += 1
        try:
            async with stream:
                refusal = self._peer_refusal(stream)
                if refusal is not None:
                    await stream.send_all(_reply_error(refusal))
                    return
                if self._clients > self.max_clients:
                    await stream.send_all(_reply_error(
                        f"too many admin clients (limit {self.max_clients}); try again"))
                    return
                await self._client_loop(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            logger.debug("admin client went away: %s", exc)
        except Exception:  # a bug here must not take the node down
            logger.exception("admin client handler failed")
        finally:
            self._clients -= 1

    def _peer_refusal(self, stream: trio.SocketStream) -> str | None:
        """Why this client may not use the socket (SO_PEERCRED: another user
        than the node's and root), or None. Without SO_PEERCRED (not Linux),
        the socket's mode 0600 in a private directory is the only gate."""
        creds = read_peer_credentials(stream.socket)
        if creds is None:
            return None
        refusal = admin_peer_refusal(creds.uid, os.geteuid())
        if refusal is not None and creds.uid not in self._refused_uids:
            if len(self._refused_uids) < 64:  # one line per uid, and a bounded set
                self._refused_uids.add(creds.uid)
            logger.warning("admin socket: refused a client running as uid %d (pid %d): only "
                           "the node's user and root may use it", creds.uid, creds.pid)
        return refusal

    async def _client_loop(self, stream: trio.SocketStream) -> None:
        buffer = bytearray()
        while True:
            chunk: bytes | None = None
            with trio.move_on_after(self.idle_timeout):
                chunk = await stream.receive_some(65536)
            if chunk is None:
                logger.debug("closing idle admin client")
                return
            if not chunk:  # client closed: answer a last request sent without newline
                if buffer.strip():
                    await self._answer(stream, bytes(buffer))
                return
            buffer += chunk
            while (newline := buffer.find(b"\n")) >= 0:
                line = bytes(buffer[:newline])
                del buffer[: newline + 1]
                await self._answer(stream, line)
            if len(buffer) > self.max_request_bytes:
                await stream.send_all(_reply_error(
                    f"request line too long (limit {self.max_request_bytes} bytes)"))
                return

    async def _answer(self, stream: trio.SocketStream, line: bytes) -> None:
        reply = await self._dispatch(line)
        if reply is not None:
            await stream.send_all(reply)

    async def _dispatch(self, line: bytes) -> bytes | None:
        """Answer one request line; ``None`` for a blank line (no reply)."""
        if len(line) > self.max_request_bytes:
            return _reply_error(f"request line too long (limit {self.max_request_bytes} bytes)")
        try:
            text = line.decode("utf-8").strip()
        except UnicodeDecodeError:
            return _reply_error("malformed request: not UTF-8 text")
        if not text:
            return None
        known = ", ".join([*ADMIN_COMMANDS, "help"])
        if text in self._commands:
            command = text
        else:
            try:
                request = json.loads(text)
            except (json.JSONDecodeError, RecursionError):
                return _reply_error('malformed request: expected one JSON object per line, '
                                    'e.g. {"cmd": "status"}')
            if not isinstance(request, dict) or not isinstance(request.get("cmd"), str):
                return _reply_error('malformed request: expected a JSON object with a "cmd" '
                                    f'string, e.g. {{"cmd": "status"}} (commands: {known})')
            command = request["cmd"]
            if command not in self._commands:
                return _reply_error(f"unknown command {command[:64]!r}; known commands: {known}")
        try:
            result = self._commands[command]()
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            logger.exception("admin command %r failed", command)
            return _reply_error(f"command {command!r} failed: {type(exc).__name__}: {exc}")
        payload = to_jsonable(result)
        if not isinstance(payload, dict):
            logger.error("admin handler for %r returned %s, not a dict", command,
                         type(result).__name__)
            return _reply_error(f"command {command!r} failed: the node returned no result")
        return _reply_ok(payload)


async def serve_admin(
    path: str | os.PathLike[str],
    handler: AdminHandler,
    *,
    task_status: trio.TaskStatus[Path] = trio.TASK_STATUS_IGNORED,
    max_request_bytes: int = MAX_REQUEST_BYTES,
    max_clients: int = 16,
    idle_timeout: float = 300.0,
) -> None:
    """Run an :class:`AdminServer` on ``path`` (``await nursery.start(serve_admin, path, h)``)."""
    server = AdminServer(path, handler, max_request_bytes=max_request_bytes,
                         max_clients=max_clients, idle_timeout=idle_timeout)
    await server.serve(task_status=task_status)
