#!/usr/bin/env python3
"""Reproduce the papers' modified-MNIST experiments on scikit-learn's 8x8 digits.

Two experiments, run with the synchronous reference (thesis Algorithm 2):

- ``averaging-level``: 16 nodes, 7 of them with digits 8 and 9 swapped; one
  global model holding 0, 15, 30, 60, 80 or 100 % of each hidden layer (plus the
  whole input and output layers above level 0), for a few mini-batch sizes.
- ``semi-local``: 12 nodes, the six permutations of digits 7, 8, 9, two nodes
  each; schemes none / full / full per permutation group / 80 % global /
  80 % global + 20 % semi-local per group (depending on the global model), and
  the same without the dependency.

Each cell is the mean test accuracy over the nodes after the last round (every
node is tested on the shared test part under its own permutation); the table
shows the median over seeds and, in brackets, the 40th and 60th percentiles
(the 2nd and 3rd quintile boundaries). Runs with the same seed share the data
split, the local initial values and the mini-batch order, so variants are
compared on paired runs; the second table gives the median paired difference
to the no-averaging and full-averaging runs of the same seed.

    python scripts/reproduce_paper.py averaging-level --quick
    python scripts/reproduce_paper.py semi-local --json out.json --plot out.png
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from learner.data import DataSpec, load_node_data
from learner.permutations import last_classes_permutations
from learner.reference import NodeSetup, run_reference
from learner.schemes import averaging_level, semi_local_scheme
from learner.spec import NetworkSpec
from learner.trainer import OPTIMIZERS, TrainConfig

logger = logging.getLogger("reproduce_paper")

LEVELS = ("0", "15", "30", "60", "80", "100")
SCHEMES = ("none", "full", "group", "global80", "global80+semi20", "global80+semi20-nodep")
SCHEME_LABELS = {
    "none": "none (local only)",
    "full": "full (one global model)",
    "group": "full within each group",
    "global80": "80 global",
    "global80+semi20": "80 global + 20 semi-local",
    "global80+semi20-nodep": "80 global + 20 semi-local, no dependency",
}
SPREAD = "40th-60th percentile over seeds (2nd and 3rd quintile boundaries)"


@dataclass(frozen=True)
class Settings:
    """Everything that defines one experiment run (recorded in the JSON output)."""

    experiment: str
    network: str
    activation: str
    variants: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    seeds: tuple[int, ...]
    rounds: int
    steps_per_round: int
    lr: float
    optimizer: str
    test_fraction: float
    samples_per_node: int | None


@dataclass(frozen=True)
class Job:
    settings: Settings
    variant: str
    batch_size: int
    seed: int


def _node_setups(settings: Settings, variant: str, seed: int) -> list[NodeSetup]:
    network = NetworkSpec.parse(settings.network, settings.activation)
    setups: list[NodeSetup] = []
    if settings.experiment == "averaging-level":
        num_nodes, permuted = 16, 7
        perms = ["8:9" if i < permuted else None for i in range(num_nodes)]
        groups = [0] * num_nodes
    else:
        specs = last_classes_permutations(3, network.sizes[-1])
        num_nodes = 2 * len(specs)
        perms = [specs[i // 2] for i in range(num_nodes)]
        groups = [i // 2 for i in range(num_nodes)]
    for i in range(num_nodes):
        data = load_node_data(
            DataSpec(
                task="digits",
                node_index=i,
                num_nodes=num_nodes,
                permutation=perms[i],
                seed=seed,
                test_fraction=settings.test_fraction,
                samples_per_node=settings.samples_per_node,
            )
        )
        if settings.experiment == "averaging-level":
            models = averaging_level(network, float(variant))
        else:
            models = semi_local_scheme(network, variant, groups[i])
        setups.append(NodeSetup(network, tuple(models), data, seed=seed * 1000 + i))
    return setups


def run_job(job: Job) -> tuple[Job, float, list[float]]:
    """One reference run; returns the mean and per-node final test accuracy."""
    s = job.settings
    config = TrainConfig(
        lr=s.lr,
        batch_size=job.batch_size,
        steps_per_round=s.steps_per_round,
        optimizer=s.optimizer,
        seed=job.seed,
    )
    result = run_reference(_node_setups(s, job.variant, job.seed), s.rounds, config,
                           eval_every=s.rounds)
    return job, result.mean_final_accuracy, list(result.final_accuracy)


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)


def run_all(settings: Settings, workers: int, progress: bool = False
            ) -> dict[tuple[str, int], dict[int, float]]:
    """Every (variant, batch size, seed) run, in a pool of `workers` processes."""
    jobs = [Job(settings, v, b, s) for v in settings.variants for b in settings.batch_sizes
            for s in settings.seeds]
    values: dict[tuple[str, int], dict[int, float]] = {}
    started = time.perf_counter()

    def record(done: int, job: Job, mean: float) -> None:
        values.setdefault((job.variant, job.batch_size), {})[job.seed] = mean
        if progress:
            print(f"[{done}/{len(jobs)} {time.perf_counter() - started:.0f}s] {job.variant} "
                  f"batch {job.batch_size} seed {job.seed}: {100 * mean:.1f}%",
                  file=sys.stderr, flush=True)

    if workers <= 1:
        _init_worker()
        for done, (job, mean, _) in enumerate(map(run_job, jobs), 1):
            record(done, job, mean)
        return values
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers, initializer=_init_worker) as pool:
        for done, (job, mean, _) in enumerate(pool.imap_unordered(run_job, jobs), 1):
            record(done, job, mean)
    return values


def _summary(per_seed: dict[int, float]) -> dict[str, object]:
    seeds = sorted(per_seed)
    vals = np.array([per_seed[s] for s in seeds])
    return {
        "median": float(np.median(vals)),
        "p40": float(np.percentile(vals, 40)),
        "p60": float(np.percentile(vals, 60)),
        "min": float(vals.min()),
        "max": float(vals.max()),
        "seeds": seeds,
        "per_seed": [float(v) for v in vals],
    }


def _paired(values: dict[tuple[str, int], dict[int, float]], variant: str, base: str,
            batch: int) -> dict[str, float] | None:
    a, b = values.get((variant, batch)), values.get((base, batch))
    if a is None or b is None:
        return None
    seeds = sorted(set(a) & set(b))
    diff = np.array([a[s] - b[s] for s in seeds])
    return {"median": float(np.median(diff)), "wins": int((diff > 0).sum()), "runs": len(seeds)}


def _label(settings: Settings, variant: str) -> str:
    if settings.experiment == "averaging-level":
        return f"level {variant}"
    return SCHEME_LABELS.get(variant, variant)


def print_tables(settings: Settings, values: dict[tuple[str, int], dict[int, float]]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    title = (f"{settings.experiment}: mean node accuracy, median over {len(settings.seeds)} seeds "
             f"[p40, p60]")
    table = Table(title=title)
    table.add_column("scheme" if settings.experiment == "semi-local" else "averaging level")
    for b in settings.batch_sizes:
        table.add_column(f"batch {b}", justify="right")
    best = {b: max(settings.variants, key=lambda v, b=b: float(np.median(list(
        values[(v, b)].values())))) for b in settings.batch_sizes}
    for v in settings.variants:
        cells = []
        for b in settings.batch_sizes:
            s = _summary(values[(v, b)])
            cell = f"{100 * s['median']:.1f} [{100 * s['p40']:.1f}, {100 * s['p60']:.1f}]"
            cells.append(f"[bold]{cell}[/bold]" if best[b] == v else cell)
        table.add_row(_label(settings, v), *cells)
    console.print(table)

    bases = ("0", "100") if settings.experiment == "averaging-level" else ("none", "full")
    diff_table = Table(title="paired difference (points), median over seeds; wins/runs")
    diff_table.add_column("variant")
    for base in bases:
        for b in settings.batch_sizes:
            diff_table.add_column(f"vs {base} @ {b}", justify="right")
    for v in settings.variants:
        cells = []
        for base in bases:
            for b in settings.batch_sizes:
                d = _paired(values, v, base, b)
                cells.append("-" if d is None or v == base else
                             f"{100 * d['median']:+.1f} ({d['wins']}/{d['runs']})")
        diff_table.add_row(_label(settings, v), *cells)
    console.print(diff_table)
    console.print(f"cells: accuracy in %, median and [{SPREAD}]; bold: best median per column")


def write_json(path: Path, settings: Settings, values: dict[tuple[str, int], dict[int, float]],
               elapsed: float) -> None:
    bases = ("0", "100") if settings.experiment == "averaging-level" else ("none", "full")
    results = []
    for v in settings.variants:
        for b in settings.batch_sizes:
            entry: dict[str, object] = {"variant": v, "label": _label(settings, v),
                                        "batch_size": b, **_summary(values[(v, b)])}
            entry["paired_vs"] = {base: _paired(values, v, base, b) for base in bases}
            results.append(entry)
    payload = {"settings": asdict(settings), "spread": SPREAD, "metric":
               "mean over nodes of final test accuracy (each node on the shared test part under "
               "its own permutation)", "elapsed_seconds": elapsed, "results": results}
    path.write_text(json.dumps(payload, indent=2))


def write_plot(path: Path, settings: Settings,
               values: dict[tuple[str, int], dict[int, float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    if settings.experiment == "averaging-level":
        xs = [float(v) for v in settings.variants]
        for b in settings.batch_sizes:
            sums = [_summary(values[(v, b)]) for v in settings.variants]
            med = np.array([s["median"] for s in sums]) * 100
            lo = med - np.array([s["p40"] for s in sums]) * 100
            hi = np.array([s["p60"] for s in sums]) * 100 - med
            ax.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=3, label=f"batch {b}")
        ax.set_xlabel("averaging level (% of each hidden layer in the global model)")
    else:
        xs = list(settings.batch_sizes)
        for v in settings.variants:
            sums = [_summary(values[(v, b)]) for b in settings.batch_sizes]
            med = np.array([s["median"] for s in sums]) * 100
            lo = med - np.array([s["p40"] for s in sums]) * 100
            hi = np.array([s["p60"] for s in sums]) * 100 - med
            ax.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=3, label=_label(settings, v))
        ax.set_xlabel("mini-batch size")
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_ylabel("accuracy (%), median over seeds, bars p40-p60")
    ax.set_title(f"{settings.experiment} on digits, {settings.network} {settings.activation}, "
                 f"{settings.rounds}x{settings.steps_per_round} steps")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=("averaging-level", "semi-local"))
    parser.add_argument("--quick", action="store_true",
                        help="reduced run (3 seeds, one batch size, fewer rounds)")
    parser.add_argument("--seeds", type=int, help="number of seeds (default 10; quick 3)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, help="averaging rounds (default 200; quick 100)")
    parser.add_argument("--steps-per-round", type=int, default=1,
                        help="mini-batches between averagings (papers: 1)")
    parser.add_argument("--batch-sizes", type=_ints, help="default 8,32; quick 16")
    parser.add_argument("--variants", type=lambda t: tuple(x.strip() for x in t.split(",")),
                        help="levels (averaging-level) or schemes (semi-local) to run")
    parser.add_argument("--network", default="64=48=32=10")
    parser.add_argument("--activation", default="relu", choices=("relu", "sigmoid", "tanh"),
                        help="papers: sigmoid (learns slowly with small batches)")
    parser.add_argument("--lr", type=float, default=0.05, help="papers: 0.1 (plain SGD)")
    parser.add_argument("--optimizer", default="momentum", choices=OPTIMIZERS,
                        help="momentum 0.9 by default (papers: plain sgd)")
    parser.add_argument("--test-fraction", type=float, default=0.2)
    parser.add_argument("--samples-per-node", type=int, default=None)
    parser.add_argument("--workers", type=int, default=2, help="processes (1 thread each)")
    parser.add_argument("--progress", action="store_true", help="one line per run on stderr")
    parser.add_argument("--json", type=Path, help="write figures (median, quintiles, per seed)")
    parser.add_argument("--plot", type=Path, help="write a PNG")
    return parser.parse_args(argv)


def settings_from(args: argparse.Namespace) -> Settings:
    defaults = SCHEMES if args.experiment == "semi-local" else LEVELS
    variants = args.variants or defaults
    for v in variants:
        if v not in defaults:
            raise SystemExit(f"--variants: {v!r} is not one of {', '.join(defaults)}")
    seeds = args.seeds or (3 if args.quick else 10)
    return Settings(
        experiment=args.experiment,
        network=args.network,
        activation=args.activation,
        variants=tuple(variants),
        batch_sizes=args.batch_sizes or ((16,) if args.quick else (8, 32)),
        seeds=tuple(range(args.first_seed, args.first_seed + seeds)),
        rounds=args.rounds or (100 if args.quick else 200),
        steps_per_round=args.steps_per_round,
        lr=args.lr,
        optimizer=args.optimizer,
        test_fraction=args.test_fraction,
        samples_per_node=args.samples_per_node,
    )


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    settings = settings_from(args)
    # validate the network and schemes before spawning workers
    _node_setups(settings, settings.variants[0], settings.seeds[0])
    started = time.perf_counter()
    values = run_all(settings, args.workers, progress=args.progress)
    elapsed = time.perf_counter() - started
    print_tables(settings, values)
    runs = len(settings.variants) * len(settings.batch_sizes) * len(settings.seeds)
    print(f"{runs} runs in {elapsed:.1f} s with {args.workers} worker(s)")
    if args.json:
        write_json(args.json, settings, values, elapsed)
        print(f"wrote {args.json}")
    if args.plot:
        write_plot(args.plot, settings, values)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
