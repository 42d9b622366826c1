"""The dashboard's trio side: poll the nodes every second, serve the page and its JSON.

Routes: ``/`` (the page) and ``/api/state`` (the board's JSON) need the
random token of the URL the dashboard printed, since they show what the
admin sockets protect; ``/static/<file>`` (the page's script, styles and the
vendored uPlot, shipped in the package) carries nothing private. The
dashboard lowers its own CPU priority (:data:`NICE`) so that, sharing a
machine with the nodes it watches, it yields the CPU to them.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable, Sequence
from importlib import resources

import trio

from p2p.cli.dashboard_args import DEFAULT_LISTEN, NICE
from p2p.dashboard.board import Board, NodeAbsent
from p2p.dashboard.sources import NodeSource
from p2p.web import HttpRequest, HttpResponse, bind_http, listen_url, serve_http

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_LISTEN", "NICE", "Dashboard", "DashboardThread", "STATIC_FILES",
           "lower_priority"]

_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".html": "text/html; charset=utf-8", ".txt": "text/plain; charset=utf-8"}
STATIC_FILES = ("dashboard.js", "dashboard.css", "uPlot.iife.min.js", "uPlot.min.css",
                "uPlot-LICENSE.txt")


def lower_priority(increment: int) -> str | None:
    """Lower the CPU priority of the calling thread (on Linux; of the process elsewhere)
    by ``increment``, and of the threads it starts; why it could not, or None."""
    if increment <= 0:
        return None
    try:
        os.nice(increment)
    except OSError as exc:
        return f"dashboard: could not lower its CPU priority (os.nice({increment})): {exc}"
    return None


def _static(name: str) -> bytes:
    return resources.files("p2p.dashboard").joinpath("static", name).read_bytes()


class Dashboard:
    """Watches the nodes ``discover()`` lists (called every poll: a glob may find new
    data directories) and answers the page's requests."""

    def __init__(self, discover: Callable[[], Sequence[NodeSource]], *,
                 interval: float = 1.0, token: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.discover = discover
        self.interval = interval
        self.token = token or secrets.token_urlsafe(18)
        self.board = Board()
        self.clock = clock
        self.polls = 0
        self._limit = trio.CapacityLimiter(8)
        self._sources: dict[str, NodeSource] = {}  # key -> the source polled (it keeps state)

    async def poll_once(self) -> None:
        found = {s.key: s for s in self.discover()}
        self._sources = {key: self._sources.get(key, s) for key, s in found.items()}
        sources = list(self._sources.values())
        now = self.clock()
        self.board.watch(((s.key, s.label) for s in sources), now)
        async with trio.open_nursery() as nursery:
            for source in sources:
                nursery.start_soon(self._poll_source, source, now)
        self.board.tick(now)
        self.polls += 1

    async def _poll_source(self, source: NodeSource, now: float) -> None:
        try:
            snapshot = await trio.to_thread.run_sync(source.poll, limiter=self._limit)
        except NodeAbsent as exc:
            self.board.record(source.key, now, absent=str(exc))
        except Exception as exc:  # a node answering wrongly must not stop the page
            self.board.record(source.key, now, error=f"{type(exc).__name__}: {exc}")
        else:
            self.board.record(source.key, now, snapshot)

    async def poll_forever(self) -> None:
        while True:
            started = trio.current_time()
            await self.poll_once()
            await trio.sleep_until(started + self.interval)

    def route(self, request: HttpRequest) -> HttpResponse:
        path = request.path
        if path.startswith("/static/"):
            name = path[len("/static/"):]
            if name not in STATIC_FILES:
                return HttpResponse.text(404, "no such file")
            return HttpResponse(200, _static(name),
                                _TYPES.get(name[name.rfind("."):], "application/octet-stream"))
        if path not in ("/", "/api/state"):
            return HttpResponse.text(404, "not found; the dashboard is at / (with its token)")
        given = request.query.get("token", "")
        if not hmac.compare_digest(given.encode(), self.token.encode()):
            return HttpResponse.text(403, "wrong or missing token: open the URL the dashboard "
                                          "printed when it started (it ends in ?token=...)")
        if path == "/":
            return HttpResponse(200, _static("index.html"), _TYPES[".html"])
        body = json.dumps(self.board.view(self.clock()), allow_nan=False).encode()
        return HttpResponse(200, body, "application/json")

    async def run(self, listeners: list[trio.SocketListener], *,
                  task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve on ``listeners`` and poll until cancelled."""
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_http, listeners, self.route)
            nursery.start_soon(self.poll_forever)
            task_status.started()


class DashboardThread:
    """A dashboard on a trio loop of its own in a daemon thread (the swarm launcher's
    ``--dashboard``, which is not a trio program). Bound on construction. On Linux the
    thread lowers its own priority by ``nice`` (elsewhere that would lower the whole
    launcher and the daemons it starts, so it does not)."""

    def __init__(self, dashboard: Dashboard, host: str, port: int, *,
                 nice: int = NICE) -> None:
        self.dashboard = dashboard
        self.nice = nice if sys.platform.startswith("linux") else 0
        self._listeners = bind_http(host, port, setting="--dashboard-listen")
        self.url = f"{listen_url(self._listeners)}/?token={dashboard.token}"
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name="dashboard", daemon=True)

    def start(self) -> str:
        self._thread.start()
        self._started.wait(10.0)
        return self.url

    def _main(self) -> None:
        problem = lower_priority(self.nice)  # this thread and the workers it starts
        if problem is not None:
            logger.warning("%s", problem)

        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            with trio.CancelScope() as scope:
                self._scope = scope
                self._started.set()
                await self.dashboard.run(self._listeners)

        try:
            trio.run(main)
        except Exception:
            logger.exception("the dashboard stopped")

    def stop(self) -> None:
        if self._token is not None and self._scope is not None and self._thread.is_alive():
            scope = self._scope
            try:
                trio.from_thread.run_sync(scope.cancel, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join(5.0)
