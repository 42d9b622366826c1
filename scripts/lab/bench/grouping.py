"""Automatic groups, centrally: AUCCCR with its calibration against the sklearn baselines.

No daemons: each case pre-trains 12 digits nodes in process (as the synchronous
reference does), projects every network on the public split (the benchmark
set every node holds; never the test part), then groups the projections with

- ``aucccr``: :func:`learner.grouping.find_groups` (calibration + Algorithm 8/6);
- ``aucccr-atomic``: the same with the atomic variant;
- ``common-cap``: the calibrated scale with one size cap for every node (the
  thesis' v = min(sqrt s, sqrt cap)) instead of each node's own;
- ``thesis``: the thesis' fixed settings of ch. 5 (n(x) = 1/(1+15x), v = sqrt x);
- ``kmeans``: k-means with k in 2..m-1 chosen by the silhouette score;
- ``optics``: OPTICS (min_samples 2; its noise points stay alone).

Cases (12 nodes each):

- ``pairs/local``: the six permutations of 7-9 (id, 8:9, 7:8, 7:8:9, 7:9:8, 7:9),
  two nodes each; pre-training regime (a): every node trains its whole network alone;
- ``pairs/global80``: the same nodes, regime (b): 80 % of the hidden neurons
  averaged over all nodes each round (the daemons' global model), 20 % local;
- ``same-task``: every node on the plain task (no permutation), regime (b);
- ``unequal``: groups of 4, 4, 2, 1, 1 (id x4, 8:9 x4, 7:8 x2, 7:8:9, 7:9:8), regime (b).

Per case and seed: exact groups (yes/no), identification and differentiation
rates, the share of losing nodes and the global utility (both under the
calibrated utility, for every method), then the case's summary. Everyone alone
on ``same-task`` is the expected answer (no false groups).

    .venv/bin/python scripts/bench/grouping.py [--seeds 5] [--rounds 60]
        [--public-size 200] [--workers 2] [--cases pairs/local,pairs/global80,...] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from learner.data import DataSpec, load_node_data
from learner.grouping import Grouping, GroupingParams, find_groups, grouping_from_labels
from learner.grouping.aucccr import aucccr
from learner.grouping.calibration import calibrate
from learner.grouping.metrics import global_utility, losing_share, pair_rates
from learner.schemes import averaging_level
from learner.spec import NetworkSpec
from learner.train_config import TrainConfig

SIX = ("id", "8:9", "7:8", "7:8:9", "7:9:8", "7:9")
CASES: dict[str, tuple[tuple[str, ...], float]] = {
    "pairs/local": (tuple(SIX[i // 2] for i in range(12)), 0.0),
    "pairs/global80": (tuple(SIX[i // 2] for i in range(12)), 80.0),
    "same-task": (("id",) * 12, 80.0),
    "unequal": (("id",) * 4 + ("8:9",) * 4 + ("7:8",) * 2 + ("7:8:9", "7:9:8"), 80.0),
}
METHODS = ("aucccr", "aucccr-atomic", "common-cap", "thesis", "kmeans", "optics")
#: the thesis' chapter 5 settings: n(x) = 1 / (1 + 15 x) and v = sqrt, no cap
THESIS = GroupingParams(scale=1 / 15, size_cap=1_000_000)
NETWORK = "64=48=32=10"


@dataclass(frozen=True)
class Job:
    case: str
    seed: int
    rounds: int
    public_size: int
    keep_projections: bool = False


def pretrain(job: Job) -> tuple[np.ndarray, list[float]]:
    """Each node's projection after `job.rounds` rounds, and its test accuracy."""
    import torch

    from learner.grouping.projection import project_network
    from learner.layout import ModelLayout
    from learner.network import PartialNetwork
    from learner.reference import average_shared_models
    from learner.trainer import Trainer, evaluate_model

    torch.set_num_threads(1)
    perms, level = CASES[job.case]
    network = NetworkSpec.parse(NETWORK)
    models = averaging_level(network, level)
    nets, layouts, trainers, datas = [], [], [], []
    for i, perm in enumerate(perms):
        data = load_node_data(DataSpec(task="digits", node_index=i, num_nodes=len(perms),
                                       permutation=perm, seed=job.seed,
                                       public_size=job.public_size))
        layout = ModelLayout(network, models)
        net = PartialNetwork(layout, job.seed * 1000 + i)
        train_seed = int(np.random.SeedSequence([job.seed, i]).generate_state(1)[0])
        config = TrainConfig(lr=0.1, batch_size=16, steps_per_round=10, seed=train_seed)
        nets.append(net)
        layouts.append(layout)
        datas.append(data)
        trainers.append(Trainer(net, data.train_x, data.train_y, config))
    for _ in range(job.rounds):
        for trainer in trainers:
            trainer.train_round()
        if level:
            average_shared_models(nets, layouts)
    points = np.stack([project_network(n, d.public_x, d.public_y, 10) for n, d in zip(nets, datas, strict=True)])
    accuracy = [evaluate_model(n, d.test_x, d.test_y).accuracy for n, d in zip(nets, datas, strict=True)]
    return points, accuracy


def kmeans_silhouette(points: np.ndarray, seed: int) -> np.ndarray:
    """k-means with k in 2..m-1 chosen by the silhouette score (labels, no one alone)."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    best, best_score = np.zeros(len(points), dtype=np.int64), -np.inf
    for k in range(2, len(points)):
        labels = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(points)
        if len(set(labels.tolist())) < 2:
            continue
        score = float(silhouette_score(points, labels))
        if score > best_score:
            best, best_score = labels.astype(np.int64), score
    return best


def optics(points: np.ndarray) -> np.ndarray:
    """OPTICS with min_samples 2 (sklearn's least); its noise (-1) stays alone."""
    from sklearn.cluster import OPTICS

    return np.asarray(OPTICS(min_samples=2).fit(points).labels_, dtype=np.int64)


def evaluate(job: Job) -> dict[str, Any]:
    started = time.perf_counter()
    points, accuracy = pretrain(job)
    trained = time.perf_counter() - started
    perms, _ = CASES[job.case]
    ids = [bytes([i + 1]) for i in range(len(perms))]
    projections = dict(zip(ids, points, strict=True))
    truth = [[ids[i] for i, p in enumerate(perms) if p == perm] for perm in dict.fromkeys(perms)]
    calibration = calibrate(points)
    params: GroupingParams = calibration.params
    common = GroupingParams(params.scale, params.size_cap, params.size_exponent)

    def fixed(utility: GroupingParams) -> np.ndarray:
        if utility.size_cap < 2:
            return np.full(len(points), -1)
        return aucccr(points, utility.utility, np.random.default_rng(job.seed)).labels

    found: dict[str, Grouping] = {
        "aucccr": find_groups(projections, seed=job.seed),
        "aucccr-atomic": find_groups(projections, seed=job.seed, atomic=True),
        "common-cap": grouping_from_labels(ids, fixed(common), params, job.seed),
        "thesis": grouping_from_labels(ids, fixed(THESIS), params, job.seed),
        "kmeans": grouping_from_labels(ids, kmeans_silhouette(points, job.seed), params, job.seed),
        "optics": grouping_from_labels(ids, optics(points), params, job.seed),
    }
    methods = {}
    for name, grouping in found.items():
        groups = [list(g) for g in grouping.groups]
        identification, differentiation = pair_rates(groups, truth)
        exact = sorted(map(sorted, groups)) == sorted(map(sorted, truth))
        methods[name] = {
            "exact": exact,
            "identification": identification,
            "differentiation": differentiation,
            "losing_share": losing_share(grouping, projections),
            "global_utility": global_utility(grouping, projections),
            "sizes": sorted((len(g) for g in grouping.groups if len(g) > 1), reverse=True),
        }
    extra = {"projections": points.tolist()} if job.keep_projections else {}
    return extra | {"case": job.case, "seed": job.seed, "rounds": job.rounds,
            "pretrain_seconds": trained, "mean_accuracy": float(np.mean(accuracy)),
            "calibration": {"structured": calibration.structured, "scale": params.scale,
                            "size_cap": params.size_cap, "near": calibration.near_below,
                            "far": calibration.far_above, "gap_score": calibration.gap_score,
                            "reason": calibration.reason},
            "methods": methods}


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = {}
    for case in dict.fromkeys(r["case"] for r in rows):
        mine = [r for r in rows if r["case"] == case]
        out[case] = {}
        for method in METHODS:
            values = [r["methods"][method] for r in mine]
            out[case][method] = {
                "exact_seeds": sum(v["exact"] for v in values),
                "seeds": len(values),
                "identification": statistics.fmean(v["identification"] for v in values),
                "differentiation": statistics.fmean(v["differentiation"] for v in values),
                "losing_share": statistics.fmean(v["losing_share"] for v in values),
                "global_utility": statistics.fmean(v["global_utility"] for v in values),
            }
    return out


def render(rows: Sequence[dict[str, Any]], summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for case, per_method in summary.items():
        table = Table(title=f"{case} ({CASES[case][1]:.0f} % global pre-training, "
                            f"{rows[0]['rounds']} rounds)")
        for column in ("method", "seed", "exact", "ident.", "diff.", "losing", "utility", "groups"):
            table.add_column(column, justify="left" if column in ("method", "groups") else "right")
        for method in METHODS:
            for r in (r for r in rows if r["case"] == case):
                v = r["methods"][method]
                table.add_row(method, str(r["seed"]), "yes" if v["exact"] else "no",
                              f"{v['identification']:.2f}", f"{v['differentiation']:.2f}",
                              f"{v['losing_share']:.2f}", f"{v['global_utility']:.2f}",
                              " ".join(map(str, v["sizes"])) or "all alone")
            s = per_method[method]
            table.add_row(f"[b]{method}[/b]", "mean", f"{s['exact_seeds']}/{s['seeds']}",
                          f"{s['identification']:.2f}", f"{s['differentiation']:.2f}",
                          f"{s['losing_share']:.2f}", f"{s['global_utility']:.2f}", "",
                          end_section=True)
        console.print(table)
        for r in (r for r in rows if r["case"] == case):
            console.print(f"  seed {r['seed']}: accuracy {100 * r['mean_accuracy']:.1f} %, "
                          f"{r['calibration']['reason']}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (default 5)")
    p.add_argument("--rounds", type=int, default=60,
                   help="pre-training rounds of 10 mini-batches of 16 (default 60)")
    p.add_argument("--public-size", type=int, default=200,
                   help="samples in the public split, the benchmark set (default 200)")
    p.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    p.add_argument("--cases", default=",".join(CASES),
                   help=f"comma-separated among {', '.join(CASES)} (default all)")
    p.add_argument("--json", type=Path, help="write the rows and the summary here")
    p.add_argument("--keep-projections", action="store_true",
                   help="also write every node's projection in the JSON rows")
    args = p.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)}; expected among {', '.join(CASES)}")
    if args.seeds < 1 or args.rounds < 1 or args.workers < 1:
        p.error("--seeds, --rounds and --workers must be >= 1")
    jobs = [Job(c, s, args.rounds, args.public_size, args.keep_projections)
            for c in cases for s in range(args.seeds)]
    started = time.perf_counter()
    if args.workers == 1:
        rows = [evaluate(j) for j in jobs]
    else:
        with ProcessPoolExecutor(args.workers) as pool:
            rows = list(pool.map(evaluate, jobs))
    summary = summarize(rows)
    render(rows, summary)
    print(f"{len(jobs)} pre-trainings in {time.perf_counter() - started:.0f} s "
          f"({args.workers} workers)")
    if args.json:
        args.json.write_text(json.dumps({"settings": vars(args) | {"json": str(args.json)},
                                         "rows": rows, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
