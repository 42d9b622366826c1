"""The flags of ``p2p dashboard`` (here so that ``p2p --help`` loads no trio; the
command itself is :mod:`p2p.dashboard.cli`)."""

from __future__ import annotations

import argparse

__all__ = ["DEFAULT_LISTEN", "NICE", "add_arguments"]

DEFAULT_LISTEN = "127.0.0.1:9480"
#: how far the dashboard lowers its CPU priority by default (``os.nice``; 19 is the lowest)
NICE = 10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", action="append", default=[], metavar="DIR",
                        help="a node's data directory (its admin socket); repeat for more")
    parser.add_argument("--glob", action="append", default=[], metavar="PATTERN",
                        help='data directories matching PATTERN, e.g. "swarm-data/*" (looked '
                             "up again every poll: new nodes appear)")
    parser.add_argument("--metrics-url", action="append", default=[], metavar="URL",
                        help="a node's Prometheus endpoint (nodes on other machines; no peer "
                             "graph for those)")
    parser.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                        help=f"where to serve the page (default {DEFAULT_LISTEN}; port 0 = "
                             "any free port)")
    parser.add_argument("--allow-remote", action="store_true",
                        help="allow a --listen address other than loopback (the page shows "
                             "what the admin sockets protect; its URL token is the only gate)")
    parser.add_argument("--nice", type=int, default=NICE, metavar="N",
                        help=f"lower the dashboard's CPU priority by N, 0 to 19 (default {NICE}: "
                             "on the nodes' machine it yields the CPU to them; 0 keeps it)")
    parser.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                        help="seconds between polls of every node (default 1)")
