"""Connection floods against a real daemon on loopback, measured against a no-attack run.

Starts 3 daemons sharing a swarm key (``p2p.swarm.Swarm``), lets them gossip,
then measures the victim (node 0) for one window per row, in this order:

- ``no attack``: the baseline;
- ``sessions + idle TCP``: an attacker holding the swarm key opens ``--sessions``
  authenticated sessions (a fresh identity each) from 127.0.0.2 that ping every
  ``--ping-every`` seconds, and an outsider holds ``--idle`` TCP connections
  from 127.0.0.3 that never say anything (each reopened when the victim closes it);
- ``unfinished big frames``: ``--frames`` sessions from 127.0.0.4 announcing a
  ``--frame-mib`` MiB frame and sending all of it but the last byte (reopened
  when closed);
- ``unfinished frames under the cap``: the same with frames just under the
  smallest frame cap a node uses (``MIN_FRAME_LIMIT``), from 127.0.0.5.

Each row reports the victim's acks in the window (acknowledged pushes, its
gossip getting through), their ratio to the no-attack row, the CPU seconds the
victim and the attacking process used in the window, its resident memory
(VmRSS before the attack starts and at the end of the window, and the peak,
VmHWM, reset before the attack), and the lines its
log got in the window (all of them, and WARNING or worse). Sources are distinct
loopback addresses (Linux routes all of 127/8 to lo), as separate hosts would be.

    .venv/bin/python scripts/attack/flood.py --json flood.json      # ~3 min

Targets (issue 11): acks >= 80 % of the no-attack rate, unfinished big frames
add <= 32 MiB of RSS, <= 100 log lines per 30 s.
"""

from __future__ import annotations

import argparse
import json
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from lab.procfs import cpu_seconds, memory_kib, reset_peak_memory
from p2p.config import load_swarm_key
from p2p.runtime.protocol import register_node_messages
from p2p.swarm import Swarm, SwarmSpec
from p2p.testing.wire_client import connect_from
from p2p.wire.admission import MIN_FRAME_LIMIT
from p2p.wire.identity import Identity
from p2p.wire.messages import Ping
from p2p.wire.transport import ConnectionFailure, MessageStream, Transport

ATTACKER, OUTSIDER, BIG_FRAMES, UNDER_CAP = "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"
_GONE = (ConnectionFailure, OSError, trio.BrokenResourceError, trio.ClosedResourceError)


@dataclass
class Tally:
    """What the attacking clients managed."""

    connects: int = 0
    lost: int = 0
    errors: dict[str, int] = field(default_factory=dict)


async def session_from(address: str, source: str, key: bytes) -> MessageStream:
    """An authenticated session from ``source`` under a fresh identity."""
    me = Transport(Identity.generate(), "127.0.0.1", 0, swarm_key=key, max_frame_size=64 << 20)
    ms = MessageStream(await connect_from(address, source), max_frame_size=64 << 20,
                       write_timeout=10.0)
    try:
        await me._handshake(ms, initiator=True, expected_node_id=None)
    except BaseException:
        await ms.aclose()
        raise
    return ms


async def forever(tally: Tally, body: Callable[[], Awaitable[None]], pause: float) -> None:
    """Run ``body`` again and again (a persistent attacker), counting how it ends."""
    while True:
        try:
            await body()
        except _GONE as exc:
            tally.lost += 1
            kind = type(exc).__name__
            tally.errors[kind] = tally.errors.get(kind, 0) + 1
        await trio.sleep(pause)


async def pinging_session(address: str, key: bytes, every: float, tally: Tally) -> None:
    ms = await session_from(address, ATTACKER, key)
    tally.connects += 1
    try:
        n = 0
        while True:
            n += 1
            await ms.send(Ping(n))
            await ms.receive(30.0, 30.0)
            await trio.sleep(every)
    finally:
        await ms.aclose()


async def idle_connection(address: str, tally: Tally) -> None:
    stream = await connect_from(address, OUTSIDER)
    tally.connects += 1
    try:
        while await stream.receive_some(4096):
            pass
        raise trio.BrokenResourceError("closed by the victim")
    finally:
        await trio.aclose_forcefully(stream)


async def unfinished_frame(address: str, source: str, key: bytes, size: int,
                           tally: Tally) -> None:
    ms = await session_from(address, source, key)
    tally.connects += 1
    try:
        await ms.stream.send_all(struct.pack(">I", size))
        chunk = b"\0" * (1 << 20)
        left = size - 1
        while left > 0:
            await ms.stream.send_all(chunk[: min(left, len(chunk))])
            left -= min(left, len(chunk))
        while await ms.stream.receive_some(4096):  # hold it until the victim gives up
            pass
        raise trio.BrokenResourceError("closed by the victim")
    finally:
        await ms.aclose()


class Victim:
    def __init__(self, swarm: Swarm) -> None:
        self.daemon = swarm.daemons[0]
        self.swarm = swarm
        assert self.daemon.process is not None and self.daemon.address is not None
        self.pid = self.daemon.process.pid
        self.address = self.daemon.address

    async def acks(self) -> int:
        return await trio.to_thread.run_sync(self.swarm._counter_sum, self.daemon, "acks")

    def log_lines(self) -> list[str]:
        return self.daemon.log_path.read_text(errors="replace").splitlines()


async def measure(victim: Victim, window: float, name: str,
                  attack: Callable[[trio.Nursery], None] | None, settle: float) -> dict[str, Any]:
    reset_peak_memory(victim.pid)
    before = memory_kib(victim.pid)  # before the attack: what it adds is measured
    async with trio.open_nursery() as nursery:
        if attack is not None:
            attack(nursery)
            await trio.sleep(settle)  # let the flood build up before counting acks and lines
        acks0, lines0 = await victim.acks(), len(victim.log_lines())
        cpu0, own0 = cpu_seconds(victim.pid), cpu_seconds()
        await trio.sleep(window)
        acks1, lines = await victim.acks(), victim.log_lines()[lines0:]
        cpu1, own1 = cpu_seconds(victim.pid), cpu_seconds()
        after = memory_kib(victim.pid)
        nursery.cancel_scope.cancel()
    row = {
        "row": name, "acks": acks1 - acks0,
        "rss_start_mib": before["VmRSS"] / 1024, "rss_end_mib": after["VmRSS"] / 1024,
        "rss_peak_mib": after["VmHWM"] / 1024,
        "log_lines": len(lines),
        "warning_lines": sum(" WARNING " in x or " ERROR " in x for x in lines),
        "victim_cpu_s": cpu1 - cpu0, "attacker_cpu_s": own1 - own0,
    }
    print(f"  {name}: {row['acks']} acks, {row['log_lines']} log lines, RSS "
          f"{row['rss_start_mib']:.0f} -> {row['rss_end_mib']:.0f} MiB "
          f"(peak {row['rss_peak_mib']:.0f}), CPU s victim {row['victim_cpu_s']:.1f} "
          f"attacker {row['attacker_cpu_s']:.1f}", flush=True)
    return row


async def attack_all(victim: Victim, key: bytes, args: argparse.Namespace) -> dict[str, Any]:
    register_node_messages()
    address = victim.address
    tallies = {k: Tally() for k in ("sessions", "idle", "big", "under_cap")}

    def sessions_and_idle(nursery: trio.Nursery) -> None:
        for _ in range(args.sessions):
            nursery.start_soon(forever, tallies["sessions"], lambda: pinging_session(
                address, key, args.ping_every, tallies["sessions"]), 1.0)
        for _ in range(args.idle):
            nursery.start_soon(forever, tallies["idle"],
                               lambda: idle_connection(address, tallies["idle"]), 0.2)

    def big_frames(size: int, source: str, tally: Tally) -> Callable[[trio.Nursery], None]:
        def start(nursery: trio.Nursery) -> None:
            for _ in range(args.frames):
                nursery.start_soon(forever, tally, lambda: unfinished_frame(
                    address, source, key, size, tally), 1.0)
        return start

    rows = []
    print(f"victim {address} (pid {victim.pid}); window {args.window:g} s", flush=True)
    await trio.sleep(args.warmup)
    rows.append(await measure(victim, args.window, "no attack", None, 0.0))
    rows.append(await measure(victim, args.window, "sessions + idle TCP", sessions_and_idle,
                              args.settle))
    await trio.sleep(args.settle)
    rows.append(await measure(victim, args.window, "unfinished big frames",
                              big_frames(int(args.frame_mib * (1 << 20)), BIG_FRAMES,
                                         tallies["big"]), args.settle))
    await trio.sleep(args.settle)
    rows.append(await measure(victim, args.window, "unfinished frames under the cap",
                              big_frames(MIN_FRAME_LIMIT - 4096, UNDER_CAP,
                                         tallies["under_cap"]), args.settle))
    base = rows[0]["acks"] or 1
    for row in rows:
        row["acks_ratio"] = row["acks"] / base
        row["rss_added_mib"] = row["rss_peak_mib"] - row["rss_start_mib"]
        row["log_lines_per_30s"] = row["log_lines"] * 30.0 / args.window
    return {"rows": rows, "attackers": {k: vars(v) for k, v in tallies.items()},
            "window": args.window}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--window", type=float, default=30.0, help="seconds measured per row")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds of gossip before rows")
    p.add_argument("--settle", type=float, default=5.0,
                   help="seconds an attack runs before its window (and after, to calm down)")
    p.add_argument("--sessions", type=int, default=63, help="attacker's pinging sessions")
    p.add_argument("--ping-every", type=float, default=20.0)
    p.add_argument("--idle", type=int, default=80, help="outsider's idle TCP connections")
    p.add_argument("--frames", type=int, default=30, help="unfinished frames held at once")
    p.add_argument("--frame-mib", type=float, default=15.0)
    p.add_argument("--json", type=Path, metavar="PATH")
    args = p.parse_args(argv)
    spec = SwarmSpec(nodes=3, rounds=100_000, scheme="full", swarm_key=True,
                     round_interval=0.1, eval_every=50)
    started = time.monotonic()
    with Swarm(spec, startup_timeout=300) as swarm:
        swarm.start()
        key = load_swarm_key(swarm.workdir / "swarm.key")
        result = trio.run(attack_all, Victim(swarm), key, args)
        result["alive"] = swarm.daemons[0].process is not None \
            and swarm.daemons[0].process.poll() is None
        result["exit_codes"] = swarm.stop()
    result["seconds"] = time.monotonic() - started
    print(f"\n{'row':<32} {'acks':>5} {'x base':>7} {'RSS +MiB':>9} {'lines/30s':>10} "
          f"{'warn+':>6} {'CPU s victim':>13} {'attacker':>9}")
    for row in result["rows"]:
        print(f"{row['row']:<32} {row['acks']:>5} {row['acks_ratio']:>7.2f} "
              f"{row['rss_added_mib']:>9.1f} {row['log_lines_per_30s']:>10.0f} "
              f"{row['warning_lines']:>6} {row['victim_cpu_s']:>13.1f} "
              f"{row['attacker_cpu_s']:>9.1f}")
    print(f"attackers: {result['attackers']}")
    print(f"victim alive: {result['alive']}, exit codes {result['exit_codes']}, "
          f"{result['seconds']:.0f} s in all")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
