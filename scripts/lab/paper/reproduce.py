"""Reproduce the papers' modified-MNIST experiments with the synchronous reference.

Three experiments (thesis ch. 3 V.3.a, V.3.d, V.3.e), run with the synchronous
reference (thesis Algorithm 2: every round each node trains one mini-batch,
then every shared model is replaced by its holders' exact average):

- ``averaging-level``: 16 nodes, 7 of them with digits 8 and 9 swapped; one
  global model holding 0, 15, 30, 60, 80 or 100 % of each hidden layer (plus the
  whole input and output layers above level 0), for a few mini-batch sizes.
- ``semi-local``: 12 nodes, the six permutations of digits 7, 8, 9, two nodes
  each; schemes none / full / full per permutation group / 80 % global /
  80 % global + 20 % semi-local per group (depending on the global model), and
  the same without the dependency.
- ``semi-local-local``: 4 nodes; nodes 2 and 3 have 8 and 9 swapped, node 3
  also 6 and 7; schemes none / full / full per pair (0, 1), (2, 3) / 80 %
  global / 70 % global + a semi-local model per pair (30 % for the identical
  pair, 15 % for the other, whose last 15 % stay local), with and without the
  dependency on the global model.

``--task`` picks the data (``digits``: scikit-learn's 8x8 digits; ``mnist5k``:
5,000 MNIST images) and ``--network`` the network: a notation such as
``784=300=100=10`` or ``1x28x28=c16k5=pool2=c32k5=pool2=100=10``, or a name the
task knows (``mlp``; ``cnn`` for image tasks). Convolution channels are neurons,
so the percentages apply to them too.

Each cell is the mean test accuracy over the nodes after the last round (every
node is tested on the shared test part under its own permutation); the table
shows the median over seeds and, in brackets, the 40th and 60th percentiles
(the 2nd and 3rd quintile boundaries). Runs with the same seed share the data
split, the local initial values and the mini-batch order, so variants are
compared on paired runs; the second table gives the median paired difference
to the two reference variants (no averaging and full averaging) of the same seed.

    python scripts/paper/reproduce.py averaging-level --quick
    python scripts/paper/reproduce.py averaging-level --task mnist5k --network cnn --quick --json
    python scripts/paper/reproduce.py semi-local --json out.json --plot out.png

The other collaboration schemes of the papers (docs/guide/strategies.md) have their
own experiment scripts, run through this one as well; the arguments after the
name go to that script (``--help`` lists them):

    python scripts/paper/reproduce.py fedcurv --seeds 0,1,2,3,4
    python scripts/paper/reproduce.py graph --help
    python scripts/paper/reproduce.py fedlinked --help
    python scripts/paper/reproduce.py associative --help
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import logging
import multiprocessing
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from learner.augment import check_shift
from learner.data import DataSpec, load_node_data
from learner.data_errors import DataError
from learner.permutations import last_classes_permutations
from learner.reference import NodeSetup, run_reference
from learner.schemes import (
    FOUR_NODE_GROUPS,
    averaging_level,
    semi_local_local_scheme,
    semi_local_scheme,
)
from learner.spec import NetworkSpec, PartialModelSpec, SpecError
from learner.tasks import TASKS, resolve_network
from learner.trainer import OPTIMIZERS, TrainConfig

logger = logging.getLogger("reproduce_paper")

EXPERIMENTS = ("averaging-level", "semi-local", "semi-local-local")
#: Experiment name -> the script (beside this one) that runs it: the schemes of
#: docs/guide/strategies.md, each measured by its own script with its own options.
SCHEME_EXPERIMENTS = {
    "fedcurv": "lab.paper.fedcurv",
    "graph": "lab.paper.graph",
    "fedlinked": "lab.paper.fedlinked",
    "associative": "lab.paper.associative",
}
LEVELS = ("0", "15", "30", "60", "80", "100")
QUICK_LEVELS = ("0", "80", "100")
SCHEMES = ("none", "full", "group", "global80", "global80+semi20", "global80+semi20-nodep")
FOUR_NODE_SCHEMES = ("none", "full", "group", "global80", "global70+semi", "global70+semi-nodep")
VARIANTS = {"averaging-level": LEVELS, "semi-local": SCHEMES,
            "semi-local-local": FOUR_NODE_SCHEMES}
#: the two reference variants every other one is compared with
BASES = {"averaging-level": ("0", "100"), "semi-local": ("none", "full"),
         "semi-local-local": ("none", "full")}
SCHEME_LABELS = {
    "none": "none (local only)",
    "full": "full (one global model)",
    "group": "full within each group",
    "global80": "80 global",
    "global80+semi20": "80 global + 20 semi-local",
    "global80+semi20-nodep": "80 global + 20 semi-local, no dependency",
    "global70+semi": "70 global + 30/15 semi-local per pair",
    "global70+semi-nodep": "70 global + 30/15 semi-local per pair, no dependency",
}
SPREAD = "40th-60th percentile over seeds (2nd and 3rd quintile boundaries)"


@dataclass(frozen=True)
class TaskDefaults:
    """Per-task defaults of the run length and mini-batch sizes."""

    rounds: int
    quick_rounds: int
    batch_sizes: tuple[int, ...]
    quick_batch_sizes: tuple[int, ...]


TASK_DEFAULTS = {
    "digits": TaskDefaults(200, 100, (8, 32), (16,)),
    "mnist5k": TaskDefaults(300, 150, (32,), (32,)),
}
_OTHER_TASKS = TaskDefaults(200, 100, (16, 64), (32,))


@dataclass(frozen=True)
class Settings:
    """Everything that defines one experiment run (recorded in the JSON output)."""

    experiment: str
    task: str
    network: str
    activation: str
    variants: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    seeds: tuple[int, ...]
    rounds: int
    steps_per_round: int
    lr: float
    optimizer: str
    shift: int
    test_fraction: float
    samples_per_node: int | None
    public_size: int
    eval_every: int


@dataclass(frozen=True)
class Job:
    settings: Settings
    variant: str
    batch_size: int
    seed: int


@dataclass(frozen=True)
class Outcome:
    """One run: the mean over nodes after the last round, and along the way."""

    mean: float
    per_node: list[float]
    curve_rounds: list[int]
    curve: list[float]


def node_plan(experiment: str, num_classes: int) -> tuple[list[str | None], list[int]]:
    """Each node's label permutation and group, for `experiment`."""
    if experiment == "averaging-level":
        num_nodes, permuted = 16, 7
        return ["8:9" if i < permuted else None for i in range(num_nodes)], [0] * num_nodes
    if experiment == "semi-local":
        specs = last_classes_permutations(3, num_classes)
        return [specs[i // 2] for i in range(2 * len(specs))], [i // 2 for i in range(12)]
    return [None, None, "8:9", "8:9,6:7"], list(FOUR_NODE_GROUPS)


def node_models(settings: Settings, network: NetworkSpec, variant: str, node: int,
                group: int) -> list[PartialModelSpec]:
    """The partial models node `node` declares under `variant`."""
    if settings.experiment == "averaging-level":
        return averaging_level(network, float(variant))
    if settings.experiment == "semi-local":
        return semi_local_scheme(network, variant, group)
    return semi_local_local_scheme(network, variant, node)


def _node_setups(settings: Settings, variant: str, seed: int) -> list[NodeSetup]:
    network = NetworkSpec.parse(settings.network, settings.activation)
    perms, groups = node_plan(settings.experiment, network.sizes[-1])
    setups: list[NodeSetup] = []
    for i, (perm, group) in enumerate(zip(perms, groups, strict=True)):
        data = load_node_data(
            DataSpec(
                task=settings.task,
                node_index=i,
                num_nodes=len(perms),
                permutation=perm,
                seed=seed,
                test_fraction=settings.test_fraction,
                samples_per_node=settings.samples_per_node,
                public_size=settings.public_size,
            )
        )
        models = node_models(settings, network, variant, i, group)
        setups.append(NodeSetup(network, tuple(models), data, seed=seed * 1000 + i))
    return setups


def run_job(job: Job) -> tuple[Job, Outcome]:
    """One reference run."""
    s = job.settings
    config = TrainConfig(
        lr=s.lr,
        batch_size=job.batch_size,
        steps_per_round=s.steps_per_round,
        optimizer=s.optimizer,
        shift=s.shift,
        seed=job.seed,
    )
    result = run_reference(_node_setups(s, job.variant, job.seed), s.rounds, config,
                           eval_every=s.eval_every or s.rounds)
    return job, Outcome(result.mean_final_accuracy, list(result.final_accuracy),
                        list(result.eval_rounds), list(result.mean_accuracy))


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)


Values = dict[tuple[str, int], dict[int, Outcome]]


def run_all(settings: Settings, workers: int, progress: bool = False) -> Values:
    """Every (variant, batch size, seed) run, in a pool of `workers` processes."""
    jobs = [Job(settings, v, b, s) for v in settings.variants for b in settings.batch_sizes
            for s in settings.seeds]
    values: Values = {}
    started = time.perf_counter()

    def record(done: int, job: Job, outcome: Outcome) -> None:
        values.setdefault((job.variant, job.batch_size), {})[job.seed] = outcome
        if progress:
            print(f"[{done}/{len(jobs)} {time.perf_counter() - started:.0f}s] {job.variant} "
                  f"batch {job.batch_size} seed {job.seed}: {100 * outcome.mean:.1f}%",
                  file=sys.stderr, flush=True)

    if workers <= 1:
        _init_worker()
        for done, (job, outcome) in enumerate(map(run_job, jobs), 1):
            record(done, job, outcome)
        return values
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers, initializer=_init_worker) as pool:
        for done, (job, outcome) in enumerate(pool.imap_unordered(run_job, jobs), 1):
            record(done, job, outcome)
    return values


def _summary(per_seed: dict[int, Outcome]) -> dict[str, Any]:
    seeds = sorted(per_seed)
    vals = np.array([per_seed[s].mean for s in seeds])
    out: dict[str, Any] = {
        "median": float(np.median(vals)),
        "p40": float(np.percentile(vals, 40)),
        "p60": float(np.percentile(vals, 60)),
        "min": float(vals.min()),
        "max": float(vals.max()),
        "seeds": seeds,
        "per_seed": [float(v) for v in vals],
    }
    first = per_seed[seeds[0]]
    if len(first.curve) > 1:
        curves = np.array([per_seed[s].curve for s in seeds])
        out["curve_rounds"] = first.curve_rounds
        out["curve_median"] = [float(v) for v in np.median(curves, axis=0)]
    return out


def _median_at(values: Values, batch: int, variant: str) -> float:
    """Median over seeds of one cell."""
    return float(np.median([o.mean for o in values[(variant, batch)].values()]))


def _paired(values: Values, variant: str, base: str, batch: int) -> dict[str, float] | None:
    a, b = values.get((variant, batch)), values.get((base, batch))
    if a is None or b is None:
        return None
    seeds = sorted(set(a) & set(b))
    diff = np.array([a[s].mean - b[s].mean for s in seeds])
    return {"median": float(np.median(diff)), "wins": int((diff > 0).sum()), "runs": len(seeds)}


def _label(settings: Settings, variant: str) -> str:
    if settings.experiment == "averaging-level":
        return f"level {variant}"
    return SCHEME_LABELS.get(variant, variant)


def rounds_to(curve_rounds: Sequence[int], curve: Sequence[float], target: float) -> int | None:
    """First evaluated round at which `curve` reaches `target` (None: never)."""
    for r, value in zip(curve_rounds, curve, strict=True):
        if value >= target:
            return int(r)
    return None


def checks(settings: Settings, values: Values) -> list[dict[str, Any]]:
    """For averaging-level: does level 80 beat both ends, and by more than the spread?

    The spread of a cell is its p60 - p40; a margin counts as beyond the spread
    when it exceeds the larger spread of the two cells compared.
    """
    if settings.experiment != "averaging-level" or "80" not in settings.variants:
        return []
    out = []
    for b in settings.batch_sizes:
        mid = _summary(values[("80", b)])
        entry: dict[str, Any] = {"batch_size": b, "level80_median": mid["median"]}
        for end in ("0", "100"):
            if (end, b) not in values:
                continue
            other = _summary(values[(end, b)])
            margin = mid["median"] - other["median"]
            spread = max(mid["p60"] - mid["p40"], other["p60"] - other["p40"])
            entry[f"vs_{end}"] = {"margin": margin, "above": margin > 0,
                                  "beyond_spread": margin > spread, "spread": spread,
                                  "paired": _paired(values, "80", end, b)}
        out.append(entry)
    return out


def print_tables(settings: Settings, values: Values, *, stderr: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=stderr)
    title = (f"{settings.experiment} on {settings.task}, {settings.network}: mean node "
             f"accuracy, median over {len(settings.seeds)} seeds [p40, p60]")
    table = Table(title=title)
    table.add_column("averaging level" if settings.experiment == "averaging-level" else "scheme")
    for b in settings.batch_sizes:
        table.add_column(f"batch {b}", justify="right")
    best = {b: max(settings.variants, key=functools.partial(_median_at, values, b))
            for b in settings.batch_sizes}
    for v in settings.variants:
        cells = []
        for b in settings.batch_sizes:
            s = _summary(values[(v, b)])
            cell = f"{100 * s['median']:.1f} [{100 * s['p40']:.1f}, {100 * s['p60']:.1f}]"
            cells.append(f"[bold]{cell}[/bold]" if best[b] == v else cell)
        table.add_row(_label(settings, v), *cells)
    console.print(table)

    bases = BASES[settings.experiment]
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
    for entry in checks(settings, values):
        parts = []
        for end in ("0", "100"):
            c = entry.get(f"vs_{end}")
            if c is not None:
                verdict = ("beyond the spread" if c["beyond_spread"] else
                           "above, within the spread" if c["above"] else "NOT above")
                parts.append(f"vs level {end}: {100 * c['margin']:+.1f} points ({verdict})")
        console.print(f"level 80 @ batch {entry['batch_size']}: " + "; ".join(parts))
    console.print(f"cells: accuracy in %, median and [{SPREAD}]; bold: best median per column")


def payload(settings: Settings, values: Values, elapsed: float) -> dict[str, Any]:
    """Everything the JSON output holds."""
    bases = BASES[settings.experiment]
    results = []
    for v in settings.variants:
        for b in settings.batch_sizes:
            entry: dict[str, Any] = {"variant": v, "label": _label(settings, v),
                                     "batch_size": b, **_summary(values[(v, b)])}
            entry["paired_vs"] = {base: _paired(values, v, base, b) for base in bases}
            results.append(entry)
    return {"settings": asdict(settings), "spread": SPREAD, "metric":
            "mean over nodes of final test accuracy (each node on the shared test part under "
            "its own permutation)", "elapsed_seconds": elapsed, "results": results,
            "checks": checks(settings, values)}


def write_plot(path: Path, settings: Settings, values: Values) -> None:
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
    ax.set_title(f"{settings.experiment} on {settings.task}, {settings.network} "
                 f"{settings.activation}, {settings.rounds}x{settings.steps_per_round} steps",
                 fontsize=9)
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
    parser.add_argument("experiment", choices=EXPERIMENTS,
                        help="the experiment (or, with their own options: "
                             + ", ".join(SCHEME_EXPERIMENTS) + ")")
    parser.add_argument("--task", default="digits", choices=TASKS,
                        help="data task (default digits; mnist5k: the bundled MNIST sample)")
    parser.add_argument("--network", default=None,
                        help='notation ("784=300=100=10", "1x28x28=c16k5=pool2=c32k5=pool2='
                             '100=10") or a name the task knows ("mlp", "cnn"); default: mlp')
    parser.add_argument("--quick", action="store_true",
                        help="reduced run (3 seeds, one batch size, fewer rounds; "
                             "averaging-level runs levels 0, 80 and 100 only)")
    parser.add_argument("--seeds", type=int, help="number of seeds (default 10; quick 3)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--rounds", type=int,
                        help="averaging rounds (digits 200, quick 100; mnist5k 300, quick 150)")
    parser.add_argument("--steps-per-round", type=int, default=1,
                        help="mini-batches between averagings (papers: 1)")
    parser.add_argument("--batch-sizes", type=_ints,
                        help="digits 8,32 (quick 16); mnist5k 32")
    parser.add_argument("--variants", type=lambda t: tuple(x.strip() for x in t.split(",")),
                        help="levels (averaging-level) or schemes to run")
    parser.add_argument("--activation", default="relu", choices=("relu", "sigmoid", "tanh"),
                        help="papers: sigmoid (learns slowly with small batches)")
    parser.add_argument("--lr", type=float, default=0.05, help="papers: 0.1 (plain SGD)")
    parser.add_argument("--optimizer", default="momentum", choices=OPTIMIZERS,
                        help="momentum 0.9 by default (papers: plain sgd)")
    parser.add_argument("--shift", type=int, default=0,
                        help="move each training image by up to N pixels (networks on images; "
                             "default 0: no augmentation)")
    parser.add_argument("--test-fraction", type=float, default=0.2)
    parser.add_argument("--samples-per-node", type=int, default=None)
    parser.add_argument("--public-size", type=int, default=0,
                        help="samples carved as the task's public split (default 0: the "
                             "experiments do not use it, so the shards keep them)")
    parser.add_argument("--eval-every", type=int, default=0,
                        help="also test every N rounds (the JSON gets the median curve)")
    parser.add_argument("--target", type=float, default=0.95,
                        help="with --eval-every: report the first round the median curve "
                             "reaches this mean accuracy (default 0.95)")
    parser.add_argument("--workers", type=int, default=2, help="processes (1 thread each)")
    parser.add_argument("--progress", action="store_true", help="one line per run on stderr")
    parser.add_argument("--json", nargs="?", const="-", metavar="PATH",
                        help="write figures (median, quintiles, per seed) to PATH, or to "
                             "stdout without PATH (the tables then go to stderr)")
    parser.add_argument("--plot", type=Path, help="write a PNG")
    return parser.parse_args(argv)


def settings_from(args: argparse.Namespace) -> Settings:
    defaults = VARIANTS[args.experiment]
    if args.variants:
        variants = args.variants
    elif args.quick and args.experiment == "averaging-level":
        variants = QUICK_LEVELS
    else:
        variants = defaults
    for v in variants:
        if v not in defaults:
            raise SystemExit(f"--variants: {v!r} is not one of {', '.join(defaults)}")
    try:
        network = resolve_network(args.task, args.network)
        spec = NetworkSpec.parse(network, args.activation)
    except (DataError, SpecError) as exc:
        raise SystemExit(f"--network: {exc}") from None
    try:
        check_shift(args.shift, spec.input_image)
    except ValueError as exc:
        raise SystemExit(f"--shift: {exc}") from None
    task = TASK_DEFAULTS.get(args.task, _OTHER_TASKS)
    seeds = args.seeds or (3 if args.quick else 10)
    return Settings(
        experiment=args.experiment,
        task=args.task,
        network=network,
        activation=args.activation,
        variants=tuple(variants),
        batch_sizes=args.batch_sizes or (task.quick_batch_sizes if args.quick
                                         else task.batch_sizes),
        seeds=tuple(range(args.first_seed, args.first_seed + seeds)),
        rounds=args.rounds or (task.quick_rounds if args.quick else task.rounds),
        steps_per_round=args.steps_per_round,
        lr=args.lr,
        optimizer=args.optimizer,
        shift=args.shift,
        test_fraction=args.test_fraction,
        samples_per_node=args.samples_per_node,
        public_size=args.public_size,
        eval_every=args.eval_every,
    )


def run_scheme_experiment(name: str, argv: Sequence[str]) -> int:
    """Run the experiment of scheme ``name`` with ``argv``; its exit status."""
    module = importlib.import_module(SCHEME_EXPERIMENTS[name])
    return int(module.main(list(argv)))


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] in SCHEME_EXPERIMENTS:
        return run_scheme_experiment(arguments[0], arguments[1:])
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    settings = settings_from(args)
    # validate the network, data and schemes before spawning workers
    try:
        _node_setups(settings, settings.variants[0], settings.seeds[0])
    except (DataError, SpecError) as exc:
        raise SystemExit(f"cannot set the experiment up: {exc}") from None
    to_stdout = args.json == "-"
    started = time.perf_counter()
    values = run_all(settings, args.workers, progress=args.progress)
    elapsed = time.perf_counter() - started
    print_tables(settings, values, stderr=to_stdout)
    info = sys.stderr if to_stdout else sys.stdout
    runs = len(settings.variants) * len(settings.batch_sizes) * len(settings.seeds)
    print(f"{runs} runs in {elapsed:.1f} s with {args.workers} worker(s)", file=info)
    doc = payload(settings, values, elapsed)
    if settings.eval_every:
        for entry in doc["results"]:
            if "curve_median" in entry:
                entry["rounds_to_target"] = rounds_to(entry["curve_rounds"],
                                                      entry["curve_median"], args.target)
                print(f"{entry['label']} @ batch {entry['batch_size']}: median curve reaches "
                      f"{100 * args.target:.0f}% at round {entry['rounds_to_target']}", file=info)
        doc["target"] = args.target
    if to_stdout:
        print(json.dumps(doc, indent=2))
    elif args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2))
        print(f"wrote {args.json}", file=info)
    if args.plot:
        write_plot(args.plot, settings, values)
        print(f"wrote {args.plot}", file=info)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
