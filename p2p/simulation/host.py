"""Hosting N real nodes in one trio run: start, churn, watch, report.

:class:`Simulation` builds every node of a :class:`~p2p.swarm.SwarmSpec` as a
daemon of a local swarm would be configured (:func:`p2p.swarm.node_config`),
but over a :class:`~p2p.simulation.network.SimNetwork` and with an injected
:class:`~p2p.runtime.train_runner.TrainRunner`; no admin socket, no signal
handler. Run it under a virtual clock (:func:`p2p.testing.clock.virtual_clock`):
everything in it then costs simulated time only. Churn events
(:mod:`p2p.simulation.churn`) crash, stop, start and restart nodes while it
runs; a crashed node restarted on its data directory resumes its checkpoint.
A run repeats for one seed: each node life draws from its own streams of the
seed (:class:`~p2p.runtime.entropy.Entropy`) and trio's scheduler is seeded
(:mod:`p2p.simulation.scheduling`); docs/guide/simulation.md, "Reproducible runs".
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from p2p.config import NodeConfig
from p2p.runtime.entropy import Entropy
from p2p.runtime.node import Node
from p2p.runtime.node_transport import node_admission, node_frame_limit
from p2p.runtime.train_runner import TrainRunner
from p2p.simulation.churn import ChurnEvent
from p2p.simulation.network import SimNetwork, SimTransport
from p2p.simulation.scheduling import seeded_scheduler
from p2p.swarm import SwarmSpec, node_config
from p2p.testing.nodes import memory_addresses
from p2p.wire.identity import IDENTITY_FILE, Identity

__all__ = ["NodeSlot", "SimProgress", "Simulation"]

logger = logging.getLogger(__name__)

NODE_STATES = ("absent", "up", "crashed", "left")
# nodes 1..8 bootstrap from node 0; the others from a random earlier node, so that no
# node takes more first connections than its handshake slots (16 by default) allow
BOOTSTRAP_FANIN = 8
# the window of Simulation.steady_cost, as fractions of all rounds done: after the start-up,
# before the last nodes finish
STEADY_FROM = 1 / 3
STEADY_TO = 0.9


@dataclass
class ViewStats:
    """Sizes of a node's peer-sampling view, sampled over simulated time."""

    samples: int = 0
    total: int = 0
    smallest: int | None = None
    largest: int = 0

    def add(self, size: int) -> None:
        self.samples += 1
        self.total += size
        self.smallest = size if self.smallest is None else min(self.smallest, size)
        self.largest = max(self.largest, size)

    def as_dict(self) -> dict[str, float | int | None]:
        return {"mean": self.total / self.samples if self.samples else None,
                "min": self.smallest, "max": self.largest, "samples": self.samples}


@dataclass
class NodeSlot:
    """One simulated node across its lives (a restart builds a new :class:`Node`)."""

    index: int
    address: str
    data_dir: Path
    node: Node | None = None
    transport: SimTransport | None = None  # the live node's
    scope: trio.CancelScope | None = None
    state: str = "absent"
    crashes: int = 0
    restarts: int = 0
    lives: int = 0  # nodes built in this slot so far
    wire_bytes_before: int = 0  # written by the node's earlier lives
    view: ViewStats = field(default_factory=ViewStats)
    # (simulated seconds, round, accuracy) at each evaluation seen
    history: list[tuple[float, int, float]] = field(default_factory=list)
    _last_eval: tuple[float, int, float] | None = None

    def wire_bytes(self) -> int:
        live = 0 if self.transport is None else self.transport.bytes_sent.total
        return self.wire_bytes_before + live


@dataclass(frozen=True)
class SimProgress:
    """What a progress display shows: rounds done of all expected, and a summary."""

    rounds_done: int
    rounds_total: int
    simulated_seconds: float
    mean_accuracy: float | None
    live: int


def _shared_counters(node: Node) -> dict[str, int]:
    layout = node.learning.layout
    totals = dict.fromkeys(("pushes_sent", "pushes_received", "rejected", "bytes_sent",
                            "bytes_received"), 0)
    for name in layout.shared_models:
        counters = node.model_counters(name)
        for key in totals:
            totals[key] += counters.get(key, 0)
    return totals


def _pushes_and_bytes_sent(node: Node) -> tuple[int, int]:
    """``pushes_sent`` and ``bytes_sent`` of :func:`_shared_counters`, read without copying
    every counter of every model (this runs for every node at every sample)."""
    shared = node.learning.layout.shared_models
    return (sum(node.model_counter(name, "pushes_sent") for name in shared),
            sum(node.model_counter(name, "bytes_sent") for name in shared))


#: Simulated seconds between looks for the first finished round (churn timed
#: from training waits for it).
TRAINING_POLL = 0.01


class Simulation:
    """N nodes of ``spec`` over ``network``, their data directories under ``root``.

    ``runner_for(index)`` gives node ``index`` its train runner (for example
    an :class:`~p2p.runtime.train_runner.InlineRunner`). ``churn`` events
    happen at their simulated times; nodes that ``join`` are absent until then.
    ``sample_every`` simulated seconds, view sizes, evaluations and a time
    series point are recorded and ``on_sample`` is called. ``configure`` may
    adjust each node's config (a generated task's size, say) after the swarm's.
    ``in_process_peers`` (default) gives every node's peer sampler the core's
    ``in_process`` option: received descriptors come from another node of
    this process, so their fields are not validated again (signatures are);
    False checks them all, as a daemon does. ``on_started`` is called once every
    node present from the start is up (``scripts/simulate.py`` freezes the garbage
    collector's view of what they built then).
    """

    def __init__(self, spec: SwarmSpec, root: Path, network: SimNetwork, *,
                 runner_for: Callable[[int], TrainRunner],
                 churn: Sequence[ChurnEvent] = (), sample_every: float = 1.0,
                 max_seconds: float | None = None,
                 on_sample: Callable[[SimProgress], None] | None = None,
                 configure: Callable[[NodeConfig], NodeConfig] | None = None,
                 in_process_peers: bool = True,
                 on_started: Callable[[], None] | None = None) -> None:
        if not sample_every > 0:
            raise ValueError(f"sample_every must be > 0 seconds, got {sample_every!r}")
        self.spec = spec
        self.network = network
        self.runner_for = runner_for
        self.churn = sorted(churn)
        self.sample_every = sample_every
        self.max_seconds = max_seconds
        self.on_sample = on_sample
        self.configure = configure
        self.in_process_peers = in_process_peers
        self.on_started = on_started
        addresses = memory_addresses(spec.nodes, subnet="10.1")
        self.slots = [NodeSlot(i, addresses[i], root / f"node{i}") for i in range(spec.nodes)]
        self.series: list[dict[str, Any]] = []
        self.events_done: list[dict[str, Any]] = []
        self.timed_out = False
        self._nursery: trio.Nursery | None = None
        self._pending_events = len(self.churn)
        self._started_at = 0.0  # trio time the run started (churn times count from it)
        self._cpu_at_start = 0.0  # process CPU seconds then (the series' cpu_seconds count from it)

    # ------------------------------------------------------------------ nodes

    def _build(self, slot: NodeSlot) -> tuple[Node, SimTransport]:
        slot.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        bootstrap = [self.slots[self.bootstrap_of(slot.index)].address] if slot.index else []
        config = node_config(self.spec, slot.index, slot.data_dir, None).with_overrides(
            listen=slot.address, bootstrap=bootstrap)
        if self.configure is not None:
            config = self.configure(config)
        # the transport's limits as a daemon sets them from its config (p2p.runtime.node)
        limits = config.limits
        transport = self.network.transport(
            self.identity(slot), slot.address,
            max_connections=limits.max_connections, connect_timeout=limits.connect_timeout,
            read_timeout=limits.read_timeout, max_frame_size=node_frame_limit(config),
            max_messages_per_second=limits.max_messages_per_second,
            admission=node_admission(config, simulated=True), cipher=config.security.cipher)
        node = Node(config, transport=transport, train_runner=self.runner_for(slot.index),
                    standalone=False, in_process_peers=self.in_process_peers,
                    entropy=self.entropy(slot))
        transport.tags = node.advertised_tags()  # known once the models are built
        return node, transport

    def entropy(self, slot: NodeSlot) -> Entropy:
        """The random streams of node ``slot``'s current life: the swarm's seed, its index
        and life (a restarted node draws new push ids, as a daemon would)."""
        return Entropy(self.spec.seed, "node", slot.index, "life", slot.lives)

    def bootstrap_of(self, index: int) -> int:
        """The node ``index`` first contacts: node 0, as in a local swarm, for the first
        ``BOOTSTRAP_FANIN`` nodes; then a seeded random earlier node, so that no node has to
        accept the whole swarm's first connections at once (its session slots are bounded)."""
        if index <= BOOTSTRAP_FANIN:
            return 0
        return random.Random(f"{self.spec.seed}|bootstrap|{index}").randrange(index)

    async def _run_node(self, slot: NodeSlot,
                        task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        node = slot.node
        assert node is not None
        with trio.CancelScope() as scope:
            slot.scope = scope
            await node.run(task_status=task_status)
            if slot.state == "up":  # stopped on its own (never in a simulation so far)
                slot.state = "left"

    async def start(self, slot: NodeSlot) -> None:
        """Build node ``slot`` (resuming its checkpoint if any) and let it listen."""
        if self._nursery is None:
            raise RuntimeError("the simulation is not running")
        if slot.state == "up":
            raise RuntimeError(f"node {slot.index} is already up")
        slot.wire_bytes_before = slot.wire_bytes()
        slot.lives += 1
        slot.node, slot.transport = self._build(slot)
        slot.state = "up"
        await self._nursery.start(self._run_node, slot)

    def crash(self, slot: NodeSlot) -> None:
        """Kill node ``slot`` at once: no final checkpoint, connections cut."""
        if slot.state != "up" or slot.scope is None:
            return
        slot.state = "crashed"
        slot.crashes += 1
        slot.scope.cancel()

    def leave(self, slot: NodeSlot) -> None:
        """Stop node ``slot`` cleanly (its final checkpoint is written)."""
        if slot.state != "up" or slot.node is None:
            return
        slot.state = "left"
        slot.node.request_stop()

    def identity(self, slot: NodeSlot) -> Identity:
        """Node ``slot``'s identity: drawn from the swarm's seed, so that a run repeats
        (its key is saved in the data directory, where a restart finds it)."""
        path = slot.data_dir / IDENTITY_FILE
        if not path.exists():
            seed = hashlib.sha256(f"{self.spec.seed}|identity|{slot.index}".encode()).digest()
            slot.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            Identity.from_seed(seed).save(path)
        return Identity.load_or_create(slot.data_dir)

    async def apply(self, event: ChurnEvent) -> None:
        slot = self.slots[event.node]
        before = slot.state
        rounds = slot.node.progress.round if slot.node is not None else 0
        if event.action == "crash":
            self.crash(slot)
        elif event.action == "leave":
            self.leave(slot)
        elif slot.state != "up":  # join or restart
            if event.action == "restart" and slot.node is not None:
                slot.restarts += 1
            await self.start(slot)
        logger.info("t=%.2f: %s node %d (%s -> %s)", trio.current_time(), event.action,
                    event.node, before, slot.state)
        self.events_done.append({"time": trio.current_time(), "node": event.node,
                                 "action": event.action, "before": before,
                                 "after": slot.state, "round": rounds})

    # ------------------------------------------------------------------ run

    def finished(self) -> bool:
        """Every node that is up has finished its rounds and no churn event is pending."""
        if self._pending_events:
            return False
        up = [s for s in self.slots if s.state == "up"]
        return all(s.node is not None and s.node.progress.finished for s in up)

    async def run(self) -> None:
        """Start the nodes (those that ``join`` later excepted), run until done, stop all."""
        with seeded_scheduler(self.spec.seed):
            await self._run()

    async def _run(self) -> None:
        joining = {e.node for e in self.churn if e.action == "join"}
        self._started_at = trio.current_time()
        self._cpu_at_start = time.process_time()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            # All start at the same instant: their rounds then fall on the same instants
            # too (fixed compute and pause times), which a lock-step runner batches.
            for slot in self.slots:
                if slot.index not in joining:
                    await self.start(slot)
            if self.on_started is not None:
                self.on_started()
            nursery.start_soon(self._churn_loop)
            await self._watch()
            nursery.cancel_scope.cancel()  # the simulation ends: no final checkpoints needed
        self._nursery = None

    async def _churn_loop(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._apply_events, [e for e in self.churn if not e.from_training],
                               False)
            nursery.start_soon(self._apply_events, [e for e in self.churn if e.from_training],
                               True)

    async def _apply_events(self, events: list[ChurnEvent], from_training: bool) -> None:
        if not events:
            return
        base = self._started_at
        if from_training:
            base = await self._training_began()
        for event in events:
            await trio.sleep_until(base + event.time)
            await self.apply(event)
            self._pending_events -= 1

    async def _training_began(self) -> float:
        """The simulated time at which every node that is up had finished a round.

        Every node, not the first: a node that joins the overlay late may start
        its rounds seconds after the first one, and a crash before its first
        round is start-up churn, not churn while training."""
        def began() -> bool:
            up = [s for s in self.slots if s.state == "up"]
            return bool(up) and all(s.node is not None and s.node.progress.round >= 1
                                    for s in up)

        while not began():
            await trio.sleep(TRAINING_POLL)
        return trio.current_time()

    async def _watch(self) -> None:
        while True:
            self.sample()
            if self.finished():
                return
            if self.max_seconds is not None and trio.current_time() >= self.max_seconds:
                self.timed_out = True
                logger.warning("simulated time limit %.0f s reached before every node finished",
                               self.max_seconds)
                return
            await trio.sleep(self.sample_every)

    def sample(self) -> None:
        """Record view sizes, new evaluations and one time-series point."""
        now = trio.current_time()
        accs: list[float] = []
        rounds = views = pushes = sent = live = 0
        for slot in self.slots:
            node = slot.node
            if node is None:
                continue
            p = node.progress
            if p.history and p.history[-1] is not slot._last_eval:
                slot._last_eval = p.history[-1]
                slot.history.append((now, p.round, p.history[-1][2]))
            rounds += min(p.round, self.spec.rounds)
            if slot.state != "up":
                continue
            live += 1
            if p.accuracy is not None:
                accs.append(p.accuracy)
            sampler = node.started_sampler
            size = 0 if sampler is None else len(sampler.view())
            slot.view.add(size)
            views += size
            node_pushes, node_sent = _pushes_and_bytes_sent(node)
            pushes += node_pushes
            sent += node_sent
        point = {"time": now, "cpu_seconds": time.process_time() - self._cpu_at_start,
                 "rounds_done": rounds, "live": live, "mean_round": rounds / len(self.slots),
                 "mean_accuracy": sum(accs) / len(accs) if accs else None,
                 "worst_accuracy": min(accs) if accs else None,
                 "mean_view": views / live if live else None,
                 "pushes_sent": pushes, "bytes_sent": sent}
        self.series.append(point)
        if self.on_sample is not None:
            self.on_sample(SimProgress(rounds, self.spec.rounds * len(self.slots), now,
                                       point["mean_accuracy"], live))

    # ------------------------------------------------------------------ results

    def node_records(self) -> list[dict[str, Any]]:
        """One record per node: accuracy, bytes, pushes, view statistics, churn, history."""
        rows = []
        for slot in self.slots:
            node = slot.node
            row: dict[str, Any] = {"node": slot.index,
                                   "permutation": self.spec.permutation(slot.index) or "id",
                                   "state": slot.state, "crashes": slot.crashes,
                                   "restarts": slot.restarts}
            if node is None:
                row.update(accuracy=None, loss=None, round=0, steps=0)
                rows.append(row)
                continue
            p = node.progress
            counters = _shared_counters(node)
            row.update(
                accuracy=p.accuracy, loss=p.loss, round=p.round, steps=p.steps,
                resumed_at=node.resumed_at,
                pushes_sent=counters["pushes_sent"], pushes_received=counters["pushes_received"],
                pushes_rejected=counters["rejected"], bytes_sent=counters["bytes_sent"],
                bytes_received=counters["bytes_received"], wire_bytes_sent=slot.wire_bytes(),
                view=slot.view.as_dict(), history=slot.history,
                # this life's admission refusals, by rule (which nodes are hot)
                admission=dict(slot.transport.admission.refused) if slot.transport else {})
            rows.append(row)
        return rows

    def admission_counts(self) -> dict[str, int]:
        """Incoming connections refused or closed, by admission rule, summed over the live
        transports (``max_sessions``: a session refused because every slot was taken by an
        active one; ``session_displaced``: a silent session closed to make room...)."""
        totals: dict[str, int] = {}
        for slot in self.slots:
            if slot.transport is not None:
                for rule, count in slot.transport.admission.refused.items():
                    totals[rule] = totals.get(rule, 0) + count
        return dict(sorted(totals.items()))

    def summary(self, wall_seconds: float) -> dict[str, Any]:
        """Every figure of the run as plain data (top level as ``scripts/swarm.py``'s)."""
        rows = self.node_records()
        finished = [r for r in rows if r["state"] == "up"]
        accs = [r["accuracy"] for r in finished if r["accuracy"] is not None]
        sent = [r["bytes_sent"] for r in finished if "bytes_sent" in r]
        return {
            "nodes": rows,
            "mean_accuracy": sum(accs) / len(accs) if accs else None,
            "worst_accuracy": min(accs) if accs else None,
            "median_accuracy": sorted(accs)[len(accs) // 2] if accs else None,
            "mean_bytes_sent": sum(sent) / len(sent) if sent else None,
            "wall_seconds": wall_seconds,
            "simulated_seconds": self.series[-1]["time"] - self._started_at if self.series
            else 0.0,
            "timed_out": self.timed_out,
            "network": {"messages": self.network.messages, "bytes": self.network.bytes,
                        "messages_dropped": self.network.messages_dropped,
                        "connections": self.network.connections,
                        "reconnections": self.network.reconnections,
                        "admission": self.admission_counts(),
                        "admission_lines_not_logged": sum(
                            s.transport.refusals_not_logged for s in self.slots
                            if s.transport is not None)},
            "churn": self.events_done,
            "steady_state": self.steady_cost(),
            "series": self.series,
        }

    def steady_cost(self, start: float = STEADY_FROM, end: float = STEADY_TO
                    ) -> dict[str, float | int] | None:
        """CPU seconds per node-round once the run is under way: the process's CPU time
        between the first sample with at least ``start`` of all rounds done and the last
        with at most ``end``, over the rounds done between them. The start-up (building
        the nodes, the peer wait, the first contacts) is left out, so this is the marginal
        cost of a round, what a longer run adds per node-round. None if fewer than two
        samples fall between (a short run: sample more often with ``sample_every``)."""
        total = self.spec.rounds * len(self.slots)
        inside = [p for p in self.series if start * total <= p["rounds_done"] <= end * total]
        if len(inside) < 2 or inside[-1]["rounds_done"] == inside[0]["rounds_done"]:
            return None
        first, last = inside[0], inside[-1]
        node_rounds = last["rounds_done"] - first["rounds_done"]
        cpu = last["cpu_seconds"] - first["cpu_seconds"]
        return {"from_rounds_done": first["rounds_done"], "to_rounds_done": last["rounds_done"],
                "node_rounds": node_rounds, "cpu_seconds": cpu,
                "simulated_seconds": last["time"] - first["time"],
                "ms_per_node_round": 1000.0 * cpu / node_rounds}

