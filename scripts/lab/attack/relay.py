"""A member relaying between two honest daemons (issue 11, item 1), over TCP.

Starts 3 daemons sharing a swarm key. Node 1 (the "honest target") listens on
a port of its own but advertises the relay's address, so every connection to
it goes through the relay, as through a path the attacker controls (a
hijacked address, a port forward). The relay is
:class:`lab.attack.relay_attacker.RelayAttacker` (it holds the swarm key and an
identity of its own) listening on TCP instead of the in-memory network:

1. ``clean``: it only passes bytes on (the swarm forms; ``--warmup`` s);
2. ``forward``: it passes the Noise handshake through untouched, then tries to
   read every frame and flips a byte in each frame towards node 1;
3. ``impersonate``: it answers every dialler itself claiming node 1's id and
   forwards requests to node 1 claiming node 0's id (the victim), pushes
   rewritten to -10 x their values; it also sends 3 such rewritten pushes
   to node 1 on its own;
4. ``gone``: the attacker leaves the path (bytes passed on untouched again);
   after ``--settle`` s the honest nodes' total push-sum weight is read.

Reported: frames the relay opened, sessions it completed under a claimed id,
rewritten frames and pushes it sent, pushes node 1 merged while every
connection to it went through the relay (each one would be a tampered push
merged), the victims' log lines about it, and the total weight (N = 3) once the
relay is gone, from snapshots where two successive reads of the three nodes'
weights agree (a push in flight is counted by both ends until acknowledged).

    .venv/bin/python scripts/attack/relay.py --json relay.json     # ~1.5 min

Acceptance (issue 11): 0 frames opened, 0 tampered pushes merged; once the
relay is gone and exchanges settle, total weight N +- 1e-6.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import trio

from gossip import Push, encode
from lab.attack.relay_attacker import RelayAttacker
from p2p.cli.admin_client import AdminClientError
from p2p.config import NodeConfig, load_swarm_key, render_config_toml
from p2p.runtime.protocol import register_node_messages
from p2p.swarm import Daemon, Swarm, SwarmSpec, node_config
from p2p.testing.memnet import MemoryNetwork
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.transport import parse_address
from peersampling import HostPort

VICTIM, TARGET = 0, 1


class TcpRoute:
    """What :class:`RelayAttacker` needs of a network, over loopback TCP."""

    def __init__(self) -> None:
        self.servers: dict[str, object] = {}

    async def connect(self, address: str) -> trio.abc.Stream:
        host, port = parse_address(address)
        return await trio.open_tcp_stream(host, port)


class RelayPath:
    """The path to node 1: a TCP port that passes bytes on to ``target``, or
    hands each connection to :attr:`attacker` while one sits on it."""

    def __init__(self, route: TcpRoute, target: str) -> None:
        self.route = route
        self.target = target
        self.attacker: RelayAttacker | None = None
        self._passing: set[trio.CancelScope] = set()  # connections passed on untouched

    def take_over(self, attacker: RelayAttacker | None) -> None:
        """The attacker takes the path (``None``: leaves it); connections that
        were passed on so far break, as a rerouted TCP flow does, so the
        honest nodes' next requests go through the new path."""
        self.attacker = attacker
        for scope in self._passing:
            scope.cancel()

    async def serve(self, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        host, port = listeners[0].socket.getsockname()[:2]
        task_status.started(f"{host}:{port}")
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        attacker = self.attacker
        if attacker is not None:
            await attacker.serve_stream(stream, _unused_handler, "relay")
            return
        try:
            upstream = await self.route.connect(self.target)
        except OSError:
            await trio.aclose_forcefully(stream)
            return

        async def copy(a: trio.abc.Stream, b: trio.abc.Stream, scope: trio.CancelScope) -> None:
            try:
                while data := await a.receive_some(65536):
                    await b.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            scope.cancel()

        async with trio.open_nursery() as nursery:
            self._passing.add(nursery.cancel_scope)
            nursery.start_soon(copy, stream, upstream, nursery.cancel_scope)
            nursery.start_soon(copy, upstream, stream, nursery.cancel_scope)
        self._passing.discard(nursery.cancel_scope)
        await trio.aclose_forcefully(stream)
        await trio.aclose_forcefully(upstream)


class RoutedSwarm(Swarm):
    """A :class:`Swarm` whose node ``TARGET`` listens on ``target_port`` and
    advertises ``advertise`` (the relay)."""

    def __init__(self, spec: SwarmSpec, *, target_port: int, advertise: str, **kw: Any) -> None:
        super().__init__(spec, **kw)
        self.target_port = target_port
        self.advertise = advertise

    def _write_configs(self) -> None:
        super()._write_configs()
        key_file = self.workdir / "swarm.key" if self.spec.swarm_key else None
        d = self.daemons[TARGET]
        cfg: NodeConfig = node_config(self.spec, TARGET, d.data_dir, key_file)
        host, port = parse_address(self.advertise)
        cfg = dataclasses.replace(cfg, node=dataclasses.replace(cfg.node,
                                                                advertise=HostPort(host, port)))
        d.config_path.write_text(render_config_toml(cfg))

    def _spawn(self, d: Daemon, bootstrap: Sequence[str]) -> None:
        if d.index != TARGET:
            super()._spawn(d, bootstrap)
            return
        # the base class listens on port 0; node 1 needs the port the relay dials
        cmd = [sys.executable, "-m", "p2p", "run", "--config", str(d.config_path),
               "--data-dir", str(d.data_dir), "--listen", f"127.0.0.1:{self.target_port}"]
        if bootstrap:
            cmd += ["--bootstrap", ",".join(bootstrap)]
        with open(d.log_path, "ab") as log:
            d.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         env=dict(os.environ, OMP_NUM_THREADS="1",
                                                  MKL_NUM_THREADS="1"),
                                         start_new_session=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shared_models(d: Daemon) -> list[dict[str, Any]]:
    try:
        models = d.client.request("models").get("models", [])
    except AdminClientError:
        return []
    return [m for m in models if m.get("kind") != "local"]


def weights(swarm: Swarm) -> dict[str, float]:
    """Total weight per shared model over the daemons."""
    out: dict[str, float] = {}
    for d in swarm.daemons:
        for m in shared_models(d):
            out[m["name"]] = out.get(m["name"], 0.0) + float(m["weight"])
    return out


def counter(swarm: Swarm, index: int, name: str) -> int:
    return swarm._counter_sum(swarm.daemons[index], name)


def log_count(d: Daemon, *words: str) -> int:
    text = d.log_path.read_text(errors="replace").splitlines()
    return sum(all(w in line for w in words) for line in text)


async def settled_weights(swarm: Swarm, seconds: float) -> list[dict[str, float]]:
    """Snapshots of the total weights where two successive reads agree."""
    out: list[dict[str, float]] = []
    end = trio.current_time() + seconds
    while trio.current_time() < end:
        a = await trio.to_thread.run_sync(weights, swarm)
        b = await trio.to_thread.run_sync(weights, swarm)
        if a and a == b:
            out.append(a)
        await trio.sleep(0.2)
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    register_node_messages()
    spec = SwarmSpec(nodes=3, rounds=100_000, scheme="full", swarm_key=True,
                     round_interval=args.round_interval, eval_every=20, seed=args.seed)
    target_port = free_port()
    result: dict[str, Any] = {}
    route = TcpRoute()
    path = RelayPath(route, f"127.0.0.1:{target_port}")
    swarm = RoutedSwarm(spec, target_port=target_port, advertise="127.0.0.1:0",
                        startup_timeout=300)
    with swarm:
        async with trio.open_nursery() as nursery:
            swarm.advertise = await nursery.start(path.serve)  # node 1 advertises the relay
            print(f"relay on {swarm.advertise}; node 1 listens on 127.0.0.1:{target_port}",
                  flush=True)
            await trio.to_thread.run_sync(swarm.start)
            started = time.monotonic()
            key = load_swarm_key(swarm.workdir / "swarm.key")
            ids = [bytes.fromhex(d.status["id"]) for d in swarm.daemons]
            armed = RelayAttacker(cast(MemoryNetwork, route), "127.0.0.1:1", Identity.generate(),
                                  target=path.target, target_id=ids[TARGET],
                                  victim_id=ids[VICTIM], swarm_key=key)
            await trio.sleep(args.warmup)
            phases: list[dict[str, Any]] = []
            fp = bytes.fromhex(shared_models(swarm.daemons[VICTIM])[0]["fingerprint"])
            size = int(shared_models(swarm.daemons[VICTIM])[0]["size"])
            for phase in ("forward", "impersonate"):
                merged0 = await trio.to_thread.run_sync(counter, swarm, TARGET, "pushes_received")
                armed.mode = phase
                path.take_over(armed)
                if phase == "impersonate":
                    for k in range(3):
                        push = Push(fp, 1 + k, encode(np.ones(size), "f64"), 0.5)
                        await armed.inject(push)
                await trio.sleep(args.phase)
                merged1 = await trio.to_thread.run_sync(counter, swarm, TARGET, "pushes_received")
                row = {"phase": phase, "target_merged": merged1 - merged0,
                       "frames_opened": armed.frames_opened,
                       "sessions_claimed": armed.sessions_claimed,
                       "tampered_sent": armed.tampered_sent,
                       "upstream_refusals": len(armed.upstream_refusals)}
                phases.append(row)
                print(f"  {phase}: {row}", flush=True)
            path.take_over(None)  # gone: the path passes bytes on untouched again
            gone_at = await trio.to_thread.run_sync(weights, swarm)
            await trio.sleep(args.settle)
            snaps = await settled_weights(swarm, args.sample)
            merged_after = await trio.to_thread.run_sync(counter, swarm, TARGET,
                                                         "pushes_received")
            result.update(
                phases=phases, weights_when_gone=gone_at, settled_snapshots=snaps,
                target_pushes_received_end=merged_after,
                decrypt_failure_lines=log_count(swarm.daemons[TARGET], "decrypt"),
                signature_lines_victim=log_count(swarm.daemons[VICTIM], "signature"),
                signature_lines_others=log_count(swarm.daemons[2], "signature"),
                relay_errors=armed.upstream_refusals[:3],
                accuracy=[d.client.request("status").get("accuracy") for d in swarm.daemons],
                daemon_seconds=time.monotonic() - started,
            )
            nursery.cancel_scope.cancel()
        result["exit_codes"] = swarm.stop()
    return result


async def _unused_handler(peer: PeerInfo, msg: object) -> None:
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--warmup", type=float, default=8.0, help="seconds before the attack")
    p.add_argument("--phase", type=float, default=12.0, help="seconds per attack phase")
    p.add_argument("--settle", type=float, default=12.0,
                   help="seconds after the relay left before the weights are read")
    p.add_argument("--sample", type=float, default=5.0, help="seconds of weight snapshots")
    p.add_argument("--round-interval", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, metavar="PATH")
    args = p.parse_args(argv)
    result = trio.run(run, args)
    n = 3
    snaps = result["settled_snapshots"]
    totals = [sum(s.values()) / max(len(s), 1) for s in snaps]
    exact = [t for t in totals if abs(t - n) <= 1e-6]
    result["settled_totals"] = totals
    result["settled_exact"] = len(exact)
    print()
    for row in result["phases"]:
        print(f"{row['phase']:<12} frames opened {row['frames_opened']}, sessions claimed "
              f"{row['sessions_claimed']}, tampered sent {row['tampered_sent']}, pushes node 1 "
              f"merged meanwhile {row['target_merged']}, upstream refusals "
              f"{row['upstream_refusals']}")
    print(f"node 1 log: {result['decrypt_failure_lines']} 'decrypt' lines; node 0 log: "
          f"{result['signature_lines_victim']} 'signature' lines (node 2: "
          f"{result['signature_lines_others']})")
    print(f"weights when the relay left: {result['weights_when_gone']}")
    if totals:
        dev = max(abs(t - n) for t in totals)
        print(f"settled: {len(exact)} of {len(totals)} agreeing snapshots at N = {n} +- 1e-6 "
              f"(largest deviation {dev:.3g}; per model totals {snaps[-1]})")
    else:
        print("settled: no two successive reads agreed")
    print(f"accuracy {result['accuracy']}; exit codes {result['exit_codes']}; "
          f"{result['daemon_seconds']:.0f} s of daemon time after start")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
