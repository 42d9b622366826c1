"""Attack one real daemon on 127.0.0.1 and measure what it costs it.

Starts a single ``p2p run`` process, lets it finish its training rounds, then
runs waves of hostile traffic against it from this process, measuring the
daemon's resident memory (VmRSS, and the peak VmHWM) after each wave, the
admin socket's answer time during the attack, the log lines it wrote, and
whether its model changed:

- garbage: connections sending random bytes, huge or over-limit length
  prefixes, truncated frames;
- bad pushes: authenticated sessions sending NaN/inf vectors, wrong
  fingerprints, lengths, dtypes, encodings, int8 scales and weights;
- big frames: frames just under the pre-handshake limit, left unfinished;
- flood: many concurrent idle connections (over ``max_connections``).

    .venv/bin/python scripts/reliability/hostile.py --json hostile.json   # ~1 min
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import time
from pathlib import Path
from typing import Any

import numpy as np
import trio

from gossip import INT8_BLOCK
from lab.procfs import memory_kib
from p2p.cli.admin_client import AdminClient
from p2p.runtime.protocol import register_node_messages
from p2p.swarm import Swarm, SwarmSpec
from p2p.testing import ask, open_session, push_payload, raw_exchange
from p2p.wire import codec
from p2p.wire.messages import Ping
from p2p.wire.transport import HANDSHAKE_MAX_FRAME_SIZE, parse_address


async def garbage_wave(address: str, count: int, rng: np.random.Generator) -> None:
    payloads = [
        lambda: bytes(rng.integers(0, 256, int(rng.integers(1, 5000)), dtype=np.uint8)),
        lambda: b"\xff\xff\xff\xff" + b"x" * 64,
        lambda: struct.pack(">I", HANDSHAKE_MAX_FRAME_SIZE + 1) + b"x" * 64,
        lambda: struct.pack(">I", 1000) + b"x" * 10,
    ]
    limiter = trio.CapacityLimiter(32)

    async def one(i: int) -> None:
        async with limiter:
            try:
                await raw_exchange(address, payloads[i % len(payloads)](), close_write=True,
                                   timeout=10)
            except OSError:
                pass

    async with trio.open_nursery() as nursery:
        for i in range(count):
            nursery.start_soon(one, i)


async def bad_push_wave(address: str, sessions: int, model: bytes, length: int) -> int:
    rng = np.random.default_rng(1)
    kinds = 0
    for s in range(sessions):
        ms, _ = await open_session(address)
        good = rng.normal(size=length)
        nan = good.copy()
        nan[s % length] = np.nan
        inf = good.copy()
        inf[-1] = np.inf
        blocks = -(-length // INT8_BLOCK)
        for payload in (push_payload(model, nan, 0.1), push_payload(model, inf, 0.1),
                        push_payload(bytes(32), good, 0.1), push_payload(model, good[:-1], 0.1),
                        push_payload(model, good.astype(np.float32), 0.1),  # declared f64
                        push_payload(model, good, 0.1, encoding="f8"),
                        push_payload(model, np.ones(length, np.int8), 0.1, encoding="int8",
                                     scales=np.full(blocks, -1.0, np.float32)),
                        push_payload(model, np.full(length, 0x7F80, "<u2"), 0.1,
                                     encoding="bf16"),  # infinity bit patterns
                        push_payload(model, good, -1.0), push_payload(model, good, 1e300)):
            await ask(ms, payload)
            kinds += 1
        await ms.aclose()
    return kinds


async def big_frame_wave(address: str, count: int) -> None:
    """Connections that announce a frame just under the pre-handshake limit and stall."""
    streams = []
    for _ in range(count):
        try:
            s = await trio.open_tcp_stream(*parse_address(address))
            await s.send_all(struct.pack(">I", HANDSHAKE_MAX_FRAME_SIZE - 16)
                             + b"\0" * (HANDSHAKE_MAX_FRAME_SIZE - 4096))
            streams.append(s)
        except OSError:
            pass
    await trio.sleep(0.5)
    for s in streams:
        await trio.aclose_forcefully(s)


async def flood_wave(address: str, count: int, client: AdminClient) -> list[float]:
    streams = []
    latencies = []
    for i in range(count):
        try:
            streams.append(await trio.open_tcp_stream(*parse_address(address)))
        except OSError:
            pass
        if i % 50 == 0:
            t0 = time.perf_counter()
            await trio.to_thread.run_sync(client.request, "status")
            latencies.append(time.perf_counter() - t0)
    for s in streams:
        await trio.aclose_forcefully(s)
    return latencies


async def attack(address: str, pid: int, client: AdminClient, model: bytes, length: int,
                 scale: int) -> dict[str, Any]:
    register_node_messages()
    phases: dict[str, Any] = {"start": memory_kib(pid)}
    before = client.request("models")["models"][0]
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    await garbage_wave(address, 400 * scale, rng)
    phases["garbage"] = {**memory_kib(pid), "connections": 400 * scale,
                         "seconds": time.perf_counter() - t0}
    t0 = time.perf_counter()
    sent = await bad_push_wave(address, 20 * scale, model, length)
    phases["bad_pushes"] = {**memory_kib(pid), "pushes": sent, "seconds": time.perf_counter() - t0}
    await big_frame_wave(address, 60)
    phases["big_frames"] = {**memory_kib(pid), "connections": 60}
    latencies = await flood_wave(address, 200 * scale, client)
    phases["flood"] = {**memory_kib(pid), "connections": 200 * scale,
                       "admin_status_seconds_median": statistics.median(latencies),
                       "admin_status_seconds_max": max(latencies)}
    await trio.sleep(2)
    phases["after"] = memory_kib(pid)
    ms, _ = await open_session(address)
    assert (await ask(ms, codec.encode(Ping(1)))).nonce == 1  # type: ignore[attr-defined]
    await ms.aclose()
    after = client.request("models")["models"][0]
    phases["model_unchanged"] = (after["weight"] == before["weight"]
                                 and after["pushes_received"] == before["pushes_received"])
    phases["pushes_rejected"] = after["pushes_rejected"] - before["pushes_rejected"]
    return phases


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=int, default=5, help="multiplies the size of each wave")
    p.add_argument("--json", type=Path, metavar="PATH")
    args = p.parse_args(argv)
    spec = SwarmSpec(nodes=1, rounds=5, scheme="full", round_interval=0.0, eval_every=5)
    with Swarm(spec, startup_timeout=300) as swarm:
        swarm.start()
        d = swarm.daemons[0]
        assert d.process is not None and d.address is not None
        client = d.client
        while client.request("status")["round"] < spec.rounds:
            time.sleep(0.2)
        m = client.request("models")["models"][0]
        model, length = bytes.fromhex(m["fingerprint"]), m["size"]
        result = trio.run(attack, d.address, d.process.pid, client, model, length, args.scale)
        log = d.log_path.read_text(errors="replace").splitlines()
        result["warning_lines"] = sum(" WARNING " in line for line in log)
        result["error_lines"] = sum(" ERROR " in line for line in log)
        result["alive"] = d.process.poll() is None
        codes = swarm.stop()
        result["exit_code"] = codes[0]
    for key, value in result.items():
        print(f"{key:>16}: {value}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
