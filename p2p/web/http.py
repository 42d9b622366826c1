"""GET routes over HTTP/1.1 on trio listeners: one request per connection, then close.

Enough for a Prometheus scraper and a browser polling a page: requests are
read within a timeout and a size bound, only GET and HEAD are served, a
handler's bug answers 500 and one log line, and a client that stalls or floods
never reaches the caller's loop beyond its own task. No keep-alive, no
chunking, no TLS: the endpoints listen on loopback unless told otherwise
(docs/guide/operations.md, "Monitoring").
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit

import trio

from p2p.wire.listen import bind_tcp_listeners

logger = logging.getLogger(__name__)

__all__ = ["HttpRequest", "HttpResponse", "Route", "accept_forever", "bind_http", "listen_url",
           "serve_http"]

MAX_HEAD_BYTES = 8192
_REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 408: "Request Timeout", 431: "Request Header Fields Too "
            "Large", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass(frozen=True)
class HttpRequest:
    """One parsed request: method, path, query parameters and lower-cased headers."""

    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HttpResponse:
    """What a route answers."""

    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"

    @classmethod
    def text(cls, status: int, message: str) -> HttpResponse:
        return cls(status, (message + "\n").encode())


#: A route: a request in, a response out (``async def`` is fine).
Route = Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]]


def bind_http(host: str, port: int, *, setting: str) -> list[trio.SocketListener]:
    """Listeners on ``host:port`` (port 0: any free port), bound now; a taken port
    raises :class:`~p2p.wire.listen.ListenError` naming ``setting`` as the fix."""
    return [trio.SocketListener(trio.socket.from_stdlib_socket(sock))
            for sock in bind_tcp_listeners(host or None, port, setting=setting)]


def listen_url(listeners: Sequence[trio.SocketListener]) -> str:
    """``http://host:port`` of the first listener (the port as bound)."""
    host, port = listeners[0].socket.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def parse_head(head: bytes) -> HttpRequest:
    """The request line and headers of ``head`` (without the blank line); ValueError if bad."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ValueError("bad request line")
    method, target, _ = parts
    split = urlsplit(target)
    headers = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise ValueError("bad header line")
        headers[name.strip().lower()] = value.strip()
    return HttpRequest(method=method, path=split.path or "/",
                       query=dict(parse_qsl(split.query)), headers=headers)


def encode_response(response: HttpResponse, *, head_only: bool = False) -> bytes:
    reason = _REASONS.get(response.status, "")
    head = (f"HTTP/1.1 {response.status} {reason}\r\n"
            f"Content-Type: {response.content_type}\r\n"
            f"Content-Length: {len(response.body)}\r\n"
            "Cache-Control: no-store\r\n"
            "X-Content-Type-Options: nosniff\r\n"
            "Connection: close\r\n\r\n")
    return head.encode("latin-1") + (b"" if head_only else response.body)


async def _read_head(stream: trio.abc.Stream) -> bytes | None:
    """The bytes before the first blank line; None if the client closed first."""
    buffer = bytearray()
    while (end := buffer.find(b"\r\n\r\n")) < 0:
        if len(buffer) > MAX_HEAD_BYTES:
            raise OverflowError
        chunk = await stream.receive_some(4096)
        if not chunk:
            return None
        buffer += chunk
    return bytes(buffer[:end])


class _Server:
    def __init__(self, route: Route, max_clients: int, read_timeout: float) -> None:
        self.route = route
        self.max_clients = max_clients
        self.read_timeout = read_timeout
        self.clients = 0

    async def serve_client(self, stream: trio.SocketStream) -> None:
        self.clients += 1
        try:
            async with stream:
                response, head_only = await self._respond(stream)
                if response is not None:
                    await stream.send_all(encode_response(response, head_only=head_only))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            logger.debug("http client went away: %s", exc)
        finally:
            self.clients -= 1

    async def _respond(self, stream: trio.SocketStream) -> tuple[HttpResponse | None, bool]:
        if self.clients > self.max_clients:
            return HttpResponse.text(503, f"too many clients (limit {self.max_clients})"), False
        head: bytes | None = None
        with trio.move_on_after(self.read_timeout):
            try:
                head = await _read_head(stream)
            except OverflowError:
                return HttpResponse.text(431, "request head too large"), False
            if head is None:
                return None, False
        if head is None:
            return HttpResponse.text(408, "request not received in time"), False
        try:
            request = parse_head(head)
        except (ValueError, UnicodeDecodeError):
            return HttpResponse.text(400, "malformed request"), False
        if request.method not in ("GET", "HEAD"):
            return HttpResponse.text(405, "only GET and HEAD are served"), False
        try:
            result = self.route(request)
            response = await result if inspect.isawaitable(result) else result
        except Exception:  # a bug in a route must not take the node down
            logger.exception("http route %s failed", request.path[:80])
            return HttpResponse.text(500, "internal error (see the server's log)"), False
        return response, request.method == "HEAD"


async def serve_http(listeners: Sequence[trio.SocketListener], route: Route, *,
                     max_clients: int = 32, read_timeout: float = 10.0,
                     task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Answer requests on ``listeners`` with ``route`` until cancelled (closes them then)."""
    server = _Server(route, max_clients, read_timeout)

    async def accept(listener: trio.SocketListener) -> None:
        async with listener:
            await accept_forever(listener, nursery, server.serve_client, "http")

    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(accept, listener)
        task_status.started()


async def accept_forever(listener: trio.SocketListener, nursery: trio.Nursery,
                         serve: Callable[[trio.SocketStream], Awaitable[None]],
                         what: str) -> None:
    """Start ``serve(stream)`` in ``nursery`` for every connection ``listener`` accepts;
    a failed accept (EMFILE, say) is logged, waited out and retried, never fatal."""
    while True:
        try:
            stream = await listener.accept()
        except OSError as exc:
            logger.warning("%s accept failed: %s", what, exc)
            await trio.sleep(0.1)
            continue
        nursery.start_soon(serve, stream)
