"""What the dashboard shows, kept from the nodes' answers: a sans-IO core.

:class:`Board` takes each poll's :class:`Snapshot` (or why the node did not
answer) with the time, and gives the page's JSON: one row per node (state,
round, accuracy, weight, view, last error), aligned time series per node and
their mean, the peer graph of the last minute, and refusals and offences by
reason. A node's state: ``alive``, ``isolated`` (no peer known), ``dead`` (it
answered before and no longer does), ``no-node`` (nothing ever answered
there) or ``error`` (something answers but not as a node should).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from p2p.metrics.refusals import Refusal

__all__ = ["CONTACT_WINDOW", "Board", "NodeAbsent", "Snapshot"]

#: seconds: a peer contacted within this long is an edge of the graph
CONTACT_WINDOW = 60.0


class NodeAbsent(Exception):
    """No node answers there (no socket, connection refused, no HTTP server)."""


@dataclass(frozen=True)
class Snapshot:
    """One node's answers to one poll (read-only commands or its metrics URL)."""

    status: Mapping[str, Any]
    models: Sequence[Mapping[str, Any]] = ()
    peers: Sequence[Mapping[str, Any]] = ()  # every peer row of the view and model views
    refusals: Sequence[Refusal] = ()
    offences: Mapping[str, int] = field(default_factory=dict)
    bytes_sent: int | None = None  # written to sockets, else the push-sum payload
    # which reading of the counters above (bytes, refusals) this is: the same number as
    # the last poll's means they were not read again; None: read by this poll
    counters_seq: int | None = None


@dataclass
class _Row:
    key: str
    label: str
    state: str = "no-node"
    error: str | None = None
    snapshot: Snapshot | None = None
    seen: float | None = None  # when it last answered
    changed: float | None = None  # when its state last changed
    previous_bytes: tuple[float, int, int | None] | None = None  # when, sent, counters_seq
    rate: float | None = None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


class Board:
    """Rows, series and graph of the nodes a dashboard watches (keys in display order)."""

    def __init__(self, *, max_points: int = 900) -> None:
        self._rows: dict[str, _Row] = {}
        self.times: deque[float] = deque(maxlen=max_points)
        self._series: dict[str, dict[str, deque[float | None]]] = {}
        self.max_points = max_points

    def watch(self, sources: Iterable[tuple[str, str]], now: float) -> None:
        """Watch these (key, label) pairs: new ones get a row (a glob found a new data
        dir); a watched one no longer listed is marked absent (its directory is gone)."""
        listed = set()
        for key, label in sources:
            listed.add(key)
            if key not in self._rows:
                self._rows[key] = _Row(key, label)
        for key in self._rows.keys() - listed:
            self.record(key, now, absent="no longer listed: its data directory is gone")

    def record(self, key: str, now: float, snapshot: Snapshot | None = None, *,
               absent: str | None = None, error: str | None = None) -> None:
        """What one poll of ``key`` found: an answer, ``absent`` (no node answers: why),
        or ``error`` (something answered wrongly: why)."""
        row = self._rows[key]
        before = row.state
        if snapshot is not None:
            row.snapshot, row.seen, row.error = snapshot, now, None
            row.state = "isolated" if snapshot.status.get("isolated") is True else "alive"
        elif absent is not None:
            row.state = "dead" if row.seen is not None else "no-node"
            row.error = absent
        else:
            row.state, row.error = "error", error
        if row.state != before:
            row.changed = now

    def tick(self, now: float) -> None:
        """Close one poll round: a point per node on every series (None where unknown)."""
        self.times.append(now)
        for row in self._rows.values():
            series = self._series.setdefault(row.key, {
                name: deque([None] * (len(self.times) - 1), maxlen=self.max_points)
                for name in ("accuracy", "loss", "bytes_rate")})
            up = row.snapshot is not None and row.state in ("alive", "isolated")
            status = row.snapshot.status if up and row.snapshot else {}
            series["accuracy"].append(_number(status.get("accuracy")))
            series["loss"].append(_number(status.get("loss")))
            series["bytes_rate"].append(self._rate(row, now) if up else None)

    @staticmethod
    def _rate(row: _Row, now: float) -> float | None:
        """Bytes per second between the last two readings of the node's counters (held
        while a poll did not read them again)."""
        snapshot = row.snapshot
        sent = None if snapshot is None else snapshot.bytes_sent
        if snapshot is None or sent is None:
            return None
        seq, previous = snapshot.counters_seq, row.previous_bytes
        if seq is not None and previous is not None and previous[2] == seq:
            return row.rate  # not read again since
        row.previous_bytes = (now, sent, seq)
        row.rate = None if previous is None or now <= previous[0] or sent < previous[1] else (
            (sent - previous[1]) / (now - previous[0]))
        return row.rate

    # ------------------------------------------------------------------ the page's JSON

    def view(self, now: float) -> dict[str, Any]:
        rows = [self._row_view(row, now) for row in self._rows.values()]
        return {"now": now, "nodes": rows, "series": self._series_view(),
                "graph": self._graph(now), "refusals": self._refusals(),
                "offences": self._offences()}

    def _row_view(self, row: _Row, now: float) -> dict[str, Any]:
        status = dict(row.snapshot.status) if row.snapshot is not None else {}
        models = list(row.snapshot.models) if row.snapshot is not None else []
        shared = [m for m in models if m.get("weight") is not None]
        groups = status.get("groups") if isinstance(status.get("groups"), dict) else {}
        return {
            "key": row.key, "label": row.label, "state": row.state, "error": row.error,
            "seen_ago": None if row.seen is None else max(0.0, now - row.seen),
            "id": status.get("id"), "name": status.get("name"), "round": status.get("round"),
            "rounds": status.get("rounds"), "accuracy": status.get("accuracy"),
            "loss": status.get("loss"), "view_size": status.get("view_size"),
            "connections": status.get("connections"), "training": status.get("training"),
            "collaboration": status.get("collaboration_state"),
            "weights": {str(m.get("name")): m.get("weight") for m in shared},
            "models": [str(m.get("name")) for m in models],
            "group": (groups or {}).get("model"),
            "metrics": status.get("metrics"),
        }

    def _series_view(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t": list(self.times)}
        for name in ("accuracy", "loss", "bytes_rate"):
            per_node = {key: list(s[name]) for key, s in self._series.items()}
            out[name] = per_node
            columns = zip(*per_node.values(), strict=True) if per_node else (
                () for _ in self.times)  # no node yet: a null per poll, aligned with "t"
            out[f"{name}_mean"] = [
                (sum(v for v in col if v is not None) / n) if (n := sum(
                    v is not None for v in col)) else None for col in columns]
        return out

    def _graph(self, now: float) -> dict[str, Any]:
        """Nodes (by id) and who exchanged with whom within :data:`CONTACT_WINDOW`."""
        ids = {row.snapshot.status.get("id"): row.key for row in self._rows.values()
               if row.snapshot is not None and isinstance(row.snapshot.status.get("id"), str)}
        edges: dict[tuple[str, str], dict[str, Any]] = {}
        outside: set[str] = set()
        for row in self._rows.values():
            if row.snapshot is None or row.state not in ("alive", "isolated"):
                continue
            for peer in row.snapshot.peers:
                contact = _number(peer.get("last_contact"))
                other = peer.get("id")
                if contact is None or contact > CONTACT_WINDOW or not isinstance(other, str):
                    continue
                if other not in ids:
                    outside.add(other)
                    continue
                pair = (row.key, ids[other])
                key = (min(pair), max(pair))
                if key[0] == key[1]:
                    continue
                relayed = bool(peer.get("relayed")) or bool(peer.get("via"))
                edge = edges.setdefault(key, {"a": key[0], "b": key[1], "relayed": relayed,
                                              "models": set()})
                edge["relayed"] = edge["relayed"] or relayed
                edge["models"].update(str(m) for m in peer.get("models") or [])
        return {"edges": [dict(e, models=sorted(e["models"])) for e in edges.values()],
                "outside_peers": len(outside), "window": CONTACT_WINDOW}

    def _refusals(self) -> list[dict[str, Any]]:
        """Refusals summed over the nodes that answered, per (source, reason)."""
        totals: dict[tuple[str, str], int] = {}
        for row in self._rows.values():
            for r in row.snapshot.refusals if row.snapshot is not None else ():
                totals[(r.source, r.reason)] = totals.get((r.source, r.reason), 0) + r.count
        return [{"source": s, "reason": r, "count": c}
                for (s, r), c in sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))]

    def _offences(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for row in self._rows.values():
            for source, count in (row.snapshot.offences if row.snapshot else {}).items():
                totals[source] = totals.get(source, 0) + count
        return totals
