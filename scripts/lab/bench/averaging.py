"""Averaging primitive: N peer processes average 1M float32 values with the gossip stack.

Each peer is a separate OS process running :class:`lab.averaging.peers.AveragingPeer`
(the daemon's TCP transport on 127.0.0.1 with port 0, peer sampling from a
bootstrap list, the gossip driver and one push-sum core; no trainer, no
torch). Peer ``i`` holds ``length`` float32 values drawn from a generator
seeded with ``(seed, i)``; every peer derives all the vectors from the seeds,
so it knows the true mean ``m`` without receiving it.

Timing starts when every peer knows every other holder and has a warm
connection to it ("go"), and stops at the first moment every peer satisfies
max|x - m| <= tolerance * max|m|. Peers report their error (one JSON line
on stdout) after each change of their estimate: each merged push and each
acknowledged push, stamped with the system-wide monotonic clock; the
coordinator merges the reports in time order to find that moment, and the
payload bytes (the core's counters) each peer had sent by then.

    .venv/bin/python scripts/bench/averaging.py [--peers 4] [--length 1000000]
        [--encoding f32] [--delta-encoding int8] [--exchange push-pull]
        [--max-in-flight 1] [--partners matched,random] [--round-timeout 5]
        [--runs 3] [--json PATH] [--profile PATH]

``--partners`` names one schedule or several, comma-separated: ``matched``
(the default) pairs the peers in rounds, a matching each round with a
deadline per round (see :class:`~lab.averaging.peers.AveragingPeer`);
``random`` picks partners as a training node does (sampled from the holder
view); ``rotate`` cycles through the other peers. With several, run ``k`` of
each schedule uses the same vectors and the runs alternate between the
schedules, so that the machine's load weighs on them alike; one median row per
schedule closes the output. ``--profile`` writes peer 0's cProfile statistics.
Options left out take the PushSum core's defaults (a daemon's ``[gossip]``
defaults differ in ``encoding``: f16 there, f32 in the core; the matched
schedule raises the core's default ``max_in_flight``, see
:data:`~lab.averaging.peers.MATCHED_MAX_IN_FLIGHT`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import trio

from gossip import ENCODINGS, EXCHANGES, PushSum, PushSumOptions
from lab.averaging.peers import DEFAULT_ROUND_TIMEOUT, PARTNER_CHOICES, AveragingPeer

MODEL = hashlib.sha256(b"bench_averaging").digest()
TARGET_MB = 40.0
TARGET_SECONDS = 1.5
HIVEMIND_MB = 6.1  # measured in issue 13 (butterfly all-reduce, 4 peers, 1M float32)
# The environment p2p.swarm starts daemons with. OpenBLAS keeps its default
# threads: the push-sum core makes no BLAS calls (its RMS uses einsum's own
# single-threaded loop), so peers sharing the cores do not spin against each other.
PEER_ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


# --------------------------------------------------------------------- vectors

def peer_vector(seed: int, index: int, length: int) -> np.ndarray:
    """Peer ``index``'s float32 values, as float64 (what the core holds)."""
    rng = np.random.default_rng([seed, index])
    return rng.standard_normal(length, dtype=np.float32).astype(np.float64)


def true_mean(seed: int, peers: int, length: int) -> np.ndarray:
    total = np.zeros(length)
    for i in range(peers):
        total += peer_vector(seed, i, length)
    return total / peers


#: Command-line options that become PushSum keywords (same names).
CORE_OPTIONS = ("encoding", "delta_encoding", "exchange", "max_in_flight", "fanout")


def core_options(args: argparse.Namespace) -> PushSumOptions:
    """The PushSum keywords given on the command line (the others keep the core's defaults)."""
    given = {key: getattr(args, key) for key in CORE_OPTIONS if getattr(args, key) is not None}
    return cast(PushSumOptions, given)


def core_settings(core: PushSum) -> dict[str, Any]:
    """What the core actually runs with."""
    return {key: getattr(core, key) for key in CORE_OPTIONS}


# ----------------------------------------------------------------- peer process

class _Reporter:
    """Writes one JSON line per event to stdout; measures the error when asked.

    The error is checked on a strided sample first: while the sample alone is
    beyond the tolerance (almost always, until the last few exchanges) its
    error is reported as a lower bound, and the full pass over the vector,
    which would cost milliseconds inside the timed window, is skipped.
    """

    SAMPLE_STRIDE = 61

    def __init__(self, peer: AveragingPeer, mean: np.ndarray, tolerance: float) -> None:
        self.peer = peer
        self.mean = mean
        self.scale = float(np.max(np.abs(mean))) or 1.0
        self.tolerance = tolerance
        self.check_seconds = 0.0
        self._scratch = np.empty_like(mean)

    def error(self) -> float:
        started = time.perf_counter()
        x = self.peer.core.estimate_view()
        step = self.SAMPLE_STRIDE
        err = float(np.max(np.abs(x[::step] - self.mean[::step]))) / self.scale
        if err <= self.tolerance:
            np.subtract(x, self.mean, out=self._scratch)
            np.abs(self._scratch, out=self._scratch)
            err = float(self._scratch.max()) / self.scale
        self.check_seconds += time.perf_counter() - started
        return err

    def state(self) -> dict[str, Any]:
        c = self.peer.core.counters
        return {"t": time.monotonic(), "err": self.error(), "payload_sent": c.bytes_sent,
                "payload_received": c.bytes_received, "pushes": c.pushes_sent,
                "merged": c.pushes_received, "acks": c.acks,
                "retransmissions": c.retransmissions, "socket": self.peer.socket.total}

    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"ev": event, **fields}) + "\n"
        os.write(1, line.encode())

    def changed(self) -> None:
        self.emit("state", **self.state())


async def _commands(stdin: trio.lowlevel.FdStream) -> Any:
    buffer = b""
    while True:
        while b"\n" not in buffer:
            chunk = await stdin.receive_some(4096)
            if not chunk:
                return
            buffer += chunk
        line, buffer = buffer.split(b"\n", 1)
        yield json.loads(line)


async def serve_peer(args: argparse.Namespace) -> None:
    """One peer process: listen, join, wait for everyone, then mix on command."""
    index = args.serve_peer
    mean = true_mean(args.seed, args.peers, args.length)
    reporter: _Reporter | None = None

    def changed() -> None:
        if reporter is not None and mixing:
            reporter.changed()

    mixing = False
    peer = AveragingPeer(peer_vector(args.seed, index, args.length), MODEL,
                         core_options=core_options(args), on_change=changed,
                         partners=args.partners, round_timeout=args.round_timeout)
    reporter = _Reporter(peer, mean, args.tolerance)
    stdin = trio.lowlevel.FdStream(os.dup(0))
    async with trio.open_nursery() as nursery:
        address = await nursery.start(peer.run)
        reporter.emit("listening", address=address)
        stop = trio.Event()
        done = trio.Event()
        done.set()

        async def mix(stop: trio.Event, done: trio.Event) -> None:
            await peer.mix(stop)
            done.set()

        async for cmd in _commands(stdin):
            if cmd["cmd"] == "join":
                peer.join(cmd["bootstrap"])
                await peer.wait_for_holders(args.peers - 1)
                await peer.warm_up()
                reporter.emit("ready", settings=core_settings(peer.core), **reporter.state())
            elif cmd["cmd"] == "quiet":
                # only once every peer is ready: a peer that stopped shuffling
                # early could leave a slower one without a way to learn the rest
                peer.stop_discovery()
                reporter.emit("quiet")
            elif cmd["cmd"] == "go":
                mixing = True
                reporter.emit("state", **reporter.state())
                stop, done = trio.Event(), trio.Event()
                nursery.start_soon(mix, stop, done)
            elif cmd["cmd"] in ("pause", "stop"):
                stop.set()
                await done.wait()
                # the last acks may land after our own wave ended: report the state now
                reporter.emit("paused", **reporter.state())
                if cmd["cmd"] == "stop":
                    reporter.emit("final", check_seconds=reporter.check_seconds,
                                  counters=vars(peer.core.counters))
                    break
        nursery.cancel_scope.cancel()


# ------------------------------------------------------------------ coordinator

@dataclass
class _Peer:
    index: int
    process: trio.Process
    log_path: Path
    address: str = ""
    states: list[dict[str, Any]] = field(default_factory=list)
    latest_err: float = math.inf
    final: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    events: dict[str, trio.Event] = field(default_factory=dict)

    def event(self, name: str) -> trio.Event:
        return self.events.setdefault(name, trio.Event())

    async def send(self, **cmd: Any) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all((json.dumps(cmd) + "\n").encode())

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


class PeerFailed(RuntimeError):
    """A peer process exited or misbehaved."""


async def _read_events(peer: _Peer, tolerance: float, on_within: trio.Event,
                       peers: list[_Peer]) -> None:
    assert peer.process.stdout is not None
    buffer = b""
    while True:
        chunk = await peer.process.stdout.receive_some(1 << 16)
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            msg = json.loads(line)
            kind = msg.pop("ev")
            if kind == "listening":
                peer.address = msg["address"]
            elif kind == "ready":
                peer.settings = msg.pop("settings")
                peer.states.append(msg)
            elif kind in ("state", "paused"):
                peer.states.append(msg)
            elif kind == "final":
                peer.final = msg
            if "err" in msg:
                peer.latest_err = msg["err"]
                if all(p.latest_err <= tolerance for p in peers):
                    on_within.set()
            peer.event(kind).set()
    await peer.process.wait()
    if not peer.event("final").is_set():
        peer.event("exited").set()
        raise PeerFailed(f"peer {peer.index} exited with {peer.process.returncode} before the "
                         f"end; its log:\n{peer.log_tail()}")


def first_all_within(peers: list[_Peer], tolerance: float, start: float
                     ) -> tuple[float, list[dict[str, Any]]] | None:
    """The first time >= start at which every peer's latest report is within
    tolerance, with those reports; None if there is none."""
    timeline = sorted((s["t"], p.index, s) for p in peers for s in p.states)
    latest: dict[int, dict[str, Any]] = {}
    for t, index, state in timeline:
        latest[index] = state
        if t >= start and len(latest) == len(peers) and all(
                s["err"] <= tolerance for s in latest.values()):
            return t, [latest[p.index] for p in peers]
    return None


def _state_at(peer: _Peer, t: float) -> dict[str, Any]:
    before = [s for s in peer.states if s["t"] <= t]
    return before[-1] if before else peer.states[0]


async def _wait_all(peers: list[_Peer], event: str, timeout: float) -> None:
    with trio.move_on_after(timeout):
        for p in peers:
            await p.event(event).wait()
    late = [p for p in peers if not p.event(event).is_set()]
    if late:
        logs = "\n".join(f"peer {p.index}:\n{p.log_tail()}" for p in late)
        raise PeerFailed(f"peers {[p.index for p in late]} not {event!r} after {timeout:g} s; "
                         f"their logs:\n{logs}")


async def run_once(args: argparse.Namespace, partners: str, seed: int,
                   workdir: Path) -> dict[str, Any]:
    """Start the peers, average once with schedule ``partners``, stop them; the
    figures of this run."""
    peers: list[_Peer] = []
    argv_common = ["--peers", str(args.peers), "--length", str(args.length), "--seed", str(seed),
                   "--partners", partners, "--round-timeout", str(args.round_timeout)]
    if args.profile is not None:
        argv_common += ["--profile", str(args.profile)]
    for key in CORE_OPTIONS:
        value = getattr(args, key)
        if value is not None:
            argv_common += [f"--{key.replace('_', '-')}", str(value)]
    within = trio.Event()
    spawned = time.monotonic()
    try:
        async with trio.open_nursery() as nursery:
            for i in range(args.peers):
                log_path = workdir / f"peer{i}.log"
                with open(log_path, "wb") as log_file:
                    process = await trio.lowlevel.open_process(
                        [sys.executable, "-m", "lab.bench.averaging", "--serve-peer", str(i), *argv_common],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file,
                        env=PEER_ENV)
                peers.append(_Peer(i, process, log_path))
            for p in peers:
                nursery.start_soon(_read_events, p, args.tolerance, within, peers)
            await _wait_all(peers, "listening", args.timeout)
            listening = time.monotonic()
            # a seed peer: everyone else bootstraps from peer 0 and discovers the rest
            for p in peers:
                await p.send(cmd="join", bootstrap=[] if p.index == 0 else [peers[0].address])
            await _wait_all(peers, "ready", args.timeout)
            for p in peers:
                await p.send(cmd="quiet")
            await _wait_all(peers, "quiet", args.timeout)
            start = time.monotonic()
            setup = {"start_seconds": listening - spawned, "discovery_seconds": start - listening}
            deadline = start + args.timeout
            found = None
            while found is None and time.monotonic() < deadline:
                for p in peers:
                    p.events.pop("paused", None)
                    await p.send(cmd="go")
                with trio.move_on_at(trio.current_time() + deadline - time.monotonic()):
                    await within.wait()
                for p in peers:
                    await p.send(cmd="pause")
                await _wait_all(peers, "paused", args.timeout)
                # reports arrive through separate pipes: the merged timeline decides
                found = first_all_within(peers, args.tolerance, start)
                within = trio.Event()
            for p in peers:
                await p.send(cmd="stop")
            await _wait_all(peers, "final", args.timeout)
    finally:
        for p in peers:
            if p.process.returncode is None:
                p.process.kill()
    return {**_figures(peers, start, found, args), **setup}


def _figures(peers: list[_Peer], start: float, found: tuple[float, list[dict[str, Any]]] | None,
             args: argparse.Namespace) -> dict[str, Any]:
    n = len(peers)
    at_go = [_state_at(p, start) for p in peers]
    if found is None:
        end = max(p.states[-1]["t"] for p in peers)
        states = [p.states[-1] for p in peers]
    else:
        end, states = found
    figures: dict[str, Any] = {
        "converged": found is not None,
        "seconds": (end - start) if found is not None else None,
        "payload_MB_per_peer": sum(s["payload_sent"] for s in states) / n / 1e6,
        "payload_MB_max": max(s["payload_sent"] for s in states) / 1e6,
        "socket_MB_per_peer": sum(s["socket"] - g["socket"]
                                  for s, g in zip(states, at_go, strict=True)) / n / 1e6,
        "exchanges_per_peer": sum(s["pushes"] for s in states) / n,
        "merges_per_peer": sum(s["merged"] for s in states) / n,
        "retransmissions": sum(s["retransmissions"] for s in states),
        "max_error": max(s["err"] for s in states),
        "check_seconds_per_peer": sum(p.final.get("check_seconds", 0.0) for p in peers) / n,
        "settings": peers[0].settings,
    }
    return figures


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", type=int, default=4, help="peer processes (default 4)")
    parser.add_argument("--length", type=int, default=1_000_000,
                        help="values per peer (default 1,000,000)")
    parser.add_argument("--encoding", choices=ENCODINGS,
                        help="absolute values: first request to a peer, one-way pushes "
                        "(the core's default if omitted)")
    parser.add_argument("--delta-encoding", choices=ENCODINGS,
                        help="deltas: push-pull replies and requests against a pair's reference "
                        "(the core's default if omitted; config key gossip.delta_encoding)")
    parser.add_argument("--exchange", choices=EXCHANGES,
                        help="push-pull or push (the core's default if omitted)")
    parser.add_argument("--max-in-flight", type=int, help="pushes in flight per peer")
    parser.add_argument("--fanout", type=int, help="peers per push wave")
    parser.add_argument("--partners", default="matched",
                        help="schedule, or several comma-separated: matched (default; rounds "
                        "of pairwise exchanges, each with a deadline), random (sampled per "
                        "wave, as a training node does), rotate (each peer cycles through "
                        "the others)")
    parser.add_argument("--round-timeout", type=float, default=DEFAULT_ROUND_TIMEOUT,
                        help="matched: seconds before a round without its exchange is skipped "
                        f"(default {DEFAULT_ROUND_TIMEOUT:g})")
    parser.add_argument("--runs", type=int, default=3, help="runs, fresh processes each (default 3)")
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="max|x - m| <= tolerance * max|m| at every peer (default 1e-4)")
    parser.add_argument("--seed", type=int, default=0, help="run k draws vectors with seed + k")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds allowed for each phase of a run (default 120)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--profile", type=Path,
                        help="write peer 0's cProfile statistics here (one run)")
    parser.add_argument("--serve-peer", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.peers < 2:
        parser.error("--peers: at least 2")
    if args.length < 1 or args.runs < 1:
        parser.error("--length and --runs: at least 1")
    if not args.round_timeout > 0:
        parser.error("--round-timeout: seconds > 0")
    schedules = [name.strip() for name in args.partners.split(",")]
    unknown = [name for name in schedules if name not in PARTNER_CHOICES]
    if unknown or len(set(schedules)) != len(schedules):
        parser.error(f"--partners: comma-separated, each once, from {', '.join(PARTNER_CHOICES)}; "
                     f"got {args.partners!r}")
    if args.serve_peer is not None and len(schedules) != 1:
        parser.error("--serve-peer: one schedule")
    if args.serve_peer is not None:
        if args.profile is not None and args.serve_peer == 0:
            import cProfile

            cProfile.runctx("trio.run(serve_peer, args)", globals(), {"args": args},
                            str(args.profile))
        else:
            trio.run(serve_peer, args)
        return 0

    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in schedules}
    with tempfile.TemporaryDirectory(prefix="bench_averaging_") as tmp:
        for k in range(args.runs):
            for name in schedules:  # alternating: the load changes while the runs go on
                runs[name].append(trio.run(run_once, args, name, args.seed + k, Path(tmp)))
    vector_mb = args.length * 4 / 1e6
    print(f"averaging: {args.peers} peers x {args.length:,} float32 values until every peer "
          f"is within {args.tolerance:g} x max|m| of the mean; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus at the end")
    medians = {name: _print_schedule(name, runs[name], args) for name in schedules}
    butterfly = 2 * (args.peers - 1) / args.peers * vector_mb
    print(f"\n{'schedule':>8} {'seconds':>8} {'MB payload/peer':>16} "
          f"{f'x all-reduce {butterfly:.3g} MB':>22} {'MB socket/peer':>15} {'converged':>10}")
    for name in schedules:
        median = medians[name]
        payload = median.get("payload_MB_per_peer")
        ratio = None if payload is None else payload / butterfly
        done = sum(r["converged"] for r in runs[name])
        print(f"{name:>8} {_fmt(median.get('seconds'), '8.3f')} {_fmt(payload, '16.4g')} "
              f"{_fmt(ratio, '22.2f')} {_fmt(median.get('socket_MB_per_peer'), '15.4g')} "
              f"{f'{done}/{len(runs[name])}':>10}")
    print(f"exact all-reduce: each peer sends its vector at least once = {vector_mb:.4g} MB; "
          f"butterfly/ring all-reduce 2(N-1)/N = {butterfly:.4g} MB "
          f"(hivemind measured {HIVEMIND_MB} MB at N=4, 1M)")
    check = max((m.get("check_seconds_per_peer", 0.0) for m in medians.values()), default=0.0)
    print(f"targets (N=4, 1M): <= {TARGET_MB:g} MB payload per peer, <= {TARGET_SECONDS:g} s; "
          f"error checks took up to {check:.3f} s per peer (inside the timed window)")
    if args.json:
        results = {
            "peers": args.peers, "length": args.length, "tolerance": args.tolerance,
            "seed": args.seed, "round_timeout": args.round_timeout,
            "schedules": {name: {"settings": runs[name][0]["settings"], "runs": runs[name],
                                 "median": medians[name]} for name in schedules},
            "reference": {"vector_MB": vector_mb, "butterfly_MB": butterfly,
                          "hivemind_MB": HIVEMIND_MB},
            "targets": {"payload_MB_per_peer": TARGET_MB, "seconds": TARGET_SECONDS},
            "load_average_1min": os.getloadavg()[0], "cpus": os.cpu_count(),
        }
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json}")
    converged = all(r["converged"] for name in schedules for r in runs[name])
    return 0 if converged else 1


def _print_schedule(name: str, runs: list[dict[str, Any]], args: argparse.Namespace
                    ) -> dict[str, Any]:
    """Print one schedule's runs; the medians over its converged runs."""
    settings = runs[0]["settings"]
    print(f"\npartners {name}; core: " + ", ".join(f"{k} {v}" for k, v in settings.items()))
    print(f"{'run':>6} {'seconds':>8} {'MB payload/peer':>16} {'MB socket/peer':>15} "
          f"{'exchanges/peer':>15} {'merges/peer':>12} {'max err':>9}")
    for k, r in enumerate(runs, 1):
        print(f"{k:>6} {_fmt(r['seconds'], '8.3f')} {r['payload_MB_per_peer']:16.4g} "
              f"{r['socket_MB_per_peer']:15.4g} {r['exchanges_per_peer']:15.1f} "
              f"{r['merges_per_peer']:12.1f} {r['max_error']:9.2e}")
    converged = [r for r in runs if r["converged"]]
    median: dict[str, Any] = {}
    if converged:
        for key in ("seconds", "payload_MB_per_peer", "socket_MB_per_peer",
                    "exchanges_per_peer", "merges_per_peer", "check_seconds_per_peer"):
            median[key] = statistics.median(r[key] for r in converged)
        print(f"{'median':>6} {median['seconds']:8.3f} {median['payload_MB_per_peer']:16.4g} "
              f"{median['socket_MB_per_peer']:15.4g} {median['exchanges_per_peer']:15.1f} "
              f"{median['merges_per_peer']:12.1f}")
    if len(converged) < len(runs):
        print(f"{len(runs) - len(converged)} of {len(runs)} runs did not converge within "
              f"{args.timeout:g} s")
    return median


if __name__ == "__main__":
    raise SystemExit(main())
