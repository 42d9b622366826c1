"""Churn: kill -9 a quarter of a swarm of real daemons mid-run, restart them, compare.

Two runs of the same swarm spec (same seed) on 127.0.0.1, one after the other:

1. baseline: no faults, every node trains ``--rounds`` rounds;
2. churn: when the survivors reach ``--kill-at`` of the rounds, a quarter of
   the nodes get SIGKILL (no final checkpoint). The survivors' views are
   polled over the admin sockets until no view (main or per-model) holds a
   dead address; then the killed nodes are restarted on their data
   directories (same identity, resuming from their last periodic checkpoint)
   and everyone finishes.

Prints the figures (accuracy of both runs, time and shuffle periods to purge
the dead, rounds lost to the crash, resumed rounds, memory) and writes them as
JSON with ``--json PATH``.

    python scripts/reliability/churn.py                    # 12 nodes, ~3-4 minutes on 2 cores
    python scripts/reliability/churn.py --nodes 8 --rounds 30 --json churn.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from p2p.runtime.checkpoint import CheckpointStore
from p2p.swarm import Swarm, SwarmError, SwarmSpec, default_permutations


def build_spec(args: argparse.Namespace) -> SwarmSpec:
    return SwarmSpec(nodes=args.nodes, rounds=args.rounds, scheme=args.scheme,
                     permutations=default_permutations(args.nodes), seed=args.seed,
                     steps_per_round=args.steps_per_round, round_interval=args.round_interval,
                     shuffle_period=args.shuffle_period, eval_every=5,
                     checkpoint_interval=args.checkpoint_interval)


def victims_of(nodes: int) -> list[int]:
    """A quarter of the nodes, spread out, never node 0 (the first bootstrap address)."""
    count = max(1, nodes // 4)
    step = nodes / count
    return [int(round(step * (k + 0.5))) % nodes or 1 for k in range(count)]


def _peer_addresses(peers: dict[str, Any]) -> set[str]:
    found = {p["address"] for p in peers.get("view", [])}
    for rows in peers.get("models", {}).values():
        found |= {p["address"] for p in rows}
    return found


def _accuracy_figures(summary: dict[str, Any]) -> dict[str, Any]:
    accs = [r["accuracy"] for r in summary["nodes"] if r["accuracy"] is not None]
    return {"median": statistics.median(accs), "min": min(accs), "max": max(accs),
            "mean": statistics.fmean(accs)}


def _peak_rss_mib(swarm: Swarm) -> float | None:
    peaks: dict[int, int] = getattr(swarm, "peak_memory", lambda: {})()
    return max(peaks.values()) / 2**20 if peaks else None


def baseline(spec: SwarmSpec, timeout: float) -> dict[str, Any]:
    with Swarm(spec, startup_timeout=300) as swarm:
        swarm.start()
        swarm.run_until_done(timeout=timeout)
        summary = swarm.summary()
        return {"accuracy": _accuracy_figures(summary), "wall_seconds": summary["wall_seconds"],
                "peak_rss_mib": _peak_rss_mib(swarm)}


def churn(spec: SwarmSpec, victims: list[int], kill_at: float, timeout: float,
          purge_timeout: float, log: Any, workdir: Path | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"victims": victims}
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    with Swarm(spec, workdir=workdir, keep=workdir is not None, startup_timeout=300) as swarm:
        swarm.start()
        deadline = time.monotonic() + timeout
        kill_round = max(1, int(spec.rounds * kill_at))
        while True:  # wait for the kill point
            swarm.poll()
            if statistics.median(d.status.get("round", 0) for d in swarm.daemons) >= kill_round:
                break
            if time.monotonic() > deadline:
                raise SwarmError("swarm did not reach the kill point in time")
            time.sleep(0.2)
        before = {i: (swarm.daemons[i].address, swarm.daemons[i].status["id"],
                      swarm.daemons[i].status["round"]) for i in victims}
        checkpoints_before_kill = {
            i: swarm.daemons[i].client.request("metrics")["counters"].get("checkpoints")
            for i in victims}
        survivors = [d for d in swarm.daemons if d.index not in victims]
        rounds_at_kill = {d.index: d.status["round"] for d in survivors}
        t_kill = time.monotonic()
        for i in victims:
            swarm.kill(i)
        dead = {before[i][0] for i in victims}
        log(f"killed nodes {victims} (rounds {[before[i][2] for i in victims]}, periodic "
            f"checkpoints {checkpoints_before_kill}) at median round >= {kill_round}")
        checkpoint_rounds = {}
        for i in victims:
            state = CheckpointStore(swarm.daemons[i].data_dir).load()
            checkpoint_rounds[i] = state.round if state is not None else 0
        # purge: poll every survivor's views until no dead address is left anywhere
        purge_seconds = None
        dead_entries: list[tuple[float, int]] = []
        while time.monotonic() - t_kill < purge_timeout:
            swarm.poll()
            stale = 0
            for d in survivors:
                stale += len(_peer_addresses(d.client.request("peers")) & dead)
            dead_entries.append((round(time.monotonic() - t_kill, 2), stale))
            if stale == 0:
                purge_seconds = time.monotonic() - t_kill
                break
            time.sleep(0.25)
        progressed = {d.index: d.status["round"] - rounds_at_kill[d.index] for d in survivors}
        log(f"dead addresses purged from every survivor view after "
            f"{purge_seconds if purge_seconds is None else round(purge_seconds, 1)} s")
        # restart on the same data directories
        resumed = {}
        for i in victims:
            swarm.restart(i)
            status = swarm.daemons[i].client.request("status")
            resumed[i] = {"round_at_kill": before[i][2], "checkpoint_round": checkpoint_rounds[i],
                          "resumed_round": status["round"],
                          "same_identity": status["id"] == before[i][1]}
        log(f"restarted {victims}: {resumed}")
        swarm.run_until_done(timeout=max(30.0, deadline - time.monotonic()))
        summary = swarm.summary()
        restarted_accs = [r["accuracy"] for r in summary["nodes"] if r["node"] in victims]
        out.update({
            "accuracy": _accuracy_figures(summary),
            "restarted_accuracy": restarted_accs,
            "kill_round": kill_round,
            "checkpoints_before_kill": checkpoints_before_kill,
            "purge_seconds": purge_seconds,
            "purge_periods": None if purge_seconds is None
            else purge_seconds / spec.shuffle_period,
            "dead_entries_over_time": dead_entries,
            "survivor_rounds_during_purge": progressed,
            "resumed": resumed,
            "wall_seconds": summary["wall_seconds"],
            "peak_rss_mib": _peak_rss_mib(swarm),
        })
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=12)
    p.add_argument("--rounds", type=int, default=120)
    p.add_argument("--round-interval", type=float, default=0.1,
                   help="pause between rounds (s): stretches the run so the crash lands "
                        "between periodic checkpoints")
    p.add_argument("--scheme", choices=["local", "full", "partial"], default="partial")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps-per-round", type=int, default=10)
    p.add_argument("--shuffle-period", type=float, default=0.5)
    p.add_argument("--checkpoint-interval", type=float, default=2.0)
    p.add_argument("--kill-at", type=float, default=0.4, help="fraction of the rounds")
    p.add_argument("--purge-timeout", type=float, default=60.0)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--no-baseline", action="store_true")
    p.add_argument("--json", type=Path, metavar="PATH")
    p.add_argument("--workdir", type=Path, help="keep the churn run's data directories here")
    args = p.parse_args(argv)
    spec = build_spec(args)
    victims = victims_of(args.nodes)

    def log(msg: str) -> None:
        print(f"[churn] {msg}", flush=True)

    result: dict[str, Any] = {"spec": dataclasses.asdict(spec)}
    try:
        if not args.no_baseline:
            log(f"baseline: {args.nodes} nodes, {args.rounds} rounds, no faults")
            result["baseline"] = baseline(spec, args.timeout)
            log(f"baseline accuracy {result['baseline']['accuracy']}")
        log(f"churn: kill -9 {victims} at {args.kill_at:.0%} of the rounds")
        result["churn"] = churn(spec, victims, args.kill_at, args.timeout, args.purge_timeout,
                                log, args.workdir)
    except SwarmError as exc:
        print(f"churn: {exc}", file=sys.stderr)
        return 1
    c = result["churn"]
    lines = [
        f"churn accuracy     median {c['accuracy']['median']:.3f} "
        f"[{c['accuracy']['min']:.3f}-{c['accuracy']['max']:.3f}]",
        f"purge of the dead  {c['purge_seconds'] and round(c['purge_seconds'], 1)} s = "
        f"{c['purge_periods'] and round(c['purge_periods'], 1)} shuffle periods",
        f"resumed            {c['resumed']}",
        f"peak RSS per node  {c['peak_rss_mib'] and round(c['peak_rss_mib'])} MiB",
    ]
    if "baseline" in result:
        b = result["baseline"]["accuracy"]
        lines.insert(0, f"baseline accuracy  median {b['median']:.3f} "
                        f"[{b['min']:.3f}-{b['max']:.3f}]")
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
