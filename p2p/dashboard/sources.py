"""Where the dashboard reads a node: its admin socket, or its metrics URL.

Both are blocking reads (the dashboard runs them in worker threads) that give
a :class:`~p2p.dashboard.board.Snapshot`, raise
:class:`~p2p.dashboard.board.NodeAbsent` when no node answers, and any other
exception when something answers wrongly. The admin source sends only the
read-only commands of :data:`READ_COMMANDS`: the dashboard never changes a node.
It asks ``status`` every poll and the slower-changing ``models``, ``peers`` and
``metrics`` every :data:`SLOW_EVERY` polls (what a poll costs the node:
docs/results/monitoring.md).
"""

from __future__ import annotations

import dataclasses
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from prometheus_client.parser import text_string_to_metric_families

from p2p.cli.admin_client import AdminClient, AdminConnectionError
from p2p.dashboard.board import NodeAbsent, Snapshot
from p2p.metrics.refusals import Refusal, offences, refusals
from p2p.runtime.admin_server import ADMIN_SOCKET_NAME

__all__ = ["READ_COMMANDS", "SLOW_EVERY", "MetricsUrlSource", "NodeSource", "SocketSource"]

#: the only admin commands a dashboard sends
READ_COMMANDS = ("status", "models", "peers", "metrics")
#: the admin source asks models, peers and metrics once every this many polls
SLOW_EVERY = 5
MAX_METRICS_BYTES = 4 * 1024 * 1024


class NodeSource(Protocol):
    """One node the dashboard watches."""

    key: str
    label: str

    def poll(self) -> Snapshot: ...


class SocketSource:
    """A node on this machine, read through ``DATA_DIR/admin.sock``: ``status`` every
    poll, the rest every ``slow_every`` polls and after any failed poll (between
    those, the snapshot carries the last answers and their ``counters_seq``)."""

    def __init__(self, data_dir: Path, *, timeout: float = 3.0,
                 slow_every: int = SLOW_EVERY) -> None:
        self.data_dir = data_dir
        self.key = str(data_dir)
        self.label = data_dir.name or str(data_dir)
        self.timeout = timeout
        self.slow_every = slow_every
        self._slow: Snapshot | None = None  # the last full reading (status aside)
        self._polls = 0

    def read(self, commands: Sequence[str]) -> list[dict[str, Any]]:
        """The results of ``commands`` (read-only ones only), asked on one connection."""
        refused = [c for c in commands if c not in READ_COMMANDS]
        if refused:
            raise ValueError(f"the dashboard only reads; {refused[0]!r} is not one of "
                             f"{', '.join(READ_COMMANDS)}")
        socket = self.data_dir / ADMIN_SOCKET_NAME
        if not socket.exists():
            raise NodeAbsent("no admin socket: no node runs in this data directory")
        try:
            return AdminClient(socket, timeout=self.timeout).request_many(commands)
        except AdminConnectionError as exc:
            raise NodeAbsent(str(exc)) from None

    def poll(self) -> Snapshot:
        slow = self._slow if self._polls % self.slow_every else None
        self._polls += 1
        self._slow = None  # until this poll succeeds: a node that failed is read in full
        if slow is not None:
            (status,) = self.read(READ_COMMANDS[:1])
            self._slow = slow
            return dataclasses.replace(slow, status=status)
        status, models_reply, peers, metrics = self.read(READ_COMMANDS)
        models = models_reply.get("models") or []
        counters = metrics.get("counters") or {}
        rows = list(peers.get("view") or [])
        for model_rows in (peers.get("models") or {}).values():
            rows += list(model_rows or [])
        wire = counters.get("transport.bytes_sent")
        payload = sum(int(m.get("bytes_sent") or 0) for m in models)
        self._slow = Snapshot(
            status=status, models=models, peers=rows, refusals=refusals(counters),
            offences=offences(counters), counters_seq=self._polls,
            bytes_sent=int(wire) if isinstance(wire, int | float) else payload)
        return self._slow


class MetricsUrlSource:
    """A node anywhere, read from its Prometheus endpoint (no peer graph: peer ids are
    never labels of its metrics)."""

    def __init__(self, url: str, *, timeout: float = 3.0) -> None:
        self.url = url
        self.key = url
        self.label = url.split("//", 1)[-1].split("/", 1)[0]
        self.timeout = timeout

    def poll(self) -> Snapshot:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout) as reply:  # noqa: S310
                text = reply.read(MAX_METRICS_BYTES).decode("utf-8")
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            raise NodeAbsent(f"{self.url}: {getattr(exc, 'reason', exc)}") from None
        return snapshot_from_metrics(text_string_to_metric_families(text))


def snapshot_from_metrics(families: Iterable[Any]) -> Snapshot:
    """The parts of a :class:`Snapshot` a node's metrics carry."""
    status: dict[str, Any] = {}
    weights: dict[str, dict[str, Any]] = {}
    refused: list[Refusal] = []
    offence: dict[str, int] = {}
    payload = 0
    wire: int | None = None
    scalar = {"p2p_rounds_total": "round", "p2p_test_accuracy_ratio": "accuracy",
              "p2p_training_loss": "loss", "p2p_view_peers": "view_size"}
    for family in families:
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name in scalar:
                status[scalar[name]] = int(value) if name.endswith("_total") else value
            elif name == "p2p_node_info":
                status.update(id=labels.get("id"), name=labels.get("name"))
            elif name == "p2p_isolated":
                status["isolated"] = value > 0
            elif name == "p2p_pushsum_weight":
                weights.setdefault(labels["model"], {"name": labels["model"]})["weight"] = value
            elif name == "p2p_pushsum_bytes_sent_total":
                payload += int(value)
            elif name == "p2p_wire_sent_bytes_total":
                wire = int(value)
            elif name == "p2p_refusals_total":
                refused.append(Refusal(labels.get("source", ""), labels.get("reason", ""),
                                       labels.get("model", ""), int(value)))
            elif name == "p2p_offences_total":
                offence[labels.get("source", "")] = int(value)
    if "round" not in status:
        raise ValueError("not a p2p node's metrics (no p2p_rounds_total)")
    return Snapshot(status=status, models=list(weights.values()), refusals=refused,
                    offences=offence, bytes_sent=payload if wire is None else wire)
