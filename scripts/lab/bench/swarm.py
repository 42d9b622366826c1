"""Real daemons against each other and against the synchronous reference.

16 daemons on 127.0.0.1, 7 of them with labels 8 and 9 swapped (the papers'
task on digits). For every seed: the partial (80 %), local (0 %) and full
(100 %) schemes run as a swarm of processes, and the same nodes (same data
shards, same partial models, same number of SGD steps) run through the
synchronous reference (thesis Algorithm 2, exact averaging every round).
Prints medians over seeds with the min-max spread, wall time, peak memory and
bytes sent per daemon, and the time to accuracy: seconds and bytes per node
until the swarm's mean accuracy first reaches the reference's final accuracy
minus 1 point. The daemons run with the node's gossip defaults unless
``--pushes-per-round``, ``--exchange`` or ``--encoding`` say otherwise;
``--json PATH`` writes every figure.

    python scripts/bench/swarm.py              # 3 seeds, 16 nodes, 60 rounds
    python scripts/bench/swarm.py --quick      # 1 seed, 8 nodes, 30 rounds
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from learner import TrainConfig, run_reference
from p2p.runtime.assembly import build_learning, reference_setup
from p2p.swarm import Swarm, SwarmSpec, node_config
from p2p.swarm.cli import add_gossip_flags

TARGET_MARGIN = 0.01  # time to accuracy: the reference's final accuracy minus 1 point


def swapped(nodes: int, count: int) -> tuple[str | None, ...]:
    """The last ``count`` nodes have 8 and 9 swapped."""
    return tuple("8:9" if i >= nodes - count else None for i in range(nodes))


def reference_accuracy(spec: SwarmSpec, workdir: Path) -> float:
    """Mean final accuracy of the synchronous reference on the swarm's own nodes."""
    setups = []
    for i in range(spec.nodes):
        config = node_config(spec, i, workdir / f"ref{i}", None)
        learning = build_learning(config)
        setups.append(reference_setup(config, learning))
    train = TrainConfig(lr=spec.lr, batch_size=spec.batch_size,
                        steps_per_round=spec.steps_per_round, seed=spec.seed)
    return run_reference(setups, spec.rounds, train, eval_every=spec.rounds).mean_final_accuracy


def spread(values: list[float]) -> str:
    med = statistics.median(values)
    return f"{100 * med:.1f}% [{100 * min(values):.1f}-{100 * max(values):.1f}]"


def spread_of(values: list[float | None], scale: float, unit: str, digits: int = 1) -> str:
    """Median [min-max] of ``values`` / ``scale``; runs that never got there count as 'never'."""
    got = [v / scale for v in values if v is not None]
    if not got:
        return "never"
    text = (f"{statistics.median(got):.{digits}f}{unit} [{min(got):.{digits}f}-"
            f"{max(got):.{digits}f}]")
    missing = len(values) - len(got)
    return text + (f" ({missing} never)" if missing else "")


class Trace:
    """What the swarm had done at every poll: seconds, mean accuracy, mean bytes per node."""

    def __init__(self) -> None:
        self.points: list[tuple[float, float | None, float]] = []

    def record(self, swarm: Swarm) -> None:
        live = [d for d in swarm.daemons if not d.down]
        accs = [d.status.get("accuracy") for d in live]
        sent = [sum(m.get("bytes_sent", 0) for m in d.models.get("models", [])) for d in live]
        mean_acc = (sum(a for a in accs if a is not None) / len(accs)
                    if accs and all(a is not None for a in accs) else None)
        self.points.append((time.monotonic() - swarm.started_at, mean_acc,
                            sum(sent) / max(len(sent), 1)))

    def reached(self, target: float) -> tuple[float, float] | tuple[None, None]:
        """(seconds, payload bytes per node) when the mean accuracy first reached ``target``."""
        for seconds, acc, sent in self.points:
            if acc is not None and acc >= target:
                return seconds, sent
        return None, None


def gossip_label(args: argparse.Namespace) -> str:
    """The gossip settings of the run, for the table's title."""
    chosen = {"pushes_per_round": args.pushes_per_round, "exchange": args.exchange,
              "encoding": args.encoding, "max_in_flight": args.max_in_flight}
    given = [f"{k}={v}" for k, v in chosen.items() if v is not None]
    return ", ".join(given) if given else "node defaults"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=16)
    p.add_argument("--swapped", type=int, default=7, help="nodes with 8 and 9 swapped")
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--schemes", default="partial,local,full")
    add_gossip_flags(p)
    p.add_argument("--privacy", choices=["none", "masked"], default="none",
                   help="masked: the daemons mask their first pushes (the reference cannot)")
    p.add_argument("--quick", action="store_true", help="1 seed, 8 nodes (3 swapped), 30 rounds")
    p.add_argument("--template", type=Path, metavar="TOML",
                   help="config every daemon starts from (e.g. [gossip] merge_guard = false)")
    p.add_argument("--first-seed", type=int, default=0, help="seeds run from here (default 0)")
    p.add_argument("--no-reference", action="store_true",
                   help="skip the synchronous reference (its columns read nan)")
    p.add_argument("--startup-timeout", type=float, default=60.0,
                   help="seconds each daemon may take to answer (raise on a loaded machine)")
    p.add_argument("--json", type=Path, metavar="PATH")
    args = p.parse_args(argv)
    if args.quick:
        args.nodes, args.swapped, args.rounds, args.seeds = 8, 3, 30, 1
    console = Console()
    schemes = [s.strip() for s in args.schemes.split(",") if s.strip()]
    runs: list[dict] = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for scheme in schemes:
            spec = SwarmSpec(nodes=args.nodes, rounds=args.rounds, scheme=scheme,
                             permutations=swapped(args.nodes, args.swapped), seed=seed,
                             pushes_per_round=args.pushes_per_round, exchange=args.exchange,
                             encoding=args.encoding, max_in_flight=args.max_in_flight,
                             privacy=args.privacy,
                             template=str(args.template) if args.template else None)
            t0 = time.monotonic()
            trace = Trace()
            with Swarm(spec, startup_timeout=args.startup_timeout) as swarm:
                swarm.start()
                startup = time.monotonic() - t0
                swarm.run_until_done(timeout=1800, on_poll=trace.record)
                summary = swarm.summary()
                ref = (float("nan") if args.no_reference
                       else reference_accuracy(spec, swarm.workdir))
            seconds_to, bytes_to = trace.reached(ref - TARGET_MARGIN)
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
                "bytes_sent_per_node": summary["mean_bytes_sent"],
                "wire_bytes_sent_per_node": summary["mean_wire_bytes_sent"],
                "waves_per_node": statistics.mean(r["waves"] for r in summary["nodes"]),
                "target_accuracy": ref - TARGET_MARGIN,
                "seconds_to_target": seconds_to,
                "bytes_per_node_to_target": bytes_to,
            }
            runs.append(run)
            console.print(f"seed {seed} {scheme:8s} swarm {100 * run['swarm_mean_accuracy']:.1f}% "
                          f"reference {100 * ref:.1f}% ({run['training_seconds']:.0f}s training, "
                          f"{startup:.0f}s startup), {run['bytes_sent_per_node'] / 1e6:.2f} MB "
                          "payload per node; reference - 1 pt "
                          + ("never reached" if seconds_to is None else
                             f"reached after {seconds_to:.1f}s and "
                             f"{(bytes_to or 0) / 1e6:.2f} MB per node"))
    table = Table(title=f"{args.nodes} daemons, {args.swapped} with 8:9 swapped, {args.rounds} "
                        f"rounds x 10 steps, privacy {args.privacy}, gossip {gossip_label(args)}; "
                        f"median over {args.seeds} seed(s) [min-max]")
    for col in ("scheme", "swarm mean acc", "swarm worst acc", "reference mean acc",
                "swarm - reference", "training s", "payload MB/node", "wire MB/node",
                "s to ref-1pt", "MB/node to ref-1pt", "peak RSS/node MB"):
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
            "bytes_sent_per_node_median": statistics.median(
                r["bytes_sent_per_node"] for r in rs),
            "seconds_to_target": [r["seconds_to_target"] for r in rs],
            "bytes_per_node_to_target": [r["bytes_per_node_to_target"] for r in rs],
        }
        table.add_row(scheme, spread([r["swarm_mean_accuracy"] for r in rs]),
                      spread([r["swarm_worst_accuracy"] for r in rs]),
                      spread([r["reference_mean_accuracy"] for r in rs]),
                      f"{figures[scheme]['gap_points_median']:+.1f} pts",
                      f"{figures[scheme]['training_seconds_median']:.0f}",
                      spread_of([r["bytes_sent_per_node"] for r in rs], 1e6, "", 2),
                      spread_of([r["wire_bytes_sent_per_node"] for r in rs], 1e6, "", 2),
                      spread_of([r["seconds_to_target"] for r in rs], 1.0, ""),
                      spread_of([r["bytes_per_node_to_target"] for r in rs], 1e6, "", 2),
                      f"{figures[scheme]['peak_rss_mb_max']:.0f}")
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json), "template": str(args.template)},
                                         "figures": figures, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
