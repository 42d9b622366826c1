"""FedCurv (paper 004), decentralized, on a label-skewed digits split: real nodes, simulated.

Sixteen nodes (``--nodes``) of the daemon's own runtime run in one process on a
virtual clock (:class:`p2p.simulation.host.Simulation`, as ``scripts/simulate.py``),
each holding a shard whose class proportions are drawn from Dirichlet(0.3)
(``data.label_skew``), all tested on the same test part (every class). Schemes, on
the same nodes, shards and seeds:

- ``local``: nothing averaged (``--scheme local``);
- ``average``: one global model, push-sum averaged (``--scheme full``, strategy
  "partial"): FedAvg's decentralized counterpart, FedCurv's baseline;
- ``fedcurv-<lambda>``: the same plus FedCurv's penalty (``strategy.name`` "fedcurv",
  ``strategy.fedcurv_lambda``), the sums over the other nodes push-summed.

Printed per scheme: the median over seeds of the nodes' mean test accuracy at the
end, its min-max over seeds, the median over seeds of the worst node, and the mean
CPU seconds of a run. ``--json PATH`` writes every run (after each one, so a long
session keeps what it did). Every node starts at once (``start_together`` off:
waiting for full views spread the 16 starts over about 35 rounds).

    python scripts/paper/fedcurv.py --seeds 5 --json out.json
    python scripts/paper/fedcurv.py --seeds 1 --rounds 10 --lambdas 1 --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import trio

from p2p.config import NodeConfig
from p2p.runtime.train_runner import InlineRunner
from p2p.simulation.host import Simulation
from p2p.simulation.network import SimNetwork
from p2p.swarm import SwarmSpec
from p2p.testing.clock import virtual_clock

DEFAULT_LAMBDAS = (0.1, 1.0, 10.0, 100.0)
COMPUTE_SECONDS = 0.05  # simulated cost of a round


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (default 5)")
    p.add_argument("--nodes", type=int, default=16, help="nodes (default 16)")
    p.add_argument("--rounds", type=int, default=20, help="training rounds (default 20)")
    p.add_argument("--steps-per-round", type=int, default=10, help="SGD steps a round")
    p.add_argument("--lr", type=float, default=0.1, help="learning rate (default 0.1)")
    p.add_argument("--skew", type=float, default=0.3, help="data.label_skew alpha (0.3)")
    p.add_argument("--lambdas", default=",".join(f"{x:g}" for x in DEFAULT_LAMBDAS),
                   help="fedcurv lambdas, comma-separated (default 0.1,1,10,100)")
    p.add_argument("--every", type=int, default=2,
                   help="strategy.fedcurv_every: rounds a generation of the sums lasts, "
                        "one Fisher estimate each (2)")
    p.add_argument("--samples", type=int, default=64,
                   help="strategy.fedcurv_samples: samples per Fisher estimate (64)")
    p.add_argument("--no-local", action="store_true", help="skip the local-only baseline")
    p.add_argument("--json", type=Path, metavar="PATH", help="write every run as JSON")
    return p


@dataclasses.dataclass(frozen=True)
class Scheme:
    """One column of the table: an averaging level and a strategy."""

    label: str
    scheme: str  # SwarmSpec.scheme: local | full
    strategy: str = "partial"
    lam: float = 0.0


def schemes_of(args: argparse.Namespace) -> list[Scheme]:
    lambdas = [float(x) for x in str(args.lambdas).split(",") if x.strip()]
    out = [] if args.no_local else [Scheme("local", "local")]
    out.append(Scheme("average", "full"))
    out += [Scheme(f"fedcurv-{lam:g}", "full", "fedcurv", lam) for lam in lambdas]
    return out


def configure_for(scheme: Scheme, args: argparse.Namespace
                  ) -> Callable[[NodeConfig], NodeConfig]:
    """Each node's config: the label-skewed data and the scheme's [strategy]."""
    def configure(config: NodeConfig) -> NodeConfig:
        return dataclasses.replace(
            config,
            data=dataclasses.replace(config.data, label_skew=args.skew),
            strategy=config.strategy.with_keys(name=scheme.strategy, fedcurv_lambda=scheme.lam,
                                               fedcurv_every=args.every,
                                               fedcurv_samples=args.samples),
            checkpoint=dataclasses.replace(config.checkpoint, interval=1e6))
    return configure


def run_one(scheme: Scheme, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One simulated swarm; its figures."""
    spec = SwarmSpec(nodes=args.nodes, rounds=args.rounds, scheme=scheme.scheme, seed=seed,
                     steps_per_round=args.steps_per_round, lr=args.lr, eval_every=args.rounds,
                     round_interval=0.05, shuffle_period=0.5, start_together=False)
    with tempfile.TemporaryDirectory(prefix="fedcurv-") as tmp:
        sim = Simulation(spec, Path(tmp), SimNetwork(seed=seed, trusted_handshakes=True),
                         runner_for=lambda index: InlineRunner(COMPUTE_SECONDS),
                         sample_every=1.0, max_seconds=args.rounds * 10.0 + 300.0,
                         configure=configure_for(scheme, args))
        wall, cpu = time.perf_counter(), time.process_time()
        trio.run(sim.run, clock=virtual_clock())
        summary = sim.summary(time.perf_counter() - wall)
        nodes = [s.node for s in sim.slots]
        strategies = [n.strategy_status() if n is not None else None for n in nodes]
    accs = [r["accuracy"] for r in summary["nodes"] if r["accuracy"] is not None]
    return {
        "scheme": scheme.label, "seed": seed,
        "mean_accuracy": statistics.fmean(accs) if accs else None,
        "worst_accuracy": min(accs) if accs else None,
        "accuracies": accs,
        "simulated_seconds": summary["simulated_seconds"],
        "wall_seconds": summary["wall_seconds"],
        "cpu_seconds": time.process_time() - cpu,
        "timed_out": summary["timed_out"],
        "mean_bytes_sent": summary["mean_bytes_sent"],
        "strategy": strategies[0],
    }


def table(runs: Sequence[dict[str, Any]], labels: Sequence[str]) -> list[dict[str, Any]]:
    """Per scheme: median, min and max over seeds of the mean accuracy; median worst."""
    rows = []
    for label in labels:
        mine = [r for r in runs if r["scheme"] == label and r["mean_accuracy"] is not None]
        if not mine:
            continue
        means = [r["mean_accuracy"] for r in mine]
        rows.append({
            "scheme": label, "seeds": len(mine),
            "median": statistics.median(means), "min": min(means), "max": max(means),
            "median_worst": statistics.median(r["worst_accuracy"] for r in mine),
            "cpu_seconds": statistics.fmean(r["cpu_seconds"] for r in mine),
        })
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.seeds < 1 or args.nodes < 2 or args.rounds < 1:
        print("error: --seeds >= 1, --nodes >= 2, --rounds >= 1 expected", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING)
    schemes = schemes_of(args)
    runs = []
    started = time.perf_counter()
    for seed in range(args.seeds):
        for scheme in schemes:
            run = run_one(scheme, seed, args)
            runs.append(run)
            if args.json is not None:  # after every run: a long session keeps what it did
                args.json.write_text(json.dumps({"settings": vars(args) | {"json": str(args.json)},
                                                 "runs": runs}, indent=2))
            print(f"seed {seed} {scheme.label:>14}: mean accuracy "
                  f"{100 * (run['mean_accuracy'] or 0):.1f}% worst "
                  f"{100 * (run['worst_accuracy'] or 0):.1f}% ({run['cpu_seconds']:.0f} s cpu)",
                  file=sys.stderr, flush=True)
    rows = table(runs, [s.label for s in schemes])
    print(f"\n{args.nodes} nodes, digits, Dirichlet({args.skew:g}) label skew, {args.rounds} "
          f"rounds x {args.steps_per_round} steps, {args.seeds} seeds "
          f"({time.perf_counter() - started:.0f} s wall)")
    print(f"{'scheme':>14} | median acc | min-max over seeds | median worst node")
    for r in rows:
        print(f"{r['scheme']:>14} | {100 * r['median']:9.1f}% | "
              f"{100 * r['min']:5.1f}-{100 * r['max']:5.1f}%       | "
              f"{100 * r['median_worst']:5.1f}%")
    if args.json is not None:
        args.json.write_text(json.dumps({"settings": vars(args) | {"json": str(args.json)},
                                         "table": rows, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
