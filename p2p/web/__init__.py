"""A minimal HTTP/1.1 server on trio streams, for the metrics endpoint and the dashboard.

Both serve a few GET routes to a scraper or a browser; a handler on the node's own
trio loop needs no second event loop or framework (docs/design/monitoring.md).
"""

from p2p.web.http import (
    HttpRequest,
    HttpResponse,
    Route,
    bind_http,
    listen_url,
    serve_http,
)

__all__ = ["HttpRequest", "HttpResponse", "Route", "bind_http", "listen_url", "serve_http"]
