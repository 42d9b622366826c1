"""``[metrics]``: the Prometheus endpoint of a node (off unless ``listen`` is set).

What it serves and how to scrape it: docs/guide/operations.md, "Monitoring".
"""

from __future__ import annotations

from dataclasses import dataclass

from p2p.config.kinds import Address, setting
from peersampling.address import HostPort

__all__ = ["METRICS_SETTING", "MetricsConfig"]

#: what chooses the endpoint's address: named in the error line of a taken port
METRICS_SETTING = "--metrics / metrics.listen"


@dataclass(frozen=True)
class MetricsConfig:
    """``[metrics]``: where the node serves its metrics over HTTP, if anywhere."""

    listen: HostPort | None = setting(
        None, Address(allow_port_zero=True),
        '"host:port" serving Prometheus metrics at /metrics; port 0 = any free port; '
        "unset = no endpoint")
