"""The node's answers to admin commands (DESIGN section 9).

:class:`NodeAdmin` reads a running node through :class:`AdminSource`, the
narrow view of what the commands report (identity, progress, sampler view,
push-sum cores and counters, timings, transport address) and the two actions
they take (checkpoint, stop), not through the whole node.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import trio

from p2p.runtime.admin_server import (
    CheckpointReport,
    MetricsReport,
    ModelReport,
    ModelsReport,
    PeerReport,
    PeersReport,
    StatusReport,
    StopReport,
)
from p2p.runtime.relay.book import RELAY_TAG
from p2p.wire.transport import ByteCount

if TYPE_CHECKING:
    from gossip import PushSum
    from learner.dp.accounting import PrivacySpent
    from p2p.config import NodeConfig
    from p2p.runtime.assembly import LearningSetup
    from p2p.runtime.checkpoint import CheckpointStore
    from p2p.runtime.collaboration import CollaborationStatus
    from p2p.runtime.connectivity import ReachabilityStatus
    from p2p.runtime.grouping.status import GroupsStatus
    from p2p.runtime.timing import TimingStats
    from p2p.wire.identity import Identity
    from peersampling import PeerSampler


class ProgressView(Protocol):
    """What the trainer has done, as the admin commands report it."""

    @property
    def round(self) -> int: ...
    @property
    def steps(self) -> int: ...
    @property
    def loss(self) -> float | None: ...
    @property
    def accuracy(self) -> float | None: ...
    @property
    def test_loss(self) -> float | None: ...
    @property
    def metrics(self) -> Mapping[str, float]: ...


class ListeningTransport(Protocol):
    """The transport as the admin commands see it (``open_connections`` is optional)."""

    @property
    def listen_address(self) -> str: ...


class AdminSource(Protocol):
    """Everything :class:`NodeAdmin` reads from, or asks of, a running node."""

    @property
    def identity(self) -> Identity: ...
    @property
    def config(self) -> NodeConfig: ...
    @property
    def started(self) -> float: ...
    @property
    def data_dir(self) -> Path: ...
    @property
    def progress(self) -> ProgressView: ...
    @property
    def transport(self) -> ListeningTransport: ...
    @property
    def sampler(self) -> PeerSampler: ...
    @property
    def learning(self) -> LearningSetup: ...
    @property
    def by_fingerprint(self) -> Mapping[bytes, str]: ...
    @property
    def cores(self) -> Mapping[str, PushSum]: ...
    @property
    def peer_failures(self) -> Mapping[bytes, int]: ...
    @property
    def counters(self) -> Mapping[str, int]: ...
    @property
    def timings(self) -> Mapping[str, TimingStats]: ...
    @property
    def store(self) -> CheckpointStore: ...

    @property
    def resumed_at(self) -> int | None: ...
    @property
    def checkpoint_note(self) -> str | None: ...

    def training_note(self) -> str | None: ...

    def collaboration(self) -> CollaborationStatus: ...
    def groups_status(self) -> GroupsStatus: ...
    def privacy_spent(self) -> PrivacySpent | None: ...
    def masking_status(self) -> dict[str, dict[str, object]] | None: ...
    def model_counters(self, name: str) -> dict[str, int]: ...
    def flat_model_counters(self) -> dict[str, int]: ...
    def strategy_status(self) -> dict[str, Any]: ...
    def reachability(self) -> ReachabilityStatus: ...
    def relay_status(self) -> dict[str, Any]: ...
    async def save_checkpoint(self) -> int: ...
    def request_stop(self) -> None: ...


def relay_counters(relay: Mapping[str, Any], transport: object) -> dict[str, int]:
    """``metrics``' ``relay.*`` (what this node relays) and ``paths.*`` (its open
    outgoing connections by path) counters."""
    counters = {f"relay.{k}": v for k, v in relay.items()
                if isinstance(v, int) and not isinstance(v, bool)}
    counters["relay.reservations_active"] = sum(
        1 for r in relay.get("reserved_with", []) if r.get("state") == "active")
    for key, value in relay.get("hole_punch", {}).items():
        counters[f"punch.{key}"] = value
    paths = getattr(transport, "path_counts", None)
    if callable(paths):
        for path, count in paths().items():
            counters[f"paths.{path}"] = count
    return counters


def _seconds_ago(instant: float | None) -> float | None:
    """Seconds since a trio-clock instant (what the admin reports carry)."""
    if instant is None:
        return None
    return max(0.0, trio.current_time() - instant)


def training_summary(rounds: int, done: int, resumed_at: int | None) -> str:
    """One line on the round loop: how far it is, and when ``training.rounds``
    was already reached by the checkpoint resumed at round ``resumed_at``, how
    to train further."""
    if not rounds:
        return f"round {done}, until stopped (training.rounds = 0)"
    if resumed_at is not None and resumed_at >= rounds:
        return (f"nothing to train: training.rounds = {rounds} was already reached by the "
                f"checkpoint (round {resumed_at}). To train further, raise training.rounds "
                f"or pass --rounds N with N > {done}")
    if done >= rounds:
        return f"finished training.rounds = {rounds}; no more SGD steps, still serving peers"
    return f"round {done} of {rounds}"


def budget_summary(spent: PrivacySpent, done: int) -> str:
    """The ``training`` line of a DP node that stopped training for its epsilon budget."""
    return (f"privacy budget spent: epsilon {spent.epsilon:.3g} of {spent.budget:g} after "
            f"{spent.steps} DP-SGD steps (round {done}); no more SGD steps, still serving peers")


def privacy_report(mode: str, spent: PrivacySpent) -> dict[str, Any]:
    """``status``'s ``privacy`` field: the mode and what DP-SGD has spent."""
    return {"mode": mode, **asdict(spent)}


def groups_summary(groups: GroupsStatus) -> dict[str, Any] | None:
    """``status``'s ``groups`` field: where automatic grouping stands and the node's own
    group, in a few numbers (None when clustering is off)."""
    if groups.phase == "off":
        return None
    own = groups.own
    return {
        "phase": groups.phase,
        "epoch": groups.epoch,
        "attempt": groups.attempt,
        "records": groups.records,
        "expected": groups.expected,
        "fingerprint": groups.fingerprint,
        "count": sum(1 for g in groups.groups if len(g.members) > 1),
        "model": None if own is None else own.model,
        "members": None if own is None else len(own.members),
        "peers_agreeing": groups.peers_agreeing,
        "disagreements": groups.disagreements,
    }


def groups_report(node_id: bytes, groups: GroupsStatus) -> dict[str, Any]:
    """The ``groups`` command's result: the node's id and its :class:`GroupsStatus`."""
    return {"id": node_id.hex(), **asdict(groups)}


def offence_counts(node: object) -> dict[str, int]:
    """Offences (warning lines peers caused, written or rate-limited) per subsystem.

    Each subsystem keeps its :class:`~gossip.log_limit.LogLimiter` private as
    ``_offences``; only this reads the count (``metrics``' ``offences.*``, the
    Prometheus ``p2p_offences_total``), so none of their interfaces grew for it.
    """
    def count(obj: object) -> int:
        return int(getattr(getattr(obj, "_offences", None), "warnings_total", 0))

    cores: Mapping[str, object] = getattr(node, "cores", {})
    return {"transport": count(getattr(node, "transport", None)),
            "requests": count(getattr(node, "serving", None)),  # the node's NodeServing
            "peer_sampling": count(getattr(node, "started_sampler", None)),
            "gossip": sum(count(c) for c in cores.values())}


#: ``metrics`` counters of a DP node -> the :class:`PrivacySpent` field they show.
PRIVACY_COUNTERS = {"privacy.epsilon": "epsilon", "privacy.delta": "delta",
                    "privacy.noise_multiplier": "noise_multiplier",
                    "privacy.clip_norm": "clip_norm", "privacy.dp_steps": "steps"}


class NodeAdmin:
    """Implements :class:`p2p.runtime.admin_server.AdminHandler` over an :class:`AdminSource`."""

    def __init__(self, node: AdminSource) -> None:
        self._node = node

    def status(self) -> StatusReport:
        n = self._node
        p = n.progress
        collab = n.collaboration()
        rounds = n.config.training.rounds
        spent = n.privacy_spent()
        training = n.training_note() or training_summary(rounds, p.round, n.resumed_at)
        if spent is not None and spent.budget_spent:
            training = budget_summary(spent, p.round)
        reach = n.reachability()
        return StatusReport(
            id=n.identity.node_id.hex(),
            name=n.config.node.name,
            addresses=[n.transport.listen_address] if n.transport.listen_address else [],
            uptime=time.time() - n.started,
            round=p.round,
            steps=p.steps,
            loss=p.loss,
            accuracy=p.accuracy,
            isolated=n.sampler.is_isolated,
            view_size=len(n.sampler.view()),
            connections=getattr(n.transport, "open_connections", 0),
            data_dir=str(n.data_dir),
            collaborating=collab.collaborating,
            collaboration_state=str(collab.state),
            collaboration_reason=collab.reason,
            isolation_reason=collab.isolation,
            rounds=rounds,
            training=training,
            privacy=None if spent is None else privacy_report(n.config.gossip.privacy, spent),
            masking=n.masking_status(),
            groups=groups_summary(n.groups_status()),
            strategy=n.strategy_status(),
            reachable=reach.reachable,
            reachable_reason=reach.reason,
            confirmed_addresses=list(reach.confirmed),
            relay=n.relay_status(),
            checkpoint=n.checkpoint_note,
            metrics_url=getattr(getattr(n, "metrics_endpoint", None), "url", None),
            metrics=dict(p.metrics) or None,
            test_loss=p.test_loss,
        )

    def groups(self) -> dict[str, Any]:
        n = self._node
        return groups_report(n.identity.node_id, n.groups_status())

    def peers(self) -> PeersReport:
        n = self._node
        names = {**n.by_fingerprint, RELAY_TAG: "relay"}
        view: list[PeerReport] = []
        models: dict[str, list[PeerReport]] = {name: [] for name in n.cores}
        path_to = getattr(n.transport, "path_to", None)  # a TCP transport knows; a test one may not
        for entry in n.sampler.peer_entries():
            d = entry.descriptor
            row = PeerReport(
                id=d.node_id.hex(),
                address=d.address,
                age=d.age,
                last_contact=_seconds_ago(entry.last_contact),
                failures=n.peer_failures.get(d.node_id, 0),
                models=sorted(names.get(t, t.hex()[:12]) for t in d.tags),
                path=None if path_to is None else path_to(d.address),
            )
            if entry.view is None:
                view.append(row)
            else:
                models.setdefault(names.get(entry.view, entry.view.hex()[:12]), []).append(row)
        return PeersReport(view=view, models=models)

    def models(self) -> ModelsReport:
        n = self._node
        layout = n.learning.layout
        rows = []
        for name in layout.shared_models:
            core = n.cores[name]
            c = n.model_counters(name)
            rows.append(ModelReport(
                name=name,
                kind=layout.model_kind(name),
                size=layout.vector_length(name),
                fingerprint=core.fingerprint.hex(),
                weight=core.weight,
                holders=len(n.sampler.model_view(core.fingerprint)),
                pushes_sent=c["pushes_sent"],
                pushes_received=c["pushes_received"],
                pushes_rejected=c["rejected"],
                bytes_sent=c["bytes_sent"],
                bytes_received=c["bytes_received"],
            ))
        rows.append(ModelReport(name="local", kind="local",
                                size=layout.owned_parameter_count("local")))
        return ModelsReport(models=rows)

    def metrics(self) -> MetricsReport:
        n = self._node
        counters: dict[str, int | float] = {**n.counters, **n.flat_model_counters()}
        for key, value in asdict(n.sampler.stats).items():
            counters[f"peer_sampling.{key}"] = value
        # the strategy's numbers (its name and texts stay in ``status``)
        for key, value in n.strategy_status().items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                counters[f"strategy.{key}"] = value
        for key, value in offence_counts(n).items():
            counters[f"offences.{key}"] = value
        counters["round"] = n.progress.round
        counters["steps"] = n.progress.steps
        wire = getattr(n.transport, "bytes_sent", None)  # a TCP transport counts; a test one may not
        if isinstance(wire, ByteCount):
            counters["transport.bytes_sent"] = wire.total
        counters.update(relay_counters(n.relay_status(), n.transport))
        if n.progress.test_loss is not None:
            counters["test_loss"] = n.progress.test_loss
        for key, value in n.progress.metrics.items():  # accuracy, or the user's metrics
            counters[f"task.{key}"] = value
        spent = n.privacy_spent()
        if spent is not None:
            for key, attr in PRIVACY_COUNTERS.items():
                counters[key] = getattr(spent, attr)
            if spent.budget is not None:
                counters["privacy.epsilon_budget"] = spent.budget
            counters["privacy.budget_spent"] = int(spent.budget_spent)
        return MetricsReport(counters=counters,
                             timings={k: v.report() for k, v in n.timings.items()})

    async def checkpoint(self) -> CheckpointReport:
        n = self._node
        t0 = time.perf_counter()
        size = await n.save_checkpoint()
        return CheckpointReport(path=str(n.store.path), bytes=size, round=n.progress.round,
                                seconds=time.perf_counter() - t0)

    def stop(self) -> StopReport:
        self._node.request_stop()
        return StopReport(stopping=True)
