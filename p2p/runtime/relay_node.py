"""A relay-only node (``p2p run --relay-only``): bootstrap and relay, no model, no data.

It runs what serves other nodes and nothing of training: the transport, peer
sampling (its descriptor carries the relay tag and no model), reachability
(its own, and dial-backs for others), the relay (``relay.serve`` is on) and
the admin socket. Importing this module loads no torch and it reads no data:
it starts in a fraction of a second. See docs/guide/deployment.md#relays.
"""

from __future__ import annotations

import logging
import signal
import time
from dataclasses import replace
from typing import Any

import trio

from p2p.config import ConfigError, NodeConfig
from p2p.runtime.admin_commands import relay_counters
from p2p.runtime.admin_server import (
    CheckpointReport,
    MetricsReport,
    ModelsReport,
    PeerReport,
    PeersReport,
    StatusReport,
    StopReport,
    serve_admin,
)
from p2p.runtime.connectivity import NodeConnectivity
from p2p.runtime.connectivity.dialback import DialBackRequest
from p2p.runtime.data_dir import check_data_dir_writable
from p2p.runtime.entropy import Entropy, random_for, seed_for
from p2p.runtime.node_transport import tcp_transport
from p2p.runtime.protocol import register_node_messages
from p2p.runtime.relay.book import RELAY_TAG
from p2p.runtime.relay.host import NodeRelay
from p2p.runtime.signed_sampling import signed_sampler
from p2p.runtime.transport_adapters import ShuffleOverTransport
from p2p.wire.admission import MIN_FRAME_LIMIT
from p2p.wire.dispatch import RequestDispatcher
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.messages import ERROR_BAD_REQUEST, ERROR_REJECTED, Error
from p2p.wire.transport import Transport
from peersampling import PeerSampler, ShuffleReply, ShuffleRequest, run_peer_sampling

__all__ = ["RelayNode", "run_relay_node"]

logger = logging.getLogger(__name__)

ADMIN_SOCKET = "admin.sock"
TRAINING = "relay-only: relays circuits and serves peer sampling; holds no model and no data"


class RelayNode:
    """A node that only relays and serves peer sampling (see the module docstring)."""

    def __init__(self, config: NodeConfig, *, transport: Transport | None = None,
                 standalone: bool = True, entropy: Entropy | None = None) -> None:
        if config.node.data_dir is None:
            raise ConfigError("node.data_dir: required (set it in the file or pass --data-dir)")
        self.data_dir = check_data_dir_writable(config.node.data_dir)
        config = replace(config, relay=replace(config.relay, serve=True, use="never"))
        self.config = config
        self.identity = Identity.load_or_create(self.data_dir)
        self.started = time.time()
        # its random choices: the OS (None, as every daemon) or a test's seeded streams
        self.entropy = entropy
        register_node_messages()
        self.requests = RequestDispatcher(on_unknown=self._not_served)
        self.requests.add(ShuffleRequest, self._serve_shuffle)
        self.transport = transport or tcp_transport(
            config, self.identity, tags=frozenset({RELAY_TAG}), swarm_key=_swarm_key(config),
            max_frame_size=MIN_FRAME_LIMIT)
        if transport is None:
            self.transport.bind()  # a taken port stops the node here
        self.relay = NodeRelay(self.transport, self.requests, config.relay,
                               self.identity.node_id, on_change=lambda: None)
        self.connectivity = NodeConnectivity(self.transport, advertise=config.node.advertise,
                                             bootstrap=config.node.bootstrap, relay=self.relay,
                                             seed=seed_for(entropy, "connectivity"))
        self.connectivity.on_tags = self._retag
        self.requests.add(DialBackRequest, self.connectivity.serve_dial_back)
        self.sampler: PeerSampler | None = None
        self.standalone = standalone  # False in tests: no admin socket, no signal handlers
        self._stop = trio.Event()
        self.admin = RelayAdmin(self)

    def _retag(self) -> None:
        tags = self.relay.tags()
        self.transport.tags = tags
        if self.sampler is not None:
            self.sampler.set_tags(tags)

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until stopped (admin ``stop``, a signal, or cancellation)."""
        async with trio.open_nursery() as nursery:
            bound = await nursery.start(self.transport.serve, self.requests)
            address = self.connectivity.start(bound)
            ps = self.config.peer_sampling
            self.sampler = signed_sampler(
                self.identity, address, self.relay.tags(),
                rng=random_for(self.entropy, "peer-sampling"),
                c=ps.view_size, l=ps.shuffle_length)
            self.connectivity.attach(self.sampler)
            self.relay.attach(self.sampler)
            self.sampler.bootstrap([str(b) for b in self.config.node.bootstrap])
            nursery.start_soon(self.connectivity.run)
            nursery.start_soon(self.relay.run)
            nursery.start_soon(self._peer_sampling, self.sampler)
            if self.standalone:
                await nursery.start(serve_admin, self.data_dir / ADMIN_SOCKET, self.admin)
                nursery.start_soon(self._watch_signals)
            logger.info("relay-only node %s listening on %s", self.identity.node_id[:6].hex(),
                        self.transport.listen_address)
            task_status.started(self.transport.listen_address)
            await self._stop.wait()
            nursery.cancel_scope.cancel()
        await self.transport.aclose()
        logger.info("stopped")

    async def _peer_sampling(self, sampler: PeerSampler) -> None:
        ps = self.config.peer_sampling
        await run_peer_sampling(sampler, ShuffleOverTransport(self.transport),
                                period=ps.period, timeout=max(ps.period, 1.0),
                                rng=random_for(self.entropy, "shuffle-backoff"))

    async def _watch_signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                logger.info("received %s", signal.Signals(signum).name)
                self._stop.set()

    def request_stop(self) -> None:
        self._stop.set()

    async def _serve_shuffle(self, peer: PeerInfo, msg: ShuffleRequest) -> ShuffleReply | Error:
        if msg.sender.node_id != peer.node_id or self.sampler is None:
            return Error(ERROR_BAD_REQUEST, "shuffle sender is not the peer")
        return self.sampler.on_request(msg, trio.current_time())

    async def _not_served(self, peer: PeerInfo, msg: object) -> Error:
        return Error(ERROR_REJECTED, f"this is a relay-only node: it holds no model and does "
                                     f"not serve {type(msg).__name__}")


class RelayAdmin:
    """The admin commands of a :class:`RelayNode`."""

    def __init__(self, node: RelayNode) -> None:
        self._node = node

    def status(self) -> StatusReport:
        n = self._node
        reach = n.connectivity.status()
        sampler = n.sampler
        return StatusReport(
            id=n.identity.node_id.hex(), name=n.config.node.name,
            addresses=[n.transport.listen_address] if n.transport.listen_address else [],
            uptime=time.time() - n.started, round=0, steps=0, loss=None, accuracy=None,
            isolated=sampler is None or sampler.is_isolated,
            view_size=0 if sampler is None else len(sampler.view()),
            connections=n.transport.open_connections, data_dir=str(n.data_dir),
            training=TRAINING, reachable=reach.reachable, reachable_reason=reach.reason,
            confirmed_addresses=list(reach.confirmed), relay=n.relay.status())

    def peers(self) -> PeersReport:
        n = self._node
        rows = []
        for entry in [] if n.sampler is None else n.sampler.peer_entries():
            if entry.view is not None:
                continue
            d = entry.descriptor
            rows.append(PeerReport(
                id=d.node_id.hex(), address=d.address, age=d.age,
                models=sorted("relay" if t == RELAY_TAG else t.hex()[:12] for t in d.tags),
                path=n.transport.path_to(d.address)))
        return PeersReport(view=rows)

    def models(self) -> ModelsReport:
        return ModelsReport(models=[])

    def metrics(self) -> MetricsReport:
        n = self._node
        counters: dict[str, int | float] = {"transport.bytes_sent": n.transport.bytes_sent.total}
        counters.update(relay_counters(n.relay.status(), n.transport))
        return MetricsReport(counters=counters)

    def checkpoint(self) -> CheckpointReport:
        return CheckpointReport(path="", bytes=0, round=0, seconds=0.0)

    def stop(self) -> StopReport:
        self._node.request_stop()
        return StopReport(stopping=True)

    def groups(self) -> dict[str, Any]:
        return {"id": self._node.identity.node_id.hex(), "phase": "off"}


def _swarm_key(config: NodeConfig) -> bytes | None:
    from p2p.config import load_swarm_key

    path = config.security.swarm_key_file
    return None if path is None else load_swarm_key(path)


def run_relay_node(config: NodeConfig) -> int:
    """Run a relay-only daemon until stopped; the process exit status."""
    trio.run(RelayNode(config).run)
    return 0
