"""Accuracy under differential privacy (DP-SGD) on the synchronous reference.

The papers' averaging-level task: 16 nodes on scikit-learn's digits, 7 of
them with digits 8 and 9 swapped, each training on its own shard of about 90
samples. Two schemes: partial (one global model with 80 % of each hidden
layer, the rest local) and full (one global model holding everything). Each
is run without DP and with DP-SGD at each target epsilon (delta 1e-5): the
noise multiplier is derived (opacus' RDP accountant) so that the planned
steps, rounds x steps per round at sample rate batch / shard size, spend the
target on the node with the smallest shard; every node uses that noise, so
none spends more. Each cell is the mean test accuracy over the nodes after
the last round, as median [min-max] over seeds; a seed fixes the data split,
the initial values, the Poisson batches and the noise, so the rows are paired.

    python scripts/bench/privacy_dp.py                 # 5 seeds, 100 rounds: a few minutes
    python scripts/bench/privacy_dp.py --quick         # 2 seeds, 40 rounds
    python scripts/bench/privacy_dp.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from learner.data import DataSpec, load_node_data
from learner.dp.accounting import noise_multiplier_for
from learner.dp.config import DEFAULT_DELTA, DPConfig
from learner.reference import NodeSetup, run_reference
from learner.schemes import averaging_level
from learner.spec import NetworkSpec
from learner.trainer import OPTIMIZERS, TrainConfig

NODES, PERMUTED = 16, 7
SCHEMES = {"partial": 80.0, "full": 100.0}
SCHEME_LABELS = {"partial": "partial (80 % global)", "full": "one global model"}


@dataclass(frozen=True)
class Settings:
    """One table's settings (recorded in the JSON output)."""

    network: str
    rounds: int
    steps_per_round: int
    batch_size: int
    lr: float
    optimizer: str
    clip_norm: float
    delta: float
    epsilons: tuple[float, ...]
    seeds: tuple[int, ...]


@dataclass(frozen=True)
class Job:
    settings: Settings
    scheme: str
    epsilon: float | None  # None: without DP
    noise_multiplier: float | None
    seed: int


def node_setups(settings: Settings, scheme: str, seed: int) -> list[NodeSetup]:
    """The 16 nodes of the task under ``scheme`` for data seed ``seed``."""
    network = NetworkSpec.parse(settings.network)
    models = tuple(averaging_level(network, SCHEMES[scheme]))
    return [NodeSetup(network, models,
                      load_node_data(DataSpec(task="digits", node_index=i, num_nodes=NODES,
                                              permutation="8:9" if i < PERMUTED else None,
                                              seed=seed)),
                      seed=seed * 1000 + i)
            for i in range(NODES)]


def noise_for(settings: Settings, epsilon: float) -> float:
    """The noise multiplier that spends ``epsilon`` over the run on the smallest shard."""
    smallest = min(len(s.data.train_y) for s in node_setups(settings, "full", settings.seeds[0]))
    rate = min(1.0, settings.batch_size / smallest)
    return noise_multiplier_for(epsilon, settings.delta, rate,
                                settings.rounds * settings.steps_per_round)


def run_job(job: Job) -> tuple[Job, float, float | None]:
    """One reference run: (job, mean final accuracy, largest epsilon spent by a node)."""
    warnings.simplefilter("ignore", UserWarning)  # opacus: "optimal order is the largest alpha"
    s = job.settings
    config = TrainConfig(lr=s.lr, batch_size=s.batch_size, steps_per_round=s.steps_per_round,
                         optimizer=s.optimizer, seed=job.seed)
    dp = None if job.noise_multiplier is None else DPConfig(
        clip_norm=s.clip_norm, noise_multiplier=job.noise_multiplier, delta=s.delta)
    result = run_reference(node_setups(s, job.scheme, job.seed), s.rounds, config,
                           eval_every=s.rounds, dp=dp)
    return job, result.mean_final_accuracy, max(result.epsilon) if result.epsilon else None


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)


Key = tuple[str, float | None]


def run_all(settings: Settings, noise: dict[float, float], workers: int,
            progress: bool) -> tuple[dict[Key, dict[int, float]], dict[Key, float]]:
    """Every (scheme, epsilon, seed) run; accuracies and the largest epsilon spent per cell."""
    jobs = [Job(settings, scheme, eps, None if eps is None else noise[eps], seed)
            for scheme in SCHEMES for eps in (*settings.epsilons, None)
            for seed in settings.seeds]
    accuracy: dict[Key, dict[int, float]] = {}
    spent: dict[Key, float] = {}
    started = time.perf_counter()

    def record(done: int, job: Job, acc: float, eps: float | None) -> None:
        key = (job.scheme, job.epsilon)
        accuracy.setdefault(key, {})[job.seed] = acc
        if eps is not None:
            spent[key] = max(spent.get(key, 0.0), eps)
        if progress:
            print(f"[{done}/{len(jobs)} {time.perf_counter() - started:.0f}s] {job.scheme} "
                  f"epsilon {job.epsilon} seed {job.seed}: {100 * acc:.1f}%", file=sys.stderr,
                  flush=True)

    if workers <= 1:
        _init_worker()
        for done, outcome in enumerate(map(run_job, jobs), 1):
            record(done, *outcome)
    else:
        with multiprocessing.get_context("spawn").Pool(workers, initializer=_init_worker) as pool:
            for done, outcome in enumerate(pool.imap_unordered(run_job, jobs), 1):
                record(done, *outcome)
    return accuracy, spent


def cell(per_seed: dict[int, float]) -> dict[str, Any]:
    values = np.array([per_seed[s] for s in sorted(per_seed)])
    return {"median": float(np.median(values)), "min": float(values.min()),
            "max": float(values.max()), "per_seed": [float(v) for v in values]}


def fmt(c: dict[str, Any]) -> str:
    return f"{100 * c['median']:.1f} [{100 * c['min']:.1f}-{100 * c['max']:.1f}]"


def table(settings: Settings, noise: dict[float, float],
          accuracy: dict[Key, dict[int, float]], spent: dict[Key, float]) -> list[dict[str, Any]]:
    rows = []
    for eps in (*settings.epsilons, None):
        row: dict[str, Any] = {
            "epsilon": eps, "delta": settings.delta if eps is not None else None,
            "noise_multiplier": noise.get(eps) if eps is not None else None,
            "clip_norm": settings.clip_norm if eps is not None else None,
            "epsilon_spent_max": max((spent.get((s, eps), 0.0) for s in SCHEMES), default=None)
            if eps is not None else None}
        for scheme in SCHEMES:
            row[scheme] = cell(accuracy[(scheme, eps)])
        rows.append(row)
    return rows


def print_table(settings: Settings, rows: list[dict[str, Any]]) -> None:
    print(f"16-node digits, {settings.rounds} rounds x {settings.steps_per_round} step(s), "
          f"expected batch {settings.batch_size}, {settings.optimizer} lr {settings.lr}; "
          f"test accuracy % (mean over nodes), median [min-max] over {len(settings.seeds)} "
          "seeds")
    head = (f"| epsilon (delta {settings.delta:g}) | noise multiplier | clip norm | "
            + " | ".join(SCHEME_LABELS[s] for s in SCHEMES) + " | largest epsilon spent |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        eps = "no DP" if r["epsilon"] is None else f"{r['epsilon']:g}"
        sigma = "-" if r["noise_multiplier"] is None else f"{r['noise_multiplier']:.3g}"
        clip = "-" if r["clip_norm"] is None else f"{r['clip_norm']:g}"
        reached = "-" if r["epsilon_spent_max"] is None else f"{r['epsilon_spent_max']:.3f}"
        print(f"| {eps} | {sigma} | {clip} | "
              + " | ".join(fmt(r[s]) for s in SCHEMES) + f" | {reached} |")


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}"
                                         ) from exc
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected numbers > 0, got {text!r}")
    return values


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="2 seeds, 40 rounds")
    p.add_argument("--seeds", type=int, help="number of seeds (default 5; quick 2)")
    p.add_argument("--rounds", type=int, help="rounds of one step each (default 100; quick 40)")
    p.add_argument("--epsilons", type=_floats, default=(1.0, 4.0, 8.0),
                   help="target epsilons (default 1,4,8)")
    p.add_argument("--delta", type=float, default=DEFAULT_DELTA)
    p.add_argument("--clip", type=float, default=1.0, help="clip norm (default 1)")
    p.add_argument("--batch-size", type=int, default=16, help="expected batch (default 16)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="momentum")
    p.add_argument("--workers", type=int, default=2, help="processes (1 thread each)")
    p.add_argument("--progress", action="store_true", help="one line per run on stderr")
    p.add_argument("--json", type=Path, metavar="PATH", help="write the table as JSON")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    warnings.simplefilter("ignore", UserWarning)
    seeds = args.seeds or (2 if args.quick else 5)
    settings = Settings(network="64=48=32=10", rounds=args.rounds or (40 if args.quick else 100),
                        steps_per_round=1, batch_size=args.batch_size, lr=args.lr,
                        optimizer=args.optimizer, clip_norm=args.clip, delta=args.delta,
                        epsilons=args.epsilons, seeds=tuple(range(seeds)))
    started = time.perf_counter()
    noise = {eps: noise_for(settings, eps) for eps in settings.epsilons}
    accuracy, spent = run_all(settings, noise, args.workers, args.progress)
    rows = table(settings, noise, accuracy, spent)
    print_table(settings, rows)
    elapsed = time.perf_counter() - started
    print(f"{len(SCHEMES) * (len(settings.epsilons) + 1) * seeds} runs in {elapsed:.0f} s with "
          f"{args.workers} worker(s)")
    if args.json:
        args.json.write_text(json.dumps({"settings": settings.__dict__, "rows": rows,
                                         "seconds": elapsed}, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
