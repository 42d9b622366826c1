"""``p2p dashboard``: watch nodes in a browser.

::

    p2p dashboard --data-dir n0 --data-dir n1          # nodes on this machine
    p2p dashboard --glob "swarm-data/*"                  # every data dir the glob finds
    p2p dashboard --metrics-url http://host:9400/metrics  # nodes elsewhere
    p2p dashboard ... --listen 0.0.0.0:9480 --allow-remote

Prints the page's URL (with its random token) and serves until Ctrl-C.
"""

from __future__ import annotations

import argparse
import glob
import ipaddress
import sys
from collections.abc import Sequence
from pathlib import Path

import trio

from p2p.dashboard.server import Dashboard, lower_priority
from p2p.dashboard.sources import MetricsUrlSource, NodeSource, SocketSource
from p2p.web import bind_http, listen_url
from peersampling.address import AddressError, parse_host_port

__all__ = ["DashboardUsage", "check_listen", "run_dashboard", "sources_for"]


class DashboardUsage(ValueError):
    """A flag of ``p2p dashboard`` is wrong; the message says how to fix it."""


def check_listen(text: str, allow_remote: bool) -> tuple[str, int]:
    """The host and port of ``--listen``; a host other than loopback needs ``allow_remote``."""
    try:
        address = parse_host_port(text, allow_port_zero=True)
    except AddressError as exc:
        raise DashboardUsage(f"--listen: {exc}") from None
    host = address.host
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not allow_remote:
        raise DashboardUsage(f"--listen {text}: not a loopback address; the page shows what "
                             "the nodes' admin sockets protect, so serving it to other machines "
                             "needs --allow-remote (its URL token is then the only gate)")
    return host, address.port


def sources_for(data_dirs: Sequence[str], patterns: Sequence[str],
                urls: Sequence[str]) -> list[NodeSource]:
    """The nodes to watch now: the data dirs, what the globs match, the metrics URLs."""
    dirs = [Path(d).expanduser().absolute() for d in data_dirs]
    for pattern in patterns:
        dirs += [Path(p).absolute() for p in sorted(glob.glob(str(Path(pattern).expanduser())))
                 if Path(p).is_dir()]
    seen: set[Path] = set()
    out: list[NodeSource] = []
    for d in dirs:
        if d not in seen:
            seen.add(d)
            out.append(SocketSource(d))
    out += [MetricsUrlSource(url) for url in dict.fromkeys(urls)]
    return out


def run_dashboard(args: argparse.Namespace) -> int:
    """``p2p dashboard``: serve until interrupted; exit status."""
    if not (args.data_dir or args.glob or args.metrics_url):
        raise DashboardUsage("nothing to watch: give --data-dir DIR, --glob PATTERN or "
                             "--metrics-url URL (each may repeat)")
    if not args.interval > 0:
        raise DashboardUsage(f"--interval: expected seconds > 0, got {args.interval}")
    if not 0 <= args.nice <= 19:
        raise DashboardUsage(f"--nice: expected 0 (keep the priority) to 19 (the lowest), "
                             f"got {args.nice}")
    host, port = check_listen(args.listen, args.allow_remote)
    dashboard = Dashboard(lambda: sources_for(args.data_dir, args.glob, args.metrics_url),
                          interval=args.interval)
    if not dashboard.discover():
        print(f"p2p dashboard: no data directory matches {', '.join(args.glob)} yet; the page "
              "lists them as they appear", file=sys.stderr)
    listeners = bind_http(host, port, setting="--listen")  # a taken port: one line, exit 3
    problem = lower_priority(args.nice)
    if problem is not None:
        print(problem, file=sys.stderr)
    print(f"dashboard: {listen_url(listeners)}/?token={dashboard.token}  (read-only; Ctrl-C "
          "stops it)", flush=True)
    trio.run(dashboard.run, listeners)
    return 0
