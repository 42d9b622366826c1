#!/usr/bin/env python3
"""Run a local swarm of real gossip-learning daemons on the digits task.

Each node is a separate ``p2p run`` process on 127.0.0.1 with its own data
directory and label permutation; they find each other from node 0's address,
train, gossip their partial models, and are watched through their admin
sockets. At the end: a per-node table, a summary line, optional JSON and plot.

    python scripts/swarm.py                       # 8 nodes, partial scheme
    python scripts/swarm.py --scheme full --nodes 16 --rounds 100
    python scripts/swarm.py --semi-local --permuted "8:9,7:8,id"
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from p2p.cli.render import make_console, unclipped
from p2p.swarm import Swarm, SwarmError, SwarmSpec, default_permutations


def parse_permuted(text: str | None, nodes: int) -> tuple[str | None, ...]:
    """``"8:9,id"`` cycles over the nodes: node i gets item i mod len (``id`` = none)."""
    if text is None:
        return default_permutations(nodes)
    items = [p.strip() for p in text.split(",")] if text.strip() else ["id"]
    return tuple(None if items[i % len(items)] in ("", "id") else items[i % len(items)]
                 for i in range(nodes))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=8, help="number of daemons (default 8)")
    p.add_argument("--rounds", type=int, default=60, help="training rounds per node")
    p.add_argument("--scheme", choices=["local", "full", "partial"], default="partial",
                   help="averaging level 0, 100 or 80 %% of each hidden layer (default partial)")
    p.add_argument("--semi-local", action="store_true",
                   help="add a semi-local model per permutation group (80 global + 20 semi)")
    p.add_argument("--permuted", metavar="SPECS",
                   help='label permutation per node, cycled: "8:9,id" (default: every second '
                        'node has 8 and 9 swapped); items use "|" for several cycles: "7:8|2:3"')
    p.add_argument("--privacy", choices=["none", "masked"], default="none")
    p.add_argument("--swarm-key", action="store_true", help="seal all traffic with a swarm key")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps-per-round", type=int, default=10)
    p.add_argument("--keep", action="store_true", help="keep the data directories")
    p.add_argument("--workdir", type=Path, help="where to put data directories (default: tmp)")
    p.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds")
    p.add_argument("--json", type=Path, metavar="PATH", help="write every figure as JSON")
    p.add_argument("--plot", type=Path, metavar="PATH", help="PNG of accuracy over time per node")
    p.add_argument("--quiet", action="store_true", help="no live progress display")
    return p


def results_table(summary: dict) -> Table:
    t = Table(title="swarm results", title_justify="left")
    for col in ("node", "perm", "test accuracy", "train loss", "rounds", "pushes sent",
                "pushes recv", "rejected", "bytes sent"):
        t.add_column(col, justify="right" if col not in ("perm",) else "left")
    for r in summary["nodes"]:
        acc = "-" if r["accuracy"] is None else f"{100 * r['accuracy']:.1f}%"
        loss = "-" if r["loss"] is None else f"{r['loss']:.3f}"
        t.add_row(str(r["node"]), r["permutation"], acc, loss, str(r["round"]),
                  str(r["pushes_sent"]), str(r["pushes_received"]), str(r["pushes_rejected"]),
                  f"{r['bytes_sent'] / 1e6:.1f} MB")
    return t


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in summary["nodes"]:
        pts = [(t, a) for t, _, a in r["history"] if a is not None]
        if pts:
            ax.plot(*zip(*pts, strict=True), label=f"node{r['node']} ({r['permutation']})")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"swarm: {summary['spec']['nodes']} nodes, scheme {summary['spec']['scheme']}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(stderr=True)
    if args.nodes < 2:
        console.print("--nodes: expected at least 2")
        return 2
    perms = tuple(p.replace("|", ",") if p else None
                  for p in parse_permuted(args.permuted, args.nodes))
    spec = SwarmSpec(nodes=args.nodes, rounds=args.rounds, scheme=args.scheme,
                     semi_local=args.semi_local, permutations=perms, privacy=args.privacy,
                     swarm_key=args.swarm_key, seed=args.seed,
                     steps_per_round=args.steps_per_round)
    console.print(f"starting {spec.nodes} daemons, scheme {spec.scheme}"
                  f"{' + semi-local' if spec.semi_local else ''}, {spec.rounds} rounds")
    try:
        with Swarm(spec, workdir=args.workdir, keep=args.keep) as swarm:
            swarm.start()
            console.print(f"all daemons up (node0 at {swarm.daemons[0].address}); "
                          f"data in {swarm.workdir}")
            progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                                console=console, disable=args.quiet)
            with progress:
                task = progress.add_task("rounds", total=spec.rounds * spec.nodes, info="")

                def show(s: Swarm) -> None:
                    rounds = [min(d.status.get("round", 0), spec.rounds) for d in s.daemons]
                    accs = [d.status.get("accuracy") for d in s.daemons
                            if d.status.get("accuracy") is not None]
                    sent = sum(m.get("pushes_sent", 0) for d in s.daemons
                               for m in d.models.get("models", []))
                    sent_bytes = sum(m.get("bytes_sent", 0) for d in s.daemons
                                     for m in d.models.get("models", []))
                    info = (f"mean acc {100 * sum(accs) / len(accs):.1f}% "
                            f"worst {100 * min(accs):.1f}%" if accs else "no eval yet")
                    info += f" | pushes {sent} | {sent_bytes / 1e6:.1f} MB"
                    progress.update(task, completed=sum(rounds), info=info)

                swarm.run_until_done(timeout=args.timeout, on_poll=show)
            summary = swarm.summary()
            codes = swarm.stop()
            summary["exit_codes"] = codes
            summary["log_tails"] = [d.log_tail(3) for d in swarm.daemons]
            if args.keep:
                console.print(f"data directories kept in {swarm.workdir}")
    except KeyboardInterrupt:
        console.print("interrupted: every daemon was stopped")
        return 130
    except SwarmError as exc:
        console.print(f"[red]swarm failed:[/red] {exc}")
        return 1
    out = make_console()  # not cut at 80 columns when piped; folds rather than cuts
    out.print(unclipped(results_table(summary)))
    out.print(f"mean accuracy {100 * summary['mean_accuracy']:.1f}%, worst "
              f"{100 * summary['worst_accuracy']:.1f}%, {spec.nodes} nodes, scheme {spec.scheme}"
              f"{' + semi-local' if spec.semi_local else ''}, {spec.rounds} rounds x "
              f"{spec.steps_per_round} steps, {summary['wall_seconds']:.0f}s")
    bad = [i for i, c in enumerate(summary["exit_codes"]) if c != 0]
    for i in bad:
        code = summary["exit_codes"][i]
        why = "killed after the grace period" if code is None else f"exit status {code}"
        out.print(f"[yellow]node{i} did not exit cleanly ({why}): {summary['log_tails'][i]}"
                  "[/yellow]")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    if args.plot:
        plot(summary, args.plot)
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
