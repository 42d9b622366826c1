"""Shared pieces of the reliability tests and scripts: real nodes on loopback,
a hostile client that speaks (or mangles) the wire protocol, and resource probes.

Everything here only ever connects to 127.0.0.1 (or to addresses inside
network namespaces the caller created).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import trio

from gossip import Push
from p2p.cli.admin_client import AdminClient
from p2p.config import LimitsConfig, encode_swarm_key
from p2p.runtime.node import ADMIN_SOCKET, Node
from p2p.swarm import SwarmSpec, node_config
from p2p.wire import codec
from p2p.wire.framing import encode_frame
from p2p.wire.identity import Identity
from p2p.wire.transport import MessageStream, Transport

LOOPBACK = "127.0.0.1"


def fast_spec(**changes: Any) -> SwarmSpec:
    """A small, quick swarm spec (few rounds, short periods) for in-process tests."""
    base = SwarmSpec(nodes=2, rounds=2, scheme="full", round_interval=0.0,
                     shuffle_period=0.05, eval_every=1, steps_per_round=2,
                     start_together=False)
    return dataclasses.replace(base, **changes)


def write_swarm_key(directory: Path, key: bytes) -> Path:
    path = directory / "swarm.key"
    path.write_text(encode_swarm_key(key))
    path.chmod(0o600)
    return path


def tcp_node(data_dir: Path, spec: SwarmSpec, index: int = 0, *,
             bootstrap: list[str] | None = None, swarm_key_file: Path | None = None,
             limits: LimitsConfig | None = None, checkpoint_interval: float | None = None,
             push_timeout: float | None = None) -> Node:
    """A real node listening on 127.0.0.1 (port picked by the OS) with a TCP transport."""
    config = node_config(spec, index, data_dir, swarm_key_file).with_overrides(
        listen=f"{LOOPBACK}:0", bootstrap=bootstrap or [])
    if limits is not None:
        config = dataclasses.replace(config, limits=limits)
    if checkpoint_interval is not None:
        config = dataclasses.replace(
            config, checkpoint=dataclasses.replace(config.checkpoint,
                                                   interval=checkpoint_interval))
    if push_timeout is not None:
        config = dataclasses.replace(
            config, gossip=dataclasses.replace(config.gossip, push_timeout=push_timeout))
    return Node(config)


async def wait_until(predicate: Callable[[], bool], timeout: float = 30.0,
                     interval: float = 0.01) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(interval)


async def admin_request(data_dir: Path, cmd: str, timeout: float = 5.0) -> dict[str, Any]:
    """One admin command over the node's Unix socket (from a worker thread)."""
    client = AdminClient(data_dir / ADMIN_SOCKET, timeout=timeout)
    return await trio.to_thread.run_sync(client.request, cmd)


# --------------------------------------------------------------------------- hostile client


def split(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


async def raw_exchange(address: str, data: bytes, *, close_write: bool = False,
                       timeout: float = 5.0) -> bytes:
    """Connect, send ``data``, return what came back until the node closed the connection."""
    stream = await trio.open_tcp_stream(*split(address))
    received = bytearray()
    try:
        with trio.fail_after(timeout):
            try:
                await stream.send_all(data)
                if close_write:
                    await stream.send_eof()
                while chunk := await stream.receive_some(65536):
                    received += chunk
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass  # reset by the node: also a close
    finally:
        await trio.aclose_forcefully(stream)
    return bytes(received)


async def open_session(address: str, *, swarm_key: bytes | None = None,
                       identity: Identity | None = None,
                       max_frame_size: int = 64 << 20) -> tuple[MessageStream, Identity]:
    """An authenticated connection to ``address`` on which any payload can be sent."""
    identity = identity or Identity.generate()
    me = Transport(identity, LOOPBACK, 0, swarm_key=swarm_key, max_frame_size=max_frame_size)
    ms = MessageStream(await trio.open_tcp_stream(*split(address)),
                       max_frame_size=max_frame_size, write_timeout=5.0)
    await me._handshake(ms, initiator=True, expected_node_id=None)
    return ms, identity


async def ask(ms: MessageStream, payload: bytes, timeout: float = 5.0) -> object:
    """Send one raw payload; the decoded reply (raises ConnectionFailure when closed)."""
    await ms.send_payload(payload)
    return codec.decode(await ms.receive_payload(timeout, timeout))


def push_payload(model: bytes, values: np.ndarray, weight: float, push_id: int = 1,
                 **fields: Any) -> bytes:
    """A Push encoded by hand, so that values the codec would refuse can be sent."""
    raw = {"v": codec.PROTOCOL_VERSION, "t": "push", "model": model, "push_id": push_id,
           "values": {"dtype": values.dtype.str, "n": int(values.size),
                      "data": values.tobytes()},
           "weight": weight, "masked": False, "noisy": False, "noise_age": 0}
    raw.update(fields)
    return msgpack.packb(raw, use_bin_type=True)


def valid_push(model: bytes, length: int, weight: float = 0.25, push_id: int = 1,
               seed: int = 0) -> Push:
    values = np.random.default_rng(seed).normal(size=length)
    return Push(model, push_id, values, weight)


def random_bytes(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def garbage_frames(seed: int = 0) -> Iterator[bytes]:
    """Length-prefixed random payloads (well-framed garbage)."""
    rng = random.Random(seed)
    while True:
        yield encode_frame(rng.randbytes(rng.randrange(1, 512)))


# --------------------------------------------------------------------------- probes


def rss_kib(pid: int | None = None) -> int:
    """Resident set size of a process in KiB (Linux /proc)."""
    path = f"/proc/{pid or os.getpid()}/status"
    with open(path) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS in {path}")


class LogCounter(logging.Handler):
    """Counts WARNING+ records per logger while attached."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def lines(self) -> list[str]:
        return [f"{r.name}: {r.getMessage()}" for r in self.records]

    def clear(self) -> None:
        self.records.clear()


@contextmanager
def count_warnings(*loggers: str) -> Iterator[LogCounter]:
    counter = LogCounter()
    targets = [logging.getLogger(name) for name in (loggers or ("",))]
    levels = [t.level for t in targets]
    for t in targets:
        t.addHandler(counter)
        if t.level == logging.NOTSET or t.level > logging.WARNING:
            t.setLevel(logging.WARNING)
    try:
        yield counter
    finally:
        for t, level in zip(targets, levels, strict=True):
            t.removeHandler(counter)
            t.setLevel(level)
