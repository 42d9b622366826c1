"""A flood of circuit requests against a relay, over loopback sockets: do its limits hold?

In one process: a relay (``p2p.runtime.relay.RelayService`` with the limits given),
a node that reserves with it and answers every request, an honest peer that
reaches that node through the relay twice a second, and ``--attackers``
identities spread over ``--sources`` loopback addresses (127.0.2.x: distinct
hosts, as far as the relay can tell) that each keep ``--sessions`` circuits
busy, pumping 64 KiB requests back to back and asking again at once whenever
the relay refuses. First a window without attack (the honest peer's baseline),
then the flood. Printed: the peaks of circuits (at once, per node, per target)
against the caps, circuits opened and refused by cap, the fastest circuit
(bytes per second each way, over its life) against ``--rate``, the longest
circuit against ``--circuit-seconds``, bytes relayed, and the honest peer's
requests answered in each window.

    .venv/bin/python scripts/attack/circuit_flood.py --json circuit_flood.json   # ~1 min
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from p2p.runtime.protocol import register_node_messages
from p2p.runtime.relay.book import CircuitRecord
from p2p.runtime.relay.client import RelayReservations
from p2p.runtime.relay.service import RelayService
from p2p.testing.wire_client import connect_from
from p2p.wire import codec
from p2p.wire.circuit import RelayLimits
from p2p.wire.codec import Message
from p2p.wire.dispatch import RequestDispatcher
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.transport import Transport, TransportError


@dataclass(frozen=True)
class Load:
    """A request answered with itself: what a push is to a relay (bytes)."""

    data: bytes


async def _echo(peer: PeerInfo, msg: Load) -> Message:
    return Load(msg.data)


def _transport(connector: Callable[[str], Awaitable[trio.abc.Stream]] | None = None,
               ) -> Transport:
    return Transport(Identity.generate(), "127.0.0.1", 0, connector=connector,
                     connect_timeout=10.0, max_connections=256)


@dataclass
class Tally:
    honest_ok: int = 0
    honest_failed: int = 0
    attack_requests: int = 0
    attack_refused: int = 0


async def _honest(peer: Transport, address: str, seconds: float, tally: Tally) -> None:
    end = trio.current_time() + seconds
    while trio.current_time() < end:
        try:
            await peer.request(address, Load(b"h" * 10_000), timeout=10.0)
            tally.honest_ok += 1
        except TransportError:
            tally.honest_failed += 1
        await trio.sleep(0.5)


async def _attacker(me: Transport, address: str, sessions: int, tally: Tally) -> None:
    async def one() -> None:
        while True:
            try:
                async with me.dialer.session(address, None) as (ms, _):
                    while True:
                        await ms.send(Load(b"a" * 65536))
                        await ms.receive(30.0, 30.0)
                        tally.attack_requests += 1
            except Exception:  # refused, closed at its duration: ask again at once
                tally.attack_refused += 1
                await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        for _ in range(sessions):
            nursery.start_soon(one)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    register_node_messages()
    codec.register(Load, "circuit_flood_load")
    limits = RelayLimits(max_circuits=args.max_circuits, circuits_per_peer=args.per_peer,
                         circuit_rate=args.rate, circuit_duration=args.circuit_seconds)
    relay, target, honest = _transport(), _transport(), _transport()
    service = RelayService(limits, serving=lambda: True)
    relay_requests = RequestDispatcher()
    service.register(relay_requests)
    target_requests = RequestDispatcher()
    target_requests.add(Load, _echo)
    closed: list[tuple[CircuitRecord, float]] = []
    close = service.book.close

    def recording_close(cid: int) -> CircuitRecord | None:
        record = close(cid)
        if record is not None:
            closed.append((record, trio.current_time()))
        return record

    service.book.close = recording_close  # type: ignore[method-assign]
    result: dict[str, Any] = {"limits": vars(limits), "attackers": args.attackers,
                              "sources": args.sources, "sessions": args.sessions}
    async with trio.open_nursery() as nursery:
        relay_address = await nursery.start(relay.serve, relay_requests)
        await nursery.start(target.serve, target_requests)
        await nursery.start(honest.serve, RequestDispatcher())
        reservations = RelayReservations(target, target.identity.node_id,
                                         candidates=lambda: [(relay_address, None)],
                                         on_change=lambda: None, wanted=1)
        reservations.needed = True
        nursery.start_soon(reservations.run)
        while not reservations.relayed_addresses(trio.current_time()):
            await trio.sleep(0.05)
        circuit = reservations.relayed_addresses(trio.current_time())[0]
        baseline = Tally()
        await _honest(honest, circuit, args.window, baseline)
        flood = Tally()
        attackers = []
        for k in range(args.attackers):
            source = f"127.0.2.{k % args.sources + 1}"

            async def connect(address: str, source: str = source) -> trio.abc.Stream:
                return await connect_from(address, source)

            attackers.append(_transport(connect))
        t0 = time.process_time()
        async with trio.open_nursery() as attack:
            for me in attackers:
                attack.start_soon(_attacker, me, circuit, args.sessions, flood)
            await _honest(honest, circuit, args.window, flood)
            attack.cancel_scope.cancel()
        cpu = time.process_time() - t0
        await trio.sleep(0.5)  # the circuits of the attack close
        nursery.cancel_scope.cancel()
    for t in (relay, target, honest, *attackers):
        await t.aclose()
    stats = service.book.stats
    lives = [(r, end - r.opened) for r, end in closed]
    fastest = max((max(r.sent) / max(life, 1e-3) for r, life in lives if life >= 1.0),
                  default=0.0)
    result.update({
        "peak_circuits": stats.peak_circuits, "peak_per_initiator": stats.peak_per_initiator,
        "peak_per_target": stats.peak_per_target, "circuits_opened": stats.circuits_opened,
        "circuits_refused": stats.circuits_refused, "refusals": dict(stats.refusals),
        "circuits_evicted": stats.circuits_evicted,
        "bytes_relayed": stats.bytes_relayed,
        "fastest_circuit_bytes_per_second": round(fastest),
        "longest_circuit_seconds": round(max((life for _, life in lives), default=0.0), 2),
        "honest_baseline": vars(baseline), "honest_under_flood": vars(flood),
        "attack_requests_served": flood.attack_requests,
        "process_cpu_seconds_under_flood": round(cpu, 2),
    })
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--attackers", type=int, default=12, help="attacking identities")
    p.add_argument("--sources", type=int, default=4, help="loopback addresses they use")
    p.add_argument("--sessions", type=int, default=4, help="circuits each keeps asking for")
    p.add_argument("--max-circuits", type=int, default=16)
    p.add_argument("--per-peer", type=int, default=4)
    p.add_argument("--rate", type=int, default=256 * 1024, help="bytes/s per circuit each way")
    p.add_argument("--circuit-seconds", type=float, default=10.0)
    p.add_argument("--window", type=float, default=20.0, help="seconds of each window")
    p.add_argument("--json", type=Path, metavar="PATH")
    args = p.parse_args(argv)
    result = trio.run(run, args)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
