"""Partial vs local vs one global model at scale: a grid of simulations.

Runs ``scripts/simulate.py`` (one process per run, so memory is given back
between runs) over a grid of swarm sizes, schemes (``partial``, ``local``,
``full``), churn fractions, tasks and seeds, and compares each run with the
synchronous reference (``learner.run_reference``: the same nodes, the same
shards and partial models, exact averaging every round) as
``scripts/bench/swarm.py`` does. Tasks:

- ``swap89``: about 44 % of the nodes (7 of 16, as the papers' task) have
  labels 8 and 9 swapped, the last ones;
- ``s3``: the six permutations of digits 7, 8, 9 cycled over the nodes; the
  ``partial`` scheme is then 80 % global + 20 % semi-local (a semi-local
  model per permutation group, ``--semi-local``).

Data: digits up to ``--digits-up-to`` nodes (default 64: 22 training samples
a node), above that the generated task ``scripts/simulate.py`` chooses for a
swarm too large for digits (``synthetic``, ``--samples-per-node`` each).

Simulation flags (``--max-connections``, ``--descriptor-checks``, ``--lockstep``,
``--handshakes``, ``--eval-every``, ``--samples-per-node``) are passed through to
every run when given, else each run gets ``scripts/simulate.py``'s defaults (which
change above its ``LARGE_SWARM`` nodes); each run records the flags it was given
and the values the simulation used.

Per run: mean and worst accuracy, push-sum payload and wire bytes per node,
simulated, wall and CPU seconds, and the mean round (and payload per node)
at which the swarm's mean accuracy first reached the reference's final mean
accuracy minus 1 point. Prints one markdown table (medians over seeds) and
writes every figure to ``--json``, after each run: a second invocation with
the same ``--json`` skips the runs already there, so a grid can be grown.

    python scripts/bench/scale.py --nodes 16 --json scale.json
    python scripts/bench/scale.py --nodes 16,64 --churn 0,0.1,0.3 --seeds 0,1,2 \\
        --tasks swap89,s3 --json scale.json --markdown scale.md
    python scripts/bench/scale.py --json scale.json --table-only   # table of what ran
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)

SCHEMES = ("partial", "local", "full")
TASKS = ("swap89", "s3")
SWAPPED_FRACTION = 7 / 16  # the papers' task: 7 of 16 nodes with 8 and 9 swapped
S3_PERMUTATIONS = "id,8:9,7:8,7:8:9,7:9:8,7:9"  # S3 acting on 7, 8, 9 (learner.permutations)
TARGET_MARGIN = 0.01  # rounds to accuracy: the reference's final mean accuracy minus 1 point
DIGITS_UP_TO = 64
#: ``scripts/simulate.py`` flags passed through to every run when given (``--max-connections``
#: for ``max_connections``, ...); not given, simulate.py's defaults apply.
SIMULATE_OPTIONS = ("max_connections", "descriptor_checks", "lockstep", "handshakes",
                    "eval_every", "samples_per_node")


@dataclasses.dataclass(frozen=True)
class Cell:
    """One run of the grid."""

    task: str  # swap89 | s3
    nodes: int
    scheme: str  # partial | local | full
    churn: float
    seed: int

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task: expected one of {', '.join(TASKS)}, got {self.task!r}")
        if self.scheme not in SCHEMES:
            raise ValueError(f"scheme: expected one of {', '.join(SCHEMES)}, got {self.scheme!r}")
        if self.nodes < 2:
            raise ValueError(f"nodes: expected at least 2, got {self.nodes}")
        if not 0.0 <= self.churn < 1.0:
            raise ValueError(f"churn: expected a fraction in [0, 1), got {self.churn}")

    @property
    def key(self) -> str:
        """The run's name in the JSON (stable across invocations)."""
        return f"{self.task}/n{self.nodes}/{self.scheme}/churn{self.churn:g}/seed{self.seed}"

    @property
    def reference_key(self) -> str:
        """The reference does not see churn: one per task, size, scheme and seed."""
        return f"{self.task}/n{self.nodes}/{self.scheme}/seed{self.seed}"


def swapped_count(nodes: int) -> int:
    """How many nodes have 8 and 9 swapped: about 44 %, at least one, never all."""
    return min(nodes - 1, max(1, round(SWAPPED_FRACTION * nodes)))


def option_flags(options: Mapping[str, Any]) -> list[str]:
    """``--max-connections 256 ...`` for the ``SIMULATE_OPTIONS`` given (None: not given)."""
    unknown = sorted(set(options) - set(SIMULATE_OPTIONS))
    if unknown:
        raise ValueError(f"simulate options: unknown {', '.join(unknown)}; expected some of "
                         f"{', '.join(SIMULATE_OPTIONS)}")
    argv: list[str] = []
    for name in SIMULATE_OPTIONS:  # a fixed order: the same run gets the same argv
        if options.get(name) is not None:
            argv += ["--" + name.replace("_", "-"), str(options[name])]
    return argv


def simulate_argv(cell: Cell, rounds: int, *, digits_up_to: int = DIGITS_UP_TO,
                  options: Mapping[str, Any] | None = None,
                  extra: Sequence[str] = ()) -> list[str]:
    """The flags of ``scripts/simulate.py`` for ``cell`` (no ``--json``/``--quiet``):
    ``options`` (``SIMULATE_OPTIONS``) passed through, then ``extra``."""
    argv = ["--nodes", str(cell.nodes), "--rounds", str(rounds), "--scheme", cell.scheme,
            "--seed", str(cell.seed)]
    if cell.task == "swap89":
        k = swapped_count(cell.nodes)
        argv += ["--permuted", f"id*{cell.nodes - k},8:9*{k}"]
    else:
        argv += ["--permuted", S3_PERMUTATIONS]
        if cell.scheme == "partial":
            argv += ["--semi-local"]
    if cell.nodes <= digits_up_to:
        argv += ["--task", "digits"]  # else simulate.py sizes its generated task
    if cell.churn:
        argv += ["--churn", f"{cell.churn:g}"]
    return argv + option_flags(options or {}) + list(extra)


def grid(tasks: Sequence[str], nodes: Sequence[int], schemes: Sequence[str],
         churns: Sequence[float], seeds: Sequence[int]) -> list[Cell]:
    """Every cell, seeds outermost (a first seed of everything comes before a second one)."""
    return [Cell(task, n, scheme, churn, seed) for seed in seeds for n in nodes
            for task in tasks for churn in churns for scheme in schemes]


# ---------------------------------------------------------------- running


def simulate_module() -> ModuleType:
    """The simulator's command line: its flag reading, so the reference sees
    exactly the swarm a run simulates."""
    from p2p.simulation import cli

    return cli


def compact_series(doc: dict[str, Any]) -> list[list[Any]]:
    """``[time, mean round, mean accuracy, payload bytes per live node]`` per sample."""
    out = []
    for p in doc.get("series", []):
        live = p.get("live") or 0
        out.append([p["time"], p["mean_round"], p["mean_accuracy"],
                    p["bytes_sent"] / live if live else None])
    return out


def figures_of(doc: dict[str, Any]) -> dict[str, Any]:
    """What the grid keeps of one ``scripts/simulate.py`` JSON document."""
    nodes = doc["nodes"]
    wire = [r["wire_bytes_sent"] for r in nodes if r.get("wire_bytes_sent") is not None]
    sim = doc.get("simulation", {})
    return {
        "mean_accuracy": doc["mean_accuracy"],
        "worst_accuracy": doc["worst_accuracy"],
        "payload_bytes_per_node": doc["mean_bytes_sent"],
        "wire_bytes_per_node": sum(wire) / len(wire) if wire else None,
        "simulated_seconds": doc["simulated_seconds"],
        "wall_seconds": doc["wall_seconds"],
        "cpu_seconds": doc.get("cpu_seconds"),
        "timed_out": doc.get("timed_out", False),
        "connections": doc.get("network", {}).get("connections"),
        "churn_events": len(doc.get("churn", [])),
        "data": sim.get("task", doc.get("spec", {}).get("task")),
        "handshakes": sim.get("handshakes"),
        "lockstep": sim.get("lockstep"),
        # what the run used, given or simulate.py's default for its size
        "max_connections": sim.get("max_connections"),
        "descriptor_checks": sim.get("descriptor_checks"),
        "eval_every": doc.get("spec", {}).get("eval_every"),
        "series": compact_series(doc),
    }


def run_simulation(argv: list[str], *, in_process: bool = False,
                   timeout: float | None = None) -> dict[str, Any]:
    """Run ``scripts/simulate.py argv``; its figures plus the process's wall seconds.

    A separate process by default (a large swarm's memory goes back to the
    system when it ends); ``in_process`` calls its ``main`` (tests).
    """
    with tempfile.TemporaryDirectory(prefix="scale-") as tmp:
        out = Path(tmp) / "run.json"
        full = [*argv, "--quiet", "--json", str(out)]
        started = time.perf_counter()
        if in_process:
            code = simulate_module().main(full)
            stderr = ""
        else:
            # one torch thread, as the reference: on a shared machine more only contend
            env = os.environ | {"OMP_NUM_THREADS": "1"}
            proc = subprocess.run([sys.executable, "-m", "p2p.simulation", *full],
                                  capture_output=True, text=True, timeout=timeout, check=False,
                                  env=env)
            code, stderr = proc.returncode, proc.stderr
        elapsed = time.perf_counter() - started
        if not out.exists():
            raise RuntimeError(f"simulate.py {' '.join(argv)} wrote no JSON (exit {code}): "
                               f"{stderr.strip()[-400:]}")
        doc = json.loads(out.read_text())
    figures = figures_of(doc)
    figures["process_wall_seconds"] = elapsed
    figures["exit_code"] = code
    return figures


def reference_accuracy(argv: list[str], *, batched: bool = True) -> dict[str, Any]:
    """The synchronous reference on the nodes ``argv`` would simulate: mean final accuracy.

    ``batched``: the nodes' rounds trained in one vectorised step (``run_reference``'s
    option: the same run within float rounding, several times cheaper at hundreds of nodes).
    """
    import torch

    from learner import TrainConfig, run_reference
    from p2p.runtime.assembly import build_learning, reference_setup
    from p2p.swarm import node_config

    torch.set_num_threads(1)  # small networks: threads cost more than they give (as the runs)
    simulate = simulate_module()
    args = simulate.build_parser().parse_args(argv)
    spec, configure = simulate.spec_and_configure(args)
    started, cpu = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="scale-ref-") as tmp:
        setups = []
        for i in range(spec.nodes):
            config = configure(node_config(spec, i, Path(tmp) / f"ref{i}", None))
            learning = build_learning(config)
            setups.append(reference_setup(config, learning))
        train = TrainConfig(lr=spec.lr, batch_size=spec.batch_size,
                            steps_per_round=spec.steps_per_round, seed=spec.seed)
        result = run_reference(setups, spec.rounds, train, eval_every=spec.rounds,
                               batched=batched)
    return {"mean_accuracy": result.mean_final_accuracy, "batched": batched,
            "worst_accuracy": min(result.final_accuracy),
            "wall_seconds": time.perf_counter() - started,
            "cpu_seconds": time.process_time() - cpu}


def reached(series: list[list[Any]], target: float) -> tuple[float, float | None] | None:
    """(mean round, payload bytes per node) at the first sample whose mean accuracy
    reached ``target``; None if none did."""
    for _time, mean_round, accuracy, per_node in series:
        if accuracy is not None and accuracy >= target:
            return mean_round, per_node
    return None


# ---------------------------------------------------------------- results


def load_results(path: Path | None) -> dict[str, Any]:
    """The results file (``runs`` and ``references`` by key), empty if there is none."""
    if path is None or not path.exists():
        return {"runs": {}, "references": {}}
    doc = json.loads(path.read_text())
    if not isinstance(doc.get("runs"), dict) or not isinstance(doc.get("references"), dict):
        raise ValueError(f"{path}: not a results file of this script (no 'runs'/'references')")
    return doc


def run_grid(cells: Sequence[Cell], results: dict[str, Any], *, rounds: int,
             digits_up_to: int = DIGITS_UP_TO, options: Mapping[str, Any] | None = None,
             extra: Sequence[str] = (),
             reference: bool = True, in_process: bool = False, timeout: float | None = None,
             save: Callable[[dict[str, Any]], None] | None = None,
             log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run every cell not yet in ``results`` (and its reference); ``save`` after each.

    One results file holds runs of one length: ValueError if ``results`` has other ``rounds``.
    ``options`` (``SIMULATE_OPTIONS``) go to every run, which records them as ``options``
    (only those given) next to the values the simulation used.
    """
    given = {k: v for k, v in (options or {}).items() if v is not None}
    option_flags(given)  # unknown names: ValueError before anything runs
    if results.setdefault("rounds", rounds) != rounds:
        raise ValueError(f"the results file holds runs of {results['rounds']} rounds, "
                         f"not {rounds}: use another --json")
    for i, cell in enumerate(cells):
        argv = simulate_argv(cell, rounds, digits_up_to=digits_up_to, options=given,
                             extra=extra)
        if cell.key not in results["runs"]:
            load = os.getloadavg()[0]
            try:
                record = run_simulation(argv, in_process=in_process, timeout=timeout)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                log(f"[{i + 1}/{len(cells)}] {cell.key}: FAILED: {exc}")
                continue
            record.update(dataclasses.asdict(cell), rounds=rounds, argv=argv, options=given,
                          load_before=load, load_after=os.getloadavg()[0])
            results["runs"][cell.key] = record
            log(f"[{i + 1}/{len(cells)}] {cell.key}: mean {100 * (record['mean_accuracy'] or 0):.1f}%"
                f", {record['wall_seconds']:.0f} s wall ({record['cpu_seconds'] or 0:.0f} s CPU), "
                f"load {load:.1f}")
            if save:
                save(results)
        if reference and cell.reference_key not in results["references"]:
            ref = reference_accuracy(argv)
            ref["rounds"] = rounds
            results["references"][cell.reference_key] = ref
            log(f"    reference {cell.reference_key}: {100 * ref['mean_accuracy']:.1f}% "
                f"({ref['wall_seconds']:.0f} s)")
            if save:
                save(results)
    return results


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarise(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (task, nodes, scheme, churn): medians over the seeds that ran, and
    the range of the seeds' mean accuracies (``mean_accuracy_range``)."""
    groups: dict[tuple[str, int, str, float], list[dict[str, Any]]] = {}
    for run in results["runs"].values():
        groups.setdefault((run["task"], run["nodes"], run["scheme"], run["churn"]), []).append(run)
    order = {name: i for i, name in enumerate(TASKS)}
    rows = []
    for (task, nodes, scheme, churn), runs in sorted(
            groups.items(), key=lambda kv: (order.get(kv[0][0], 9), kv[0][1],
                                            kv[0][3], SCHEMES.index(kv[0][2]))):
        refs, to_rounds, to_bytes, never = [], [], [], 0
        for run in runs:
            ref = results["references"].get(
                Cell(task, nodes, scheme, churn, run["seed"]).reference_key)
            if ref is None:
                continue
            refs.append(ref["mean_accuracy"])
            got = reached(run["series"], ref["mean_accuracy"] - TARGET_MARGIN)
            if got is None:
                never += 1
            else:
                to_rounds.append(got[0])
                if got[1] is not None:
                    to_bytes.append(got[1])
        means = [r["mean_accuracy"] for r in runs if r["mean_accuracy"] is not None]
        rows.append({
            "task": task, "data": runs[0].get("data"), "nodes": nodes, "scheme": scheme,
            "churn": churn, "seeds": sorted(r["seed"] for r in runs),
            "mean_accuracy": _median(means),
            # the seed-to-seed spread: a gap between schemes smaller than it is no gap
            "mean_accuracy_range": [min(means), max(means)] if means else None,
            "worst_accuracy": _median([r["worst_accuracy"] for r in runs
                                       if r["worst_accuracy"] is not None]),
            "reference_accuracy": _median(refs),
            "rounds_to_reference": _median(to_rounds),
            "payload_bytes_per_node_to_reference": _median(to_bytes),
            "never_reached": never, "with_reference": len(refs),
            "payload_bytes_per_node": _median([r["payload_bytes_per_node"] for r in runs
                                               if r["payload_bytes_per_node"] is not None]),
            "wire_bytes_per_node": _median([r["wire_bytes_per_node"] for r in runs
                                            if r["wire_bytes_per_node"] is not None]),
            "wall_seconds": _median([r["wall_seconds"] for r in runs]),
            "cpu_seconds": _median([r["cpu_seconds"] for r in runs
                                    if r.get("cpu_seconds") is not None]),
            "timed_out": sum(1 for r in runs if r.get("timed_out")),
        })
    return rows


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:.2f}"


def _spread(row: Mapping[str, Any]) -> str:
    """' (min-max)' of the seeds' mean accuracies when more than one seed ran."""
    span = row.get("mean_accuracy_range")
    if span is None or len(row["seeds"]) < 2:
        return ""
    return f" ({_pct(span[0])}-{_pct(span[1])})"


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The summary rows as one markdown table."""
    head = ("| task (data) | N | scheme | churn | seeds | mean acc % (min-max) | worst acc % "
            "| reference % "
            "| rounds to ref - 1 pt | payload MB/node to ref - 1 pt | payload MB/node "
            "| wire MB/node | wall s | CPU s |")
    lines = [head, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r["with_reference"] == 0:
            rounds = "no reference"
        elif r["rounds_to_reference"] is None:
            rounds = "never"
        else:
            rounds = f"{r['rounds_to_reference']:.1f}"
            if r["never_reached"]:
                rounds += f" ({r['never_reached']} of {r['with_reference']} never)"
        label = r["task"] if r["task"] != "s3" or r["scheme"] != "partial" else "s3 (+semi-local)"
        lines.append(
            f"| {label} ({r['data']}) | {r['nodes']} | {r['scheme']} | {100 * r['churn']:.0f} % "
            f"| {len(r['seeds'])} | {_pct(r['mean_accuracy'])}{_spread(r)} "
            f"| {_pct(r['worst_accuracy'])} "
            f"| {_pct(r['reference_accuracy'])} | {rounds} "
            f"| {_mb(r['payload_bytes_per_node_to_reference'])} "
            f"| {_mb(r['payload_bytes_per_node'])} | {_mb(r['wire_bytes_per_node'])} "
            f"| {r['wall_seconds']:.0f} | "
            + ("-" if r["cpu_seconds"] is None else f"{r['cpu_seconds']:.0f}")
            + (f" ({r['timed_out']} timed out)" if r["timed_out"] else "") + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------- command line


def _list(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        try:
            return [kind(item) for item in text.split(",") if item.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}") from None
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=_list(int), default=[16], help="swarm sizes (default 16)")
    p.add_argument("--schemes", type=_list(str), default=list(SCHEMES),
                   help="partial,local,full (default all)")
    p.add_argument("--churn", type=_list(float), default=[0.0, 0.1, 0.3],
                   help="churn fractions (default 0,0.1,0.3)")
    p.add_argument("--tasks", type=_list(str), default=["swap89"],
                   help="swap89 (8<->9, ~44 %% swapped) and/or s3 (default swap89)")
    p.add_argument("--seeds", type=_list(int), default=[0], help="seeds (default 0)")
    p.add_argument("--rounds", type=int, default=50, help="rounds per node (default 50)")
    p.add_argument("--digits-up-to", type=int, default=DIGITS_UP_TO, metavar="N",
                   help=f"digits up to N nodes, else simulate.py's generated task "
                        f"(default {DIGITS_UP_TO})")
    sim = p.add_argument_group(
        "simulation flags", "passed to every run when given; else simulate.py's defaults "
        "(which change above 256 nodes); see scripts/simulate.py --help")
    sim.add_argument("--max-connections", type=int, metavar="N",
                     help="each node's limits.max_connections")
    sim.add_argument("--descriptor-checks", choices=("in-process", "full"))
    sim.add_argument("--lockstep", choices=("auto", "off", "plain", "batched"))
    sim.add_argument("--handshakes", choices=("auto", "noise", "trusted"))
    sim.add_argument("--eval-every", type=int, metavar="K", help="evaluate every K rounds")
    sim.add_argument("--samples-per-node", type=int, metavar="N",
                     help="training samples per node of the generated task")
    p.add_argument("--extra", default="", metavar="FLAGS",
                   help='more flags for simulate.py, e.g. "--lockstep batched"')
    p.add_argument("--no-reference", action="store_true", help="skip the synchronous reference")
    p.add_argument("--timeout", type=float, metavar="S", help="give up on a run after S seconds")
    p.add_argument("--json", type=Path, metavar="PATH",
                   help="results file: read (runs already there are skipped) and rewritten")
    p.add_argument("--markdown", type=Path, metavar="PATH", help="write the table there too")
    p.add_argument("--table-only", action="store_true", help="run nothing: the table of --json")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # a line per run, also into a log file
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        cells = grid(args.tasks, args.nodes, args.schemes, args.churn, args.seeds)
        results = load_results(args.json)
    except ValueError as exc:
        print(f"grid not run: {exc}", file=sys.stderr)
        return 2

    def save(doc: dict[str, Any]) -> None:
        if args.json:
            tmp = args.json.with_suffix(args.json.suffix + ".tmp")
            tmp.write_text(json.dumps(doc, indent=1))
            tmp.replace(args.json)

    if not args.table_only:
        try:
            run_grid(cells, results, rounds=args.rounds, digits_up_to=args.digits_up_to,
                     options={name: getattr(args, name) for name in SIMULATE_OPTIONS},
                     extra=args.extra.split(), reference=not args.no_reference,
                     timeout=args.timeout, save=save)
        except ValueError as exc:
            print(f"grid not run: {exc}", file=sys.stderr)
            return 2
    results["rows"] = summarise(results)
    results["table"] = markdown_table(results["rows"])
    save(results)
    print(results["table"])
    if args.markdown:
        args.markdown.write_text(results["table"] + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
