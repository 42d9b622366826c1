#!/usr/bin/env python3
"""Real daemons against each other and against the synchronous reference.

16 daemons on 127.0.0.1, 7 of them with labels 8 and 9 swapped (the papers'
task on digits). For every seed: the partial (80 %), local (0 %) and full
(100 %) schemes run as a swarm of processes, and the same nodes (same data
shards, same partial models, same number of SGD steps) run through the
synchronous reference (thesis Algorithm 2, exact averaging every round).
Prints medians over seeds with the min-max spread, wall time and peak memory
per daemon; ``--json PATH`` writes every figure.

    python scripts/bench_swarm.py              # 3 seeds, 16 nodes, 60 rounds
    python scripts/bench_swarm.py --quick      # 1 seed, 8 nodes, 30 rounds
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from learner import NodeSetup, TrainConfig, run_reference
from p2p.runtime.assembly import build_learning, model_specs, network_spec
from p2p.swarm import Swarm, SwarmSpec, node_config


def swapped(nodes: int, count: int) -> tuple[str | None, ...]:
    """The last ``count`` nodes have 8 and 9 swapped."""
    return tuple("8:9" if i >= nodes - count else None for i in range(nodes))


def reference_accuracy(spec: SwarmSpec, workdir: Path) -> float:
    """Mean final accuracy of the synchronous reference on the swarm's own nodes."""
    setups = []
    for i in range(spec.nodes):
        config = node_config(spec, i, workdir / f"ref{i}", None)
        learning = build_learning(config)
        setups.append(NodeSetup(network_spec(config), tuple(model_specs(config)),
                                learning.data, config.node.seed))
    train = TrainConfig(lr=spec.lr, batch_size=spec.batch_size,
                        steps_per_round=spec.steps_per_round, seed=spec.seed)
    return run_reference(setups, spec.rounds, train, eval_every=spec.rounds).mean_final_accuracy


def spread(values: list[float]) -> str:
    med = statistics.median(values)
    return f"{100 * med:.1f}% [{100 * min(values):.1f}-{100 * max(values):.1f}]"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=16)
    p.add_argument("--swapped", type=int, default=7, help="nodes with 8 and 9 swapped")
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--schemes", default="partial,local,full")
    p.add_argument("--pushes-per-round", type=int, default=4)
    p.add_argument("--privacy", choices=["none", "masked"], default="none",
                   help="masked: the daemons mask their first pushes (the reference cannot)")
    p.add_argument("--quick", action="store_true", help="1 seed, 8 nodes (3 swapped), 30 rounds")
    p.add_argument("--json", type=Path, metavar="PATH")
    args = p.parse_args(argv)
    if args.quick:
        args.nodes, args.swapped, args.rounds, args.seeds = 8, 3, 30, 1
    console = Console()
    schemes = [s.strip() for s in args.schemes.split(",") if s.strip()]
    runs: list[dict] = []
    for seed in range(args.seeds):
        for scheme in schemes:
            spec = SwarmSpec(nodes=args.nodes, rounds=args.rounds, scheme=scheme,
                             permutations=swapped(args.nodes, args.swapped), seed=seed,
                             pushes_per_round=args.pushes_per_round, privacy=args.privacy)
            t0 = time.monotonic()
            with Swarm(spec) as swarm:
                swarm.start()
                startup = time.monotonic() - t0
                swarm.run_until_done(timeout=1800)
                summary = swarm.summary()
                ref = reference_accuracy(spec, swarm.workdir)
            peaks = [r["peak_rss_bytes"] for r in summary["nodes"] if r["peak_rss_bytes"]]
            run = {
                "seed": seed, "scheme": scheme,
                "swarm_mean_accuracy": summary["mean_accuracy"],
                "swarm_worst_accuracy": summary["worst_accuracy"],
                "reference_mean_accuracy": ref,
                "startup_seconds": startup,
                "training_seconds": summary["wall_seconds"],
                "peak_rss_mb_max": max(peaks) / 2**20 if peaks else None,
                "peak_rss_mb_median": statistics.median(peaks) / 2**20 if peaks else None,
                "per_node_accuracy": [r["accuracy"] for r in summary["nodes"]],
                "pushes_sent": sum(r["pushes_sent"] for r in summary["nodes"]),
                "bytes_sent": sum(r["bytes_sent"] for r in summary["nodes"]),
            }
            runs.append(run)
            console.print(f"seed {seed} {scheme:8s} swarm {100 * run['swarm_mean_accuracy']:.1f}% "
                          f"reference {100 * ref:.1f}% ({run['training_seconds']:.0f}s training, "
                          f"{startup:.0f}s startup)")
    table = Table(title=f"{args.nodes} daemons, {args.swapped} with 8:9 swapped, {args.rounds} "
                        f"rounds x 10 steps, privacy {args.privacy}; median over {args.seeds} "
                        "seed(s) [min-max]")
    for col in ("scheme", "swarm mean acc", "swarm worst acc", "reference mean acc",
                "swarm - reference", "training s", "peak RSS/node MB"):
        table.add_column(col, justify="left" if col == "scheme" else "right")
    figures: dict[str, dict] = {}
    for scheme in schemes:
        rs = [r for r in runs if r["scheme"] == scheme]
        gap = [r["swarm_mean_accuracy"] - r["reference_mean_accuracy"] for r in rs]
        figures[scheme] = {
            "swarm_mean_accuracy_median": statistics.median(r["swarm_mean_accuracy"] for r in rs),
            "reference_mean_accuracy_median": statistics.median(
                r["reference_mean_accuracy"] for r in rs),
            "gap_points_median": 100 * statistics.median(gap),
            "training_seconds_median": statistics.median(r["training_seconds"] for r in rs),
            "peak_rss_mb_max": max((r["peak_rss_mb_max"] or 0) for r in rs),
        }
        table.add_row(scheme, spread([r["swarm_mean_accuracy"] for r in rs]),
                      spread([r["swarm_worst_accuracy"] for r in rs]),
                      spread([r["reference_mean_accuracy"] for r in rs]),
                      f"{figures[scheme]['gap_points_median']:+.1f} pts",
                      f"{figures[scheme]['training_seconds_median']:.0f}",
                      f"{figures[scheme]['peak_rss_mb_max']:.0f}")
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         "figures": figures, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
