"""The node's metrics for Prometheus, read from the node at each scrape.

A custom collector (no counters updated on the hot paths): every scrape reads
the same numbers ``p2p status``, ``p2p models`` and ``p2p metrics`` show and
yields them as metric families with Prometheus names (``p2p_`` prefix, units
in the name, counters ending ``_total``). Labels are bounded: model names,
message types of the codec, fixed reasons and states; never a peer id on a
counter. Numeric status fields this module does not know (added later) come
out generically as ``p2p_status{field=...}``. The metric list is in
docs/guide/operations.md, "Monitoring".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, fields
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from gossip.counters import PushSumCounters
from p2p.metrics.refusals import offences, refusals
from p2p.runtime.admin_commands import AdminSource, NodeAdmin
from p2p.runtime.admin_server import to_jsonable
from p2p.runtime.collaboration import CollaborationState
from p2p.runtime.grouping.status import GROUP_PHASES
from p2p.wire.traffic import Traffic

__all__ = ["NodeCollector"]

#: status fields exported under their own names (or not numbers worth a series)
_STATUS_KNOWN = frozenset({
    "id", "name", "addresses", "uptime", "round", "steps", "loss", "accuracy", "isolated",
    "view_size", "connections", "pid", "data_dir", "collaborating", "collaboration_state",
    "collaboration_reason", "isolation_reason", "rounds", "training", "privacy", "masking",
    "groups", "strategy", "metrics_url",
})
def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    return None


class NodeCollector(Collector):
    """Yields one node's metric families; register it in that node's own registry."""

    def __init__(self, node: AdminSource) -> None:
        self._node = node
        self._admin = NodeAdmin(node)

    def collect(self) -> Iterator[Metric]:
        n = self._node
        status = to_jsonable(self._admin.status())
        assert isinstance(status, dict)
        yield from self._identity(status)
        yield from self._training()
        yield from self._models()
        yield from self._peers(status)
        yield from self._refusals(self._admin.metrics().counters)
        yield from self._wire()
        yield from self._privacy_and_groups()
        yield from self._generic(status)
        for name, stats in n.timings.items():
            s = SummaryMetricFamily(f"p2p_{name}_seconds", f"time spent per {name} (seconds)",
                                    count_value=stats.count, sum_value=stats.total)
            yield s

    # ------------------------------------------------------------------ parts

    def _identity(self, status: dict[str, Any]) -> Iterator[Metric]:
        n = self._node
        info = InfoMetricFamily("p2p_node", "this node: its name and id")
        info.add_metric([], {"name": n.config.node.name, "id": n.identity.node_id.hex(),
                             "strategy": n.config.strategy.name})
        yield info
        yield GaugeMetricFamily("p2p_start_time_seconds", "when the node started (Unix time)",
                                value=n.started)

    def _training(self) -> Iterator[Metric]:
        n = self._node
        p = n.progress
        yield CounterMetricFamily("p2p_rounds", "training rounds done", value=p.round)
        yield CounterMetricFamily("p2p_sgd_steps", "SGD mini-batch steps done", value=p.steps)
        for name, value, text in (
                ("p2p_training_loss", p.loss, "last round's training loss"),
                ("p2p_test_accuracy_ratio", p.accuracy, "last local test accuracy in [0, 1]"),
                ("p2p_test_loss", p.test_loss, "last local test loss")):
            if value is not None:
                yield GaugeMetricFamily(name, text, value=value)
        yield CounterMetricFamily("p2p_checkpoints", "checkpoints written",
                                  value=n.counters.get("checkpoints", 0))

    def _models(self) -> Iterator[Metric]:
        n = self._node
        weight = GaugeMetricFamily("p2p_pushsum_weight", "push-sum weight per shared model",
                                   labels=["model"])
        holders = GaugeMetricFamily("p2p_model_holders", "known peers holding the model",
                                    labels=["model"])
        counters = {f.name: CounterMetricFamily(f"p2p_pushsum_{f.name}",
                                                f"push-sum {f.name.replace('_', ' ')} per model",
                                                labels=["model"])
                    for f in fields(PushSumCounters)}
        for name, core in n.cores.items():
            weight.add_metric([name], core.weight)
            holders.add_metric([name], len(n.sampler.model_view(core.fingerprint)))
            for key, value in n.model_counters(name).items():
                family = counters.get(key)
                if family is None:  # counted by the node, not the core (undelivered, waves)
                    family = counters[key] = CounterMetricFamily(
                        f"p2p_pushsum_{key}", f"push-sum {key.replace('_', ' ')} per model",
                        labels=["model"])
                family.add_metric([name], value)
        yield weight
        yield holders
        yield from counters.values()

    def _peers(self, status: dict[str, Any]) -> Iterator[Metric]:
        n = self._node
        yield GaugeMetricFamily("p2p_view_peers", "peers in the sampler's view",
                                value=len(n.sampler.view()))
        yield GaugeMetricFamily("p2p_isolated", "1 while the node knows no peer",
                                value=int(n.sampler.is_isolated))
        sessions = GaugeMetricFamily("p2p_sessions", "open peer connections by kind",
                                     labels=["kind"])
        sessions.add_metric(["direct"], status.get("connections") or 0)
        relayed = getattr(n.transport, "relayed_sessions", None)  # once relays exist
        if isinstance(relayed, int):
            sessions.add_metric(["relayed"], relayed)
        yield sessions
        state = status.get("collaboration_state")  # read once, by status
        yield StateSetMetricFamily(
            "p2p_collaboration_state", "whether a known peer holds one of the node's models, "
            "and if not why", value={s.value: s.value == state for s in CollaborationState})
        stats = n.sampler.stats
        for key, value in asdict(stats).items():
            yield CounterMetricFamily(f"p2p_peer_sampling_{key}",
                                      f"peer sampling: {key.replace('_', ' ')}", value=value)

    def _refusals(self, counters: dict[str, int | float]) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "p2p_refusals", "messages refused, by where and why (push: per model)",
            labels=["source", "reason", "model"])
        for r in refusals(counters):
            family.add_metric([r.source, r.reason, r.model], r.count)
        yield family
        by_source = CounterMetricFamily("p2p_offences", "warning lines peers caused (written "
                                        "or rate-limited), by subsystem", labels=["source"])
        for source, count in offences(counters).items():
            by_source.add_metric([source], count)
        yield by_source

    def _wire(self) -> Iterator[Metric]:
        traffic = getattr(self._node.transport, "traffic", None)
        if not isinstance(traffic, Traffic):
            return
        messages = CounterMetricFamily("p2p_messages", "requests and replies by direction and "
                                       "type", labels=["direction", "type"])
        sizes = CounterMetricFamily("p2p_message_bytes", "encoded bytes of requests and replies "
                                    "by direction and type", labels=["direction", "type"])
        for (direction, kind), (count, size) in sorted(traffic.snapshot().items()):
            messages.add_metric([direction, kind], count)
            sizes.add_metric([direction, kind], size)
        yield messages
        yield sizes
        written = getattr(getattr(self._node.transport, "bytes_sent", None), "total", None)
        if isinstance(written, int):
            yield CounterMetricFamily("p2p_wire_sent_bytes", "bytes written to sockets (every "
                                      "frame: header, payload, AEAD tag)", value=written)

    def _privacy_and_groups(self) -> Iterator[Metric]:
        n = self._node
        spent = n.privacy_spent()
        if spent is not None:
            if spent.epsilon != float("inf"):
                yield GaugeMetricFamily("p2p_privacy_epsilon", "DP-SGD epsilon spent so far "
                                        "(at p2p_privacy_delta)", value=spent.epsilon)
            yield GaugeMetricFamily("p2p_privacy_delta", "DP-SGD delta", value=spent.delta)
            if spent.budget is not None:
                yield GaugeMetricFamily("p2p_privacy_epsilon_budget", "epsilon the node may "
                                        "spend", value=spent.budget)
            yield CounterMetricFamily("p2p_privacy_dp_steps", "DP-SGD steps counted",
                                      value=spent.steps)
        groups = n.groups_status()
        if groups.phase == "off":
            return
        yield StateSetMetricFamily("p2p_group_phase", "automatic grouping's phase",
                                   value={phase: phase == groups.phase for phase in GROUP_PHASES})
        own = groups.own
        member = GaugeMetricFamily("p2p_group_members", "members of the node's own group, "
                                   "by its semi-local model", labels=["model"])
        if own is not None:
            member.add_metric([own.model or ""], len(own.members))
        yield member
        yield GaugeMetricFamily("p2p_groups", "groups of two or more nodes agreed",
                                value=sum(1 for g in groups.groups if len(g.members) > 1))

    def _generic(self, status: dict[str, Any]) -> Iterator[Metric]:
        """Numbers the status and the strategy report that have no metric of their own."""
        family = GaugeMetricFamily("p2p_status", "a numeric field of `p2p status` without a "
                                   "metric of its own (e.g. task metrics)", labels=["field"])
        for key, value in status.items():
            if key in _STATUS_KNOWN:
                continue
            if isinstance(value, dict):
                for sub, item in value.items():
                    number = _number(item)
                    if number is not None:
                        family.add_metric([f"{key}.{sub}"], number)
            elif (number := _number(value)) is not None:
                family.add_metric([key], number)
        yield family
        strategy = GaugeMetricFamily("p2p_strategy", "what the collaboration strategy reports",
                                     labels=["field"])
        for key, value in self._node.strategy_status().items():
            number = _number(value)
            if number is not None:
                strategy.add_metric([key], number)
        yield strategy
