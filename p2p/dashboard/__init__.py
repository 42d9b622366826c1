"""A live page over a swarm: ``p2p dashboard`` and ``scripts/swarm.py --dashboard``.

It polls nodes' admin sockets (read-only commands) or metrics URLs every
second and serves one page (vendored uPlot, no CDN, no build step) behind a
random URL token. User guide: docs/guide/operations.md, "Monitoring"; design:
docs/design/monitoring.md.
"""

from p2p.dashboard.board import Board, NodeAbsent, Snapshot
from p2p.dashboard.server import DEFAULT_LISTEN, Dashboard, DashboardThread
from p2p.dashboard.sources import (
    READ_COMMANDS,
    SLOW_EVERY,
    MetricsUrlSource,
    NodeSource,
    SocketSource,
)

__all__ = ["DEFAULT_LISTEN", "READ_COMMANDS", "SLOW_EVERY", "Board", "Dashboard",
           "DashboardThread", "MetricsUrlSource", "NodeAbsent", "NodeSource", "Snapshot",
           "SocketSource"]
