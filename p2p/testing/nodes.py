"""Building and running real nodes for tests, scripts and benchmarks.

Two kinds of node: :func:`tcp_node` listens on loopback TCP (port chosen by
the OS) and has a real admin socket; :func:`memory_node` runs the same node
over a :class:`~p2p.testing.memnet.MemoryNetwork`, so that many nodes share
one trio run without sockets and faults can be injected. Configurations come
from :func:`p2p.swarm.node_config`, as for the daemons of a local swarm.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Unpack

import trio

from p2p.cli.admin_client import AdminClient
from p2p.config import LimitsConfig, NodeConfig, RelayConfig, StrategyConfig, encode_swarm_key
from p2p.runtime.node import ADMIN_SOCKET, Node
from p2p.runtime.train_runner import TrainRunner
from p2p.swarm import SwarmSpec, node_config
from p2p.testing.memnet import MemoryNetwork, TransportTuning
from p2p.wire.identity import Identity

__all__ = [
    "LOOPBACK",
    "admin_request",
    "fast_spec",
    "memory_addresses",
    "memory_node",
    "memory_swarm",
    "running",
    "tcp_node",
    "tune_config",
    "write_swarm_key",
]

LOOPBACK = "127.0.0.1"


def fast_spec(**changes: object) -> SwarmSpec:
    """A small, quick swarm spec (2 nodes, 2 rounds, short periods); ``changes`` override it."""
    base = SwarmSpec(nodes=2, rounds=2, scheme="full", round_interval=0.0,
                     shuffle_period=0.05, eval_every=1, steps_per_round=2,
                     start_together=False)
    # ``changes`` are SwarmSpec fields, checked by replace() at run time; typing them
    # statically would repeat every field of SwarmSpec here.
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def write_swarm_key(directory: Path, key: bytes) -> Path:
    """Write ``key`` as ``directory/swarm.key`` (mode 0600) and return the path."""
    path = directory / "swarm.key"
    path.write_text(encode_swarm_key(key))
    path.chmod(0o600)
    return path


def tune_config(config: NodeConfig, *, limits: LimitsConfig | None = None,
                checkpoint_interval: float | None = None,
                push_timeout: float | None = None) -> NodeConfig:
    """``config`` with the given test knobs replaced (``None`` keeps the value)."""
    if limits is not None:
        config = dataclasses.replace(config, limits=limits)
    if checkpoint_interval is not None:
        config = dataclasses.replace(
            config, checkpoint=dataclasses.replace(config.checkpoint,
                                                   interval=checkpoint_interval))
    if push_timeout is not None:
        config = dataclasses.replace(
            config, gossip=dataclasses.replace(config.gossip, push_timeout=push_timeout))
    return config


def tcp_node(data_dir: Path, spec: SwarmSpec, index: int = 0, *,
             bootstrap: list[str] | None = None, swarm_key_file: Path | None = None,
             limits: LimitsConfig | None = None, checkpoint_interval: float | None = None,
             push_timeout: float | None = None) -> Node:
    """Node ``index`` of ``spec``, listening on 127.0.0.1 (port picked by the OS) over TCP."""
    config = node_config(spec, index, data_dir, swarm_key_file).with_overrides(
        listen=f"{LOOPBACK}:0", bootstrap=bootstrap or [])
    config = tune_config(config, limits=limits, checkpoint_interval=checkpoint_interval,
                         push_timeout=push_timeout)
    return Node(config)


def memory_addresses(count: int, *, subnet: str = "10.0.0", port: int = 7000) -> list[str]:
    """``count`` distinct addresses for a memory network (names only, never dialled)."""
    return [f"{subnet}.{i + 1}:{port}" for i in range(count)]


def memory_node(net: MemoryNetwork, data_dir: Path, spec: SwarmSpec, index: int,
                address: str, *, bootstrap: Sequence[str] = (), swarm_key: bytes | None = None,
                push_timeout: float | None = None,
                strategy: StrategyConfig | None = None,
                train_runner: TrainRunner | None = None, metrics: str | None = None,
                relay: RelayConfig | None = None,
                **transport: Unpack[TransportTuning]) -> Node:
    """Node ``index`` of ``spec`` listening on ``address`` of ``net``.

    ``data_dir`` is created if missing (a node restarted on it resumes its
    identity and checkpoint). ``swarm_key`` goes to both the node and its
    transport; ``transport`` passes options such as timeouts to the transport.
    ``strategy`` and ``relay`` replace the config's sections; ``train_runner`` is the
    node's (pass :class:`~p2p.runtime.train_runner.InlineRunner` under an
    autojump clock: a worker thread would let virtual time jump). ``metrics``: a
    loopback ``host:port`` for its Prometheus endpoint (real TCP; port 0 = any).
    """
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # private, as a node requires
    config = node_config(spec, index, data_dir, None).with_overrides(
        listen=address, bootstrap=list(bootstrap), metrics=metrics)
    config = tune_config(config, push_timeout=push_timeout)
    if strategy is not None:
        config = dataclasses.replace(config, strategy=strategy)
    if relay is not None:
        config = dataclasses.replace(config, relay=relay)
    memory_transport = net.transport(Identity.load_or_create(data_dir), address,
                                     swarm_key=swarm_key, **transport)
    node = Node(config, transport=memory_transport, swarm_key=swarm_key,
                train_runner=train_runner)
    # the node knows its models only once built; they go in the HELLO of new connections
    memory_transport.tags = node.advertised_tags()
    return node


def memory_swarm(root: Path, net: MemoryNetwork, spec: SwarmSpec, *,
                 addresses: Sequence[str] | None = None, swarm_key: bytes | None = None,
                 push_timeout: float | None = None, metrics: str | None = None,
                 **transport: Unpack[TransportTuning]) -> list[Node]:
    """All ``spec.nodes`` nodes over ``net``, in ``root/node<i>``; all bootstrap from node 0
    (``metrics``: every node's endpoint address, e.g. ``127.0.0.1:0``)."""
    addresses = list(addresses or memory_addresses(spec.nodes))
    if len(addresses) < spec.nodes:
        raise ValueError(f"{spec.nodes} nodes need as many addresses, got {len(addresses)}")
    return [memory_node(net, root / f"node{i}", spec, i, addresses[i],
                        bootstrap=addresses[:1] if i else (), swarm_key=swarm_key,
                        push_timeout=push_timeout, metrics=metrics, **transport)
            for i in range(spec.nodes)]


@asynccontextmanager
async def running(nodes: Sequence[Node]) -> AsyncIterator[list[str]]:
    """Run ``nodes`` in a nursery, each listening before the next starts; yield their addresses.

    On exit every node is asked to stop and the block waits until they have
    (final checkpoints written).
    """
    async with trio.open_nursery() as nursery:
        addresses: list[str] = [await nursery.start(node.run) for node in nodes]
        try:
            yield addresses
        finally:
            for node in nodes:
                node.request_stop()


async def admin_request(data_dir: Path, cmd: str, timeout: float = 5.0) -> dict[str, Any]:
    """One admin command over the node's Unix socket (run in a worker thread); its result."""
    client = AdminClient(data_dir / ADMIN_SOCKET, timeout=timeout)
    return await trio.to_thread.run_sync(client.request, cmd)
