"""The node's ``/metrics`` endpoint: its own registry, served on the node's trio loop.

Each node has its own :class:`~prometheus_client.CollectorRegistry` (tests run
several nodes in one process): the node's collector plus the standard
``process_*``, ``python_info`` and ``python_gc_*`` collectors. The port is bound
when the endpoint is built, so a taken port stops the node before it resumes
anything (one line, exit 3). Scrapes are answered by :mod:`p2p.web`'s handler
on the node's loop: no thread, no second event loop. The text is rendered at
most once per :data:`MAX_AGE` per format, so any number of scrapers cost the
node one rendering a second (docs/design/monitoring.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import trio
from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.exposition import choose_encoder

from p2p.config.metrics_section import METRICS_SETTING
from p2p.metrics.collector import NodeCollector
from p2p.runtime.admin_commands import AdminSource
from p2p.web import HttpRequest, HttpResponse, bind_http, listen_url, serve_http
from peersampling.address import HostPort

__all__ = ["MAX_AGE", "METRICS_PATH", "METRICS_SETTING", "MetricsEndpoint", "node_registry"]

METRICS_PATH = "/metrics"
#: seconds a rendered exposition is served again before it is rendered anew
MAX_AGE = 1.0


def node_registry(node: AdminSource) -> CollectorRegistry:
    """A registry of its own for ``node``: its metrics and the process's."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(node))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


class MetricsEndpoint:
    """Serves ``node``'s registry at ``http://<listen>/metrics`` (nothing when ``listen``
    is None). Bound on construction; :attr:`url` says where, port 0 resolved. A scrape
    within ``max_age`` seconds of the last rendering in its format gets that text."""

    def __init__(self, node: AdminSource, listen: HostPort | None, *,
                 max_age: float = MAX_AGE, clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = node_registry(node)
        self.max_age = max_age
        self._clock = clock
        self._rendered: dict[str, tuple[float, bytes]] = {}  # content type -> (when, text)
        self.renderings = 0
        self._listeners: list[trio.SocketListener] = []
        self.url: str | None = None
        if listen is not None:
            self._listeners = bind_http(listen.host, listen.port, setting=METRICS_SETTING)
            self.url = listen_url(self._listeners) + METRICS_PATH

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """The registry as the text format ``accept`` asks for (OpenMetrics or
        Prometheus 0.0.4), and its content type."""
        encoder, content_type = choose_encoder(accept)
        now = self._clock()
        cached = self._rendered.get(content_type)
        if cached is not None and 0 <= now - cached[0] < self.max_age:
            return cached[1], content_type
        body = encoder(self.registry)
        self._rendered[content_type] = (now, body)
        self.renderings += 1
        return body, content_type

    def route(self, request: HttpRequest) -> HttpResponse:
        if request.path != METRICS_PATH:
            return HttpResponse.text(404, f"not found; the metrics are at {METRICS_PATH}")
        body, content_type = self.exposition(request.headers.get("accept", ""))
        return HttpResponse(200, body, content_type)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        """Answer scrapes until cancelled (returns at once without an address)."""
        if not self._listeners:
            task_status.started()
            return
        await serve_http(self._listeners, self.route, task_status=task_status)
