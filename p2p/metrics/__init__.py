"""Prometheus metrics of a node: the collector and the ``/metrics`` endpoint.

``[metrics] listen = "127.0.0.1:9400"`` (or ``p2p run --metrics ADDR``) serves
them; the metric list and a scrape config are in docs/guide/operations.md,
"Monitoring"; why a collector read at scrape time and a handler on the node's
loop: docs/design/monitoring.md.
"""

from p2p.metrics.collector import NodeCollector
from p2p.metrics.endpoint import (
    MAX_AGE,
    METRICS_PATH,
    METRICS_SETTING,
    MetricsEndpoint,
    node_registry,
)
from p2p.metrics.refusals import Refusal, offences, refusals

__all__ = ["MAX_AGE", "METRICS_PATH", "METRICS_SETTING", "MetricsEndpoint", "NodeCollector",
           "Refusal", "node_registry", "offences", "refusals"]
