"""The node runtime: one trio nursery running every part of a daemon.

Tasks: the listener, peer sampling, the trainer (:mod:`~p2p.runtime.trainer_loop`),
the gossip sender, the admin server, the checkpointer (:mod:`~p2p.runtime.checkpointing`),
the signal watcher, and the tasks of parts in modules of their own: relays
(:mod:`~p2p.runtime.relay`), reachability and hole punching
(:mod:`~p2p.runtime.connectivity`), the collaboration watcher, automatic grouping
(:mod:`~p2p.runtime.grouping.host`) and the strategy (:mod:`~p2p.runtime.strategy_host`).
Requests are answered by :mod:`~p2p.runtime.serving` and the parts that register
handlers; the peers gossip talks to are the :class:`~p2p.runtime.peer_book.PeerBook`.
The node builds and wires them. Ownership: the torch network changes only in the
trainer task (and its worker) under ``model_lock``, which checkpoints take to read
it; push-sum cores live on the event loop, so no merge lands mid-step.
See docs/design/architecture.md.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import torch
import trio

from gossip import ModelSync, PushSum
from learner.dp.accounting import PrivacySpent
from learner.layout import ModelLayout
from learner.spec import PartialModelSpec
from p2p.config import ConfigError, NodeConfig, load_swarm_key
from p2p.files import content_digest
from p2p.metrics import MetricsEndpoint
from p2p.runtime.admin_commands import NodeAdmin
from p2p.runtime.admin_server import serve_admin
from p2p.runtime.assembly import AnyLearning, Overrides, build_learning
from p2p.runtime.checkpoint import (
    CheckpointError,
    CheckpointStore,
    GroupsRecord,
    check_data_dir_writable,
)
from p2p.runtime.checkpointing import NodeCheckpoints
from p2p.runtime.collaboration import CollaborationStatus
from p2p.runtime.collaboration_watch import CollaborationWatch
from p2p.runtime.connectivity import NodeConnectivity, ReachabilityStatus
from p2p.runtime.connectivity.dialback import DialBackRequest
from p2p.runtime.connectivity.puncher import NodePunch
from p2p.runtime.datadir_lock import DataDirLock
from p2p.runtime.entropy import Entropy, generator_for, random_for, seed_for
from p2p.runtime.finite_guard import FiniteGuard
from p2p.runtime.grouping.agreement import FindGroups, JoinGroup
from p2p.runtime.grouping.driver import NodeGrouping
from p2p.runtime.grouping.host import NodeGroupingHost
from p2p.runtime.grouping.status import GroupsStatus
from p2p.runtime.masking.driver import NodeMasking
from p2p.runtime.masking.host import NodeMaskingHost
from p2p.runtime.merge_recovery import NodeRecovery
from p2p.runtime.node_parts import gossip_driver, new_core
from p2p.runtime.node_transport import NodeTransport, node_frame_limit, tcp_transport
from p2p.runtime.peer_book import PeerBook
from p2p.runtime.progress import Progress
from p2p.runtime.protocol import register_node_messages
from p2p.runtime.relay.host import NodeRelay
from p2p.runtime.serving import NodeServing
from p2p.runtime.signed_sampling import signed_sampler
from p2p.runtime.state import COUNTER_SEP
from p2p.runtime.strategy_host import StrategySupervisor
from p2p.runtime.timing import TimingStats
from p2p.runtime.train_runner import ThreadRunner, TrainRunner
from p2p.runtime.trainer_loop import TrainerLoop
from p2p.runtime.training_record import node_data_path, training_record
from p2p.runtime.transport_adapters import ShuffleOverTransport
from p2p.strategies import Strategy
from p2p.wire.codec import Message
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.transport import Transport
from peersampling import Descriptor, PeerSampler, run_peer_sampling

logger = logging.getLogger(__name__)

MIN_SHUFFLE_TIMEOUT = 1.0  # seconds; see Node.shuffle_timeout
STOP_ROUND_WAIT = 30.0  # seconds a stop request waits for the trainer's current round

ADMIN_SOCKET = "admin.sock"


class Node:
    """A gossip learning daemon; run it with ``await node.run()`` (or :meth:`run_blocking`).

    ``transport`` may be injected (tests use an in-memory network); by default
    a TCP :class:`Transport` is built from the configuration. ``learning``: the
    network, data and trainer already built (:func:`~p2p.runtime.assembly.build_learning`),
    else built here from ``config`` and ``overrides`` (the Python API's model, data
    and hooks) before anything is created on disk: a bad factory, dataset or device
    fails with a ConfigError and leaves no identity, lock or checkpoint behind.
    ``entropy``: where its random choices come from (a simulation's seeded streams);
    None, as every daemon: the operating system (:mod:`p2p.runtime.entropy`).
    """

    def __init__(self, config: NodeConfig, *, transport: NodeTransport | None = None,
                 swarm_key: bytes | None = None, fresh: bool = False,
                 find_groups: FindGroups | None = None,
                 join_group: JoinGroup | None = None,
                 train_runner: TrainRunner | None = None,
                 standalone: bool = True, in_process_peers: bool = False,
                 learning: AnyLearning | None = None,
                 overrides: Overrides | None = None,
                 entropy: Entropy | None = None) -> None:
        if config.node.data_dir is None:
            raise ConfigError("node.data_dir: required (set it in the file or pass --data-dir)")
        self.config = config
        # the data directory's lock when the Python API took it (p2p.api.build_node):
        # released when run() returns
        self.lock: DataDirLock | None = None
        self.entropy = entropy
        self._build_models(learning, overrides)
        self.data_dir = check_data_dir_writable(config.node.data_dir)
        self.identity = Identity.load_or_create(self.data_dir)
        self.progress = Progress()
        self.started = time.time()
        # where SGD rounds, evaluations and checkpoint writes run (a simulation runs them inline)
        self.runner: TrainRunner = train_runner or ThreadRunner()
        # False inside a simulation host: no admin socket, no signal handlers
        self.standalone = standalone
        # True only in a simulation host, where every peer is a node of this process:
        # peer sampling trusts the fields of received descriptors (signatures still checked)
        self.in_process_peers = in_process_peers
        if swarm_key is None and config.security.swarm_key_file is not None:
            swarm_key = load_swarm_key(config.security.swarm_key_file)
        self.swarm_key = swarm_key
        torch.set_num_threads(1)  # many daemons share a machine's cores
        # The node composes the wire: every subsystem's messages and request handlers.
        register_node_messages()
        self.serving = NodeServing(self)  # its dispatcher; answers pushes and shuffles
        self.requests = self.serving.requests
        self.by_fingerprint = {fp: name for name, fp in self.learning.fingerprints.items()}
        # do known peers hold our models, do exchanges get through; how shuffles went
        self.collaboration_watch = CollaborationWatch(self)
        # automatic semi-local groups (clustering.mode "auto"; registers its GroupsPull
        # handler); find/join: tests inject theirs
        self.grouping_host = NodeGroupingHost(self, find=find_groups, join=join_group)
        self.transport: NodeTransport = transport or tcp_transport(
            config, self.identity, tags=self._model_tags(),  # the relay's tag once it serves: retag
            swarm_key=swarm_key, max_frame_size=node_frame_limit(config, self.learning.layout))
        if transport is None and isinstance(self.transport, Transport):
            # A taken port stops the node here, before it resumes or logs as if started.
            self.transport.bind()
        # relays, reachability, hole punching (docs/guide/deployment.md)
        self.relay = NodeRelay(self.transport, self.requests, config.relay, self.identity.node_id,
                               on_change=self._relays_changed)
        self.connectivity = NodeConnectivity(self.transport, advertise=config.node.advertise,
                                             bootstrap=config.node.bootstrap, relay=self.relay,
                                             seed=seed_for(entropy, "connectivity"))
        self.connectivity.on_tags = self.retag
        self.requests.add(DialBackRequest, self.connectivity.serve_dial_back)
        self.punch = NodePunch.for_node(self.transport, self.connectivity, self.requests,
                                        enabled=config.relay.hole_punch)
        # [metrics]: Prometheus endpoint (bound now, like the listener; none by default)
        self.metrics_endpoint = MetricsEndpoint(self, config.metrics.listen)
        # sampled holders and their addresses; its sampler is created once the
        # listener is bound (port 0 picks the port then)
        self.peers = PeerBook(config.peer_sampling.period)
        self.restored_view: list[Descriptor] = []
        self.store = CheckpointStore(self.data_dir)
        self.checkpoints = NodeCheckpoints(self, self.store)  # resume, periodic and final writes
        self.counters: dict[str, int] = {"rejected_messages": 0, "checkpoints": 0,
                                         "nonfinite_rounds": 0}
        self.timings = {k: TimingStats() for k in ("train_round", "push", "checkpoint")}
        # push-sum counters carried over from a checkpoint, per model
        self.counter_base: dict[str, dict[str, int]] = {}
        # what decides the layout and the data: saved with every checkpoint
        data_path = node_data_path(config)
        self.trained_with = training_record(
            config, None if data_path is None else content_digest(data_path),
            self.learning.fingerprints)
        # the checkpoint's round, when resumed; a fallback or a file moved aside at start
        self.resumed_at, self.checkpoint_note = self.checkpoints.resume(fresh)
        self.sync = ModelSync(self.learning.network, self.cores)
        # non-finite rounds are skipped, their state restored (stops after 3 in a row)
        self.finite = FiniteGuard(self.learning.network, self.learning.trainer.optimizer)
        # masking epochs (privacy "masked": pairs agreed with holders); registers the
        # PairOffer handler
        self.masking_host = NodeMaskingHost(self)
        self.gossip = gossip_driver(config.gossip, self.cores, self.transport, self.peers,
                                    on_outcome=self.collaboration_watch.pushed,
                                    push_durations=self.timings["push"],
                                    epochs=self.masking_host.masking,
                                    rng=random_for(entropy, "partner-choice"))
        self._stop = trio.Event()
        self.trainer = TrainerLoop(self, self._stop)  # SGD rounds, their sync and evaluations
        self._closing = False  # set at shutdown: no merges after the final snapshot
        self._model_lock = trio.Lock()  # the trainer's round vs a checkpoint's read
        self._gossip_scope = trio.CancelScope()
        self.admin = NodeAdmin(self)
        # The collaboration strategy ([strategy]; p2p/strategies): built last, it sees the
        # whole node through NodeStrategyHost. Its auxiliary push-sum cores (gossiped
        # vectors) are not models: kept apart from ``cores`` and not checkpointed.
        self.gossiped: dict[str, PushSum] = {}
        self.strategy_supervisor = StrategySupervisor(self)
        self.strategy_supervisor.install()  # the node holds it first: node.strategy works inside
        # merges that make the held-out loss jump are rolled back (gossip.recovery)
        g = config.gossip
        self.recovery = (NodeRecovery(self) if g.recovery and g.guard is not None else None)

    # ------------------------------------------------------------------ state

    def _build_models(self, learning: AnyLearning | None, overrides: Overrides | None) -> None:
        """Fresh network, trainer and push-sum cores from the configuration."""
        self.learning: AnyLearning = learning or build_learning(
            self.config, overrides, noise_seed=seed_for(self.entropy, "dp-noise"))
        self.cores: dict[str, PushSum] = {
            name: self._new_core(name, fp) for name, fp in self.learning.fingerprints.items()}

    def _new_core(self, name: str, fingerprint: bytes) -> PushSum:
        return new_core(self.config.gossip, fingerprint, self.learning.network.extract(name),
                        rng=generator_for(self.entropy, f"push-sum:{name}"))

    # ------------------------------------------------------------------ groups
    # Automatic grouping lives in grouping_host; these read it for the admin commands
    # (AdminSource) and the checkpoint (StatefulNode).

    @property
    def grouping(self) -> NodeGrouping | None:
        """The automatic grouping (None with ``clustering.mode = "off"``)."""
        return self.grouping_host.grouping

    def groups_status(self) -> GroupsStatus:
        """Where automatic grouping stands (``p2p groups``, ``p2p status``)."""
        return self.grouping_host.status()

    def groups_record(self) -> GroupsRecord | None:
        """The applied groups, for the checkpoint (None before, or without grouping)."""
        return self.grouping_host.record()

    def restore_groups(self, groups: GroupsRecord) -> None:
        """Resume a checkpoint's groups (before the node runs)."""
        self.grouping_host.restore(groups)

    # ------------------------------------------------------------------ plug-ins
    # Masking (masking_host), the strategy (strategy_host) and the collaboration
    # watcher (collaboration_watch) live in modules of their own; these read them for
    # the admin commands (AdminSource), scripts and tests.

    @property
    def masking(self) -> NodeMasking | None:
        """The masking epochs (None unless ``gossip.privacy = "masked"``)."""
        return self.masking_host.masking

    def masking_status(self) -> dict[str, dict[str, object]] | None:
        """Model name -> its masking epochs' state (None unless privacy is masked)."""
        return self.masking_host.status()

    @property
    def strategy(self) -> Strategy:
        """The collaboration strategy ``[strategy]`` names."""
        return self.strategy_supervisor.strategy

    def strategy_status(self) -> dict[str, Any]:
        """What the strategy reports (``p2p status``, ``p2p metrics``, the swarm's JSON)."""
        return self.strategy_supervisor.status()

    def reachability(self) -> ReachabilityStatus:
        """Whether peers can dial this node, why, and the addresses peers confirmed."""
        return self.connectivity.status()

    def relay_status(self) -> dict[str, Any]:
        """``p2p status``'s ``relay``: relaying, reservations held, hole punches."""
        return {**self.relay.status(), **({} if self.punch is None else {
            "hole_punch": self.punch.status()})}

    def collaboration(self) -> CollaborationStatus:
        """Whether this node exchanges its models with the peers it knows, and if not why."""
        return self.collaboration_watch.status()

    def training_note(self) -> str | None:
        """The ``training`` status line when training waits for peers or stopped on
        non-finite values (None otherwise)."""
        if self.finite.stopped is not None:
            return f"stopped ({self.finite.stopped}); still serving peers"
        return self.collaboration_watch.waiting

    # ------------------------------------------------------------------ layout

    def declare_model(self, spec: PartialModelSpec) -> str:
        """Add shared model ``spec`` to the layout, network, cores and tags (caller holds
        the model lock, or the node is not running yet). The other models' vectors and
        fingerprints do not change (asserted)."""
        old = self.learning.layout
        assert isinstance(old, ModelLayout), "automatic groups need a notation network"
        layout = ModelLayout(old.network, [*(old.spec(n) for n in old.declared_models), spec],
                             cross_models=old.cross_models_enabled)
        for name in old.shared_models:
            if layout.fingerprint(name) != old.fingerprint(name):
                raise AssertionError(f"adding {spec.name!r} changed model {name!r}")
        self.learning.network.relayout(layout)
        added = [n for n in layout.shared_models if n not in old.shared_models]
        fingerprints = {name: layout.fingerprint(name) for name in layout.shared_models}
        self.learning = dataclasses.replace(self.learning, layout=layout,
                                            fingerprints=fingerprints)
        for name in added:
            self.cores[name] = self._new_core(name, fingerprints[name])
            self.by_fingerprint[fingerprints[name]] = name
        self.retag()
        return spec.name

    async def add_semi_local(self, spec: PartialModelSpec, start: str) -> None:
        """Add an automatic semi-local model while running, between rounds.

        ``start``: "average" keeps this node's pre-trained values of those
        neurons (push-sum averages them with the other members'); "reinit"
        starts from the model's shared initialisation (the same on every member).
        """
        async with self._model_lock:
            self.sync.sync()  # fold the last round and merges in before the layout changes
            name = self.declare_model(spec)
            if start == "reinit":
                self.learning.network.assign(name, self.learning.network.initial_values(name))
                self.cores[name].set_values(self.learning.network.extract(name))
            self.sync = ModelSync(self.learning.network, self.cores)
            self.gossip.add_core(name, self.cores[name])
        try:
            await self.save_checkpoint()
        except CheckpointError as exc:
            logger.error("checkpoint after grouping failed: %s", exc)

    def rounds_done(self) -> int:
        """Training rounds done so far (counting a resumed checkpoint's)."""
        return self.progress.round

    @property
    def model_lock(self) -> trio.Lock:
        """Held while the trainer trains or the network is read or written."""
        return self._model_lock

    def _model_tags(self) -> frozenset[bytes]:
        """Its models' fingerprints; sharing none, its strategy's and network's tag (only
        peers able to work with it count towards ``training.min_peers``)."""
        return frozenset(self.by_fingerprint) | self.collaboration_watch.interest()

    def advertised_tags(self) -> frozenset[bytes]:
        """HELLO tags, own descriptor: :meth:`_model_tags` and the relay tag if it relays."""
        return self._model_tags() | self.relay.tags()

    def _relays_changed(self) -> None:
        self.connectivity.refresh()

    def retag(self) -> None:
        """Advertise :meth:`advertised_tags` again after they changed."""
        tags = self.advertised_tags()
        if isinstance(self.transport, Transport):
            self.transport.tags = tags
        if self.peers.started is not None:
            self.peers.started.set_tags(tags)

    async def save_checkpoint(self) -> int:
        """Write the node state atomically; returns the bytes written."""
        return await self.checkpoints.save()

    def model_counters(self, name: str) -> dict[str, int]:
        """Push-sum counters of model ``name`` since the data directory was created."""
        base = self.counter_base.get(name, {})
        counters = asdict(self.cores[name].counters)
        # sends that got no answer: what `p2p peers` counts per peer as failures
        counters["undelivered"] = self.gossip.undelivered.get(name, 0)
        # exchange waves made after rounds: how often "auto" chose to mix
        counters["waves"] = self.gossip.waves.get(name, 0)
        return {k: v + base.get(k, 0) for k, v in counters.items()}

    def model_counter(self, name: str, key: str) -> int:
        """One push-sum counter of :meth:`model_counters` (``key``: a field of the core's
        counters), without copying the others."""
        return getattr(self.cores[name].counters, key) + self.counter_base.get(name, {}).get(key, 0)

    def flat_model_counters(self) -> dict[str, int]:
        """Every model's push-sum counters as ``"<model>.<counter>"`` (for metrics and checkpoints)."""
        return {f"{name}{COUNTER_SEP}{key}": value
                for name in self.cores for key, value in self.model_counters(name).items()}

    @property
    def sampler(self) -> PeerSampler:
        """The peer sampler; it starts when the node listens (its descriptor needs the address)."""
        return self.peers.sampler

    @property
    def started_sampler(self) -> PeerSampler | None:
        """The peer sampler, or None before the node listens (checkpoints then keep the view)."""
        return self.peers.started

    @property
    def closing(self) -> bool:
        """True once the node shuts down: no merge may land after its final snapshot."""
        return self._closing

    def request_stop(self) -> None:
        self._stop.set()

    def privacy_spent(self) -> PrivacySpent | None:
        """Epsilon spent by DP-SGD so far and its settings (None without ``"dp"``)."""
        return self.learning.trainer.privacy_spent()

    # ------------------------------------------------------------------ run

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until stopped (admin ``stop``, a signal, or cancellation)."""
        async with trio.open_nursery() as nursery:
            bound = await nursery.start(self.transport.serve, self.handle_request)
            self._start_sampler(self.connectivity.start(bound))
            nursery.start_soon(self.connectivity.run)
            nursery.start_soon(self.relay.run)
            if self.punch is not None:
                nursery.start_soon(self.punch.run)
            await nursery.start(self.metrics_endpoint.serve)
            if self.standalone:
                await nursery.start(serve_admin, self.data_dir / ADMIN_SOCKET, self.admin)
                nursery.start_soon(self._watch_signals)
            nursery.start_soon(self._peer_sampling)
            nursery.start_soon(self._gossip_in_scope)
            nursery.start_soon(self.checkpoints.run)
            nursery.start_soon(self.collaboration_watch.run)
            nursery.start_soon(self.grouping_host.run)
            nursery.start_soon(self.strategy_supervisor.run)
            trainer_done = trio.Event()
            nursery.start_soon(self.trainer.run, trainer_done)
            logger.info("node %s listening on %s", self.identity.node_id[:6].hex(),
                        self.transport.listen_address)
            task_status.started(self.transport.listen_address)
            await self._stop.wait()
            logger.info("stopping: finishing the current round")
            # No merge or ack may change the push-sum state after the final
            # snapshot: stop gossiping and refuse pushes first.
            self._closing = True
            self._gossip_scope.cancel()
            # The trainer finishes its current round (worker threads are not
            # abandoned), then everything else is cancelled.
            with trio.move_on_after(STOP_ROUND_WAIT) as waited:
                await trainer_done.wait()
            if waited.cancelled_caught:
                logger.warning("the current round did not finish within %g s of the stop "
                               "request; checkpointing once it does", STOP_ROUND_WAIT)
            await self.checkpoints.save_or_log("final checkpoint failed")
            nursery.cancel_scope.cancel()
        await self.transport.aclose()
        if self.lock is not None:
            self.lock.release()
        logger.info("stopped")

    def run_blocking(self) -> None:
        """Run until stopped, outside trio (``trio.run(node.run)``)."""
        trio.run(self.run)

    def _start_sampler(self, address: str) -> None:
        ps = self.config.peer_sampling
        # Signed self-descriptor, the Sybil-resistant rules and rate-limited
        # lines (docs/design/peer-sampling.md), as every process of a swarm runs them.
        sampler = signed_sampler(
            self.identity, address, self.advertised_tags(),
            rng=random_for(self.entropy, "peer-sampling"),
            c=ps.view_size, l=ps.shuffle_length, in_process=self.in_process_peers,
        )
        self.peers.start(sampler)
        self.connectivity.attach(sampler)
        self.relay.attach(sampler)
        sampler.restore(self.restored_view)
        sampler.bootstrap([str(b) for b in self.config.node.bootstrap])  # [v6]:port too

    async def _watch_signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                logger.info("received %s", signal.Signals(signum).name)
                self.request_stop()

    async def _peer_sampling(self) -> None:
        shuffles = ShuffleOverTransport(self.transport, self.collaboration_watch.contacts)
        await run_peer_sampling(self.sampler, shuffles,
                                period=self.config.peer_sampling.period,
                                timeout=self.shuffle_timeout,
                                rng=random_for(self.entropy, "shuffle-backoff"))

    @property
    def shuffle_timeout(self) -> float:
        """Seconds one shuffle may take: a period, but never less than a floor.

        A short period (tests and swarms use 0.05 s) must not make a shuffle
        over a real socket on a loaded machine fail for being slow.
        """
        return max(self.config.peer_sampling.period, MIN_SHUFFLE_TIMEOUT)

    # ------------------------------------------------------------------ gossip

    @property
    def peer_failures(self) -> Mapping[bytes, int]:
        """Node id -> pushes to that peer unanswered since its last ack (admin ``peers``)."""
        return self.gossip.peer_failures

    async def _gossip_in_scope(self) -> None:
        # Cancelled at shutdown before the final snapshot, so no ack lands after it.
        with self._gossip_scope:
            await self.gossip.run()

    # ------------------------------------------------------------------ serving

    async def handle_request(self, peer: PeerInfo, msg: Message) -> Message:
        """Answer one request from a connected, authenticated peer (routed by its type)."""
        return await self.requests(peer, msg)


def run_node(config: NodeConfig, *, fresh: bool = False, learning: AnyLearning | None = None
             ) -> int:
    """Run a daemon until stopped; the process exit status. ``fresh``: move an
    existing checkpoint aside and start over (``p2p run --fresh``); ``learning``:
    the network, data and trainer already built."""
    node = Node(config, fresh=fresh, learning=learning)
    trio.run(node.run)
    return 0


__all__ = ["ADMIN_SOCKET", "Node", "Progress", "run_node"]
