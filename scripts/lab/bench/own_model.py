"""Study: the examples' own models (a ResNet, a transformer) split into partial models.

``--study resnet`` (examples/own-model/model.py on mnist5k, every second node's
labels 8 and 9 swapped): local learning, one global model (every tensor), a
unit split (80 % of every layer's units, traced) and a parameter split
(``features.*`` global, head local). ``--study transformer``
(examples/own-transformer on mnist1d): local learning against sharing by
name the embedding and encoder (the example's split) or the encoder alone. Seeds run through the synchronous reference (thesis
Algorithm 2, in process; the same model, data split and SGD steps as the
daemons); ``--daemons`` runs the same schemes on real daemons through the
swarm launcher (``scripts/swarm.py --config``) for ``--daemon-seeds`` seeds.
Prints, per scheme, the median over seeds of the nodes' mean final test
accuracy with the spread (min-max); ``--json PATH`` writes every figure.

    python scripts/bench/own_model.py --study resnet --seeds 5 --daemons
    python scripts/bench/own_model.py --study transformer --seeds 3 --daemons --daemon-seeds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from learner import DataSpec, NodeSetup, TrainConfig, load_node_data, run_reference
from learner.module_spec import ModuleModelSpec
from learner.modules.build import ModuleRecipe, build_partial_module
from learner.user_code import FactoryRef
from p2p.swarm import Swarm, SwarmSpec, default_permutations

ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Study:
    """One example: its directory, configs per scheme, task and training settings."""

    example: str
    task: str
    nodes: int
    rounds: int
    swapped: bool
    schemes: dict[str, tuple[str, tuple[ModuleModelSpec, ...]]]  # name -> (config, models)
    optimizer: str
    lr: float


RESNET = Study(
    "own-model", "mnist5k", 8, 40, True,
    {"local": ("node.toml", ()),
     "global": ("node.toml", (ModuleModelSpec("global", params=("*",)),)),
     "units 80%": ("node-units.toml", (ModuleModelSpec("global", units=0.8),)),
     "features.* global": ("node.toml", (ModuleModelSpec("global",
                                                         params=("features.*",)),))},
    "momentum", 0.05)
TRANSFORMER = Study(
    "own-transformer", "mnist1d", 4, 150, True,
    {"local": ("node.toml", ()),
     "embed+encoder global": ("node.toml", (ModuleModelSpec(
         "global", params=("embed.*", "position", "encoder.*")),)),
     "encoder.* global": ("node-encoder.toml", (ModuleModelSpec("global", params=("encoder.*",)),))},
    "adam", 0.002)
STUDIES = {"resnet": RESNET, "transformer": TRANSFORMER}
#: The swarm launcher's scheme for each study scheme (the config says the rest).
SWARM_SCHEME = {"local": "local", "global": "full"}


def permutations(study: Study) -> tuple[str | None, ...]:
    return default_permutations(study.nodes) if study.swapped else (None,) * study.nodes


def reference_run(study: Study, models: tuple[ModuleModelSpec, ...], seed: int,
                  rounds: int) -> float:
    """Mean final accuracy of the nodes through the synchronous reference."""
    build = FactoryRef.parse(str(ROOT / "examples" / study.example / "model.py") + ":build",
                             "network.factory").resolve("network.factory")
    setups = []
    for index, perm in enumerate(permutations(study)):
        data = load_node_data(DataSpec(task=study.task, node_index=index,
                                       num_nodes=study.nodes, permutation=perm, seed=seed))
        recipe = ModuleRecipe(build, data.sample_shape, data.num_classes, models)
        node_seed = seed * 1000 + index
        setups.append(NodeSetup(None, models, data, node_seed,
                                model=build_partial_module(recipe, node_seed)))
    train = TrainConfig(lr=study.lr, optimizer=study.optimizer, batch_size=32,
                        steps_per_round=10, seed=seed)
    return run_reference(setups, rounds, train, eval_every=rounds).mean_final_accuracy


def daemon_run(study: Study, scheme: str, config: str, seed: int, rounds: int,
               workdir: Path) -> dict[str, Any]:
    """The swarm's mean final accuracy and bytes on real daemons."""
    example = ROOT / "examples" / study.example
    spec = SwarmSpec(nodes=study.nodes, rounds=rounds, seed=seed,
                     scheme=SWARM_SCHEME.get(scheme, "partial"),
                     permutations=permutations(study), template=str(example / config),
                     lr=study.lr, optimizer=study.optimizer, batch_size=32,
                     steps_per_round=10, eval_every=rounds, round_interval=0.0)
    with Swarm(spec, workdir=workdir, startup_timeout=300) as swarm:
        swarm.start()
        swarm.run_until_done(timeout=3600)
        summary = swarm.summary()
        swarm.stop()
    return {"accuracy": summary["mean_accuracy"], "worst": summary["worst_accuracy"],
            "bytes_sent": summary["mean_bytes_sent"], "seconds": summary["wall_seconds"]}


def write_private_files(study: Study, seed: int) -> None:
    """The example's per-node files for the daemons (its data.py, split seed ``seed``)."""
    example = ROOT / "examples" / study.example
    write = FactoryRef.parse(f"{example / 'data.py'}:write", "write").resolve("write")
    write(study.nodes, example / "private", seed)


def spread(values: list[float]) -> str:
    return (f"{100 * statistics.median(values):.1f}% [{100 * min(values):.1f}-"
            f"{100 * max(values):.1f}]")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--study", choices=sorted(STUDIES), default="resnet")
    p.add_argument("--seeds", type=int, default=5, help="reference seeds (first..first+N-1)")
    p.add_argument("--first-seed", type=int, default=0,
                   help="first reference seed (to share the seeds out among processes)")
    p.add_argument("--rounds", type=int, help="rounds (default: the study's)")
    p.add_argument("--schemes", help="comma-separated subset of the study's schemes")
    p.add_argument("--daemons", action="store_true", help="also run real daemons")
    p.add_argument("--daemon-seeds", type=int, default=1, help="seeds run on daemons")
    p.add_argument("--no-reference", action="store_true", help="daemons only")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    study = STUDIES[args.study]
    rounds = args.rounds or study.rounds
    schemes = {k: v for k, v in study.schemes.items()
               if not args.schemes or k in args.schemes.split(",")}
    results: dict[str, dict[str, Any]] = {name: {"reference": [], "daemons": []}
                                          for name in schemes}
    for name, (_, models) in schemes.items():
        if args.no_reference:
            break
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            t0 = time.perf_counter()
            accuracy = reference_run(study, models, seed, rounds)
            results[name]["reference"].append(accuracy)
            print(f"reference {name:20} seed {seed}: {100 * accuracy:.1f}% "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
    if args.daemons:
        for seed in range(args.daemon_seeds):
            write_private_files(study, seed)
            for name, (config, _) in schemes.items():
                with tempfile.TemporaryDirectory() as workdir:
                    row = daemon_run(study, name, config, seed, rounds, Path(workdir))
                results[name]["daemons"].append(row)
                print(f"daemons   {name:20} seed {seed}: {100 * row['accuracy']:.1f}% "
                      f"(worst {100 * row['worst']:.1f}%, {row['bytes_sent'] / 1e6:.2f} MB "
                      f"sent per node, {row['seconds']:.0f} s)", flush=True)
    print(f"\n{args.study}: {study.nodes} nodes, {rounds} rounds x 10 steps, task {study.task}"
          f"{', every second node 8<->9' if study.swapped else ''}")
    print(f"{'scheme':22} {'reference (median [min-max])':32} daemons")
    for name, row in results.items():
        ref = spread(row["reference"]) if row["reference"] else "-"
        daemons = row["daemons"]
        swarm = (spread([d["accuracy"] for d in daemons]) if len(daemons) > 1 else
                 f"{100 * daemons[0]['accuracy']:.1f}%" if daemons else "-")
        print(f"{name:22} {ref:32} {swarm}")
    if args.json:
        args.json.write_text(json.dumps({"study": args.study, "rounds": rounds,
                                         "nodes": study.nodes, "first_seed": args.first_seed,
                                         "results": results},
                                        indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
