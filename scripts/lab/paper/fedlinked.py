"""FedLinked (paper 002), decentralized, on digits task sets: the in-process simulation.

Twelve nodes in three task sets, after the report's Table 4.2 (its SVHN row
splits the ten digits among three clients as {0,5,6,9}, {0,3,6,8}, {1,2,4,7}):
four nodes per set, each trained and tested on its set's classes only
(``data.classes``), all holding the same public split (used without labels).
Four schemes run on the same nodes, data and seeds:

- ``local``: every node trains alone;
- ``partial``: the project's partial averaging (half of the hidden layer plus the
  input and output layers shared by all, averaged exactly after every round: what
  push-sum converges to);
- ``global``: one global model (everything averaged after every round);
- ``fedlinked``: nothing averaged, no parameter leaves a node; every
  ``refresh`` rounds each node pulls the public-split representations of
  ``peers`` peers drawn at random, keeps the newest one per peer, and distils
  towards its utility-weighted target (:mod:`p2p.strategies.fedlinked.maths`).

This is the maths only (no sockets, no push-sum, exact averages), so five seeds
run in about a minute on one core; the node-level strategy is
``p2p/strategies/fedlinked/node.py``. Printed: per scheme the median over seeds of the
mean accuracy over nodes with its min-max; the share of (same-set peer, other-set
peer) pairs in which a node gave the same-set peer the higher utility; parameter
bytes sent and representation bytes pulled per node.

``--node-level`` runs real nodes instead (``local`` and ``fedlinked`` only), through the
simulation host (p2p/simulation/host.py: virtual clock, simulated links, inline
training) with the same task sets and settings; it prints one JSON line per run with
the mean accuracy, parameter bytes sent and representation bytes pulled per node.

    python scripts/paper/fedlinked.py --seeds 5
    python scripts/paper/fedlinked.py --seeds 1 --rounds 20 --json
    python scripts/paper/fedlinked.py --node-level --seeds 1 --first-seed 0
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from learner.data import DataSpec, NodeData, load_node_data
from learner.layout import ModelLayout
from learner.network import PartialNetwork
from learner.reference import average_shared_models
from learner.schemes import averaging_level
from learner.spec import NetworkSpec
from learner.trainer import evaluate_model
from p2p.strategies.fedlinked.maths import (
    distillation_loss,
    distillation_target,
    public_representation,
    representation_tensor,
)

#: The report's Table 4.2, SVHN row: M0 and M1 share classes 0 and 6; M2 is apart.
TASK_SETS: tuple[tuple[int, ...], ...] = ((0, 5, 6, 9), (0, 3, 6, 8), (1, 2, 4, 7))
SCHEMES = ("local", "partial", "global", "fedlinked")


@dataclass(frozen=True)
class Settings:
    """One experiment's settings (recorded in the JSON output)."""

    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    nodes: int = 12
    network: str = "64=32=10"
    rounds: int = 40
    steps_per_round: int = 10
    batch_size: int = 16
    lr: float = 0.05
    public_size: int = 300
    samples_per_node: int | None = 30
    partial_level: float = 50.0
    warmup: int = 10
    refresh: int = 2
    peers: int = 3
    eta: float = 1.0
    sharpness: float = 32.0
    weight: float = 0.3
    public_batch: int = 32
    schemes: tuple[str, ...] = SCHEMES


@dataclass
class Run:
    """One scheme under one seed."""

    scheme: str
    seed: int
    accuracy: list[float]  # per node, after the last round
    same_task_first: float | None = None  # share of pairs ranking the same-set peer higher
    parameter_bytes_sent: int = 0  # per node (summed over nodes / nodes)
    representation_bytes_pulled: float = 0.0  # mean per node
    utilities: list[dict[int, float]] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return float(np.mean(self.accuracy))


def task_set(node: int, nodes: int) -> int:
    """The task set of `node`: consecutive blocks of nodes // 3."""
    return min(node * len(TASK_SETS) // nodes, len(TASK_SETS) - 1)


def node_data(settings: Settings, seed: int) -> list[NodeData]:
    """Each node's shard, test part and public split for `seed`."""
    return [load_node_data(DataSpec(task="digits", node_index=i, num_nodes=settings.nodes,
                                    seed=seed, public_size=settings.public_size,
                                    samples_per_node=settings.samples_per_node,
                                    classes=TASK_SETS[task_set(i, settings.nodes)]))
            for i in range(settings.nodes)]


def same_task_first(utilities: Sequence[dict[int, float]], nodes: int) -> float | None:
    """Share of (same-set peer, other-set peer) pairs, over all nodes, in which the
    node's utility of the same-set peer is the higher; None when no pair exists."""
    wins = total = 0
    for j, util in enumerate(utilities):
        mine = task_set(j, nodes)
        same = [u for k, u in util.items() if task_set(k, nodes) == mine]
        other = [u for k, u in util.items() if task_set(k, nodes) != mine]
        for s in same:
            for o in other:
                total += 1
                wins += s > o
    return wins / total if total else None


def run_scheme(settings: Settings, scheme: str, seed: int, data: Sequence[NodeData]) -> Run:
    """Train the nodes under `scheme` and test each on its own classes."""
    network = NetworkSpec.parse(settings.network)
    if scheme == "partial":
        models = averaging_level(network, settings.partial_level)
    elif scheme == "global":
        models = averaging_level(network, 100.0)
    else:
        models = []
    layouts = [ModelLayout(network, list(models)) for _ in data]
    nets = [PartialNetwork(layout, seed * 1000 + i) for i, layout in enumerate(layouts)]
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xFED1]))
    public = [torch.from_numpy(d.public_x) for d in data]
    xs = [torch.from_numpy(d.train_x) for d in data]
    ys = [torch.from_numpy(d.train_y) for d in data]
    targets: list[torch.Tensor | None] = [None] * len(data)
    caches: list[dict[int, np.ndarray]] = [{} for _ in data]
    utilities: list[dict[int, float]] = [{} for _ in data]
    pulled = np.zeros(len(data))
    for done in range(1, settings.rounds + 1):
        for i, net in enumerate(nets):
            net.train()
            for _ in range(settings.steps_per_round):
                idx = torch.from_numpy(rng.choice(ys[i].numel(), min(settings.batch_size,
                                                                    ys[i].numel()), replace=False))
                loss = F.cross_entropy(net(xs[i][idx]), ys[i][idx])
                target = targets[i]
                if target is not None:
                    pidx = torch.from_numpy(rng.choice(target.shape[0], settings.public_batch,
                                                       replace=False))
                    rep = representation_tensor(net, public[i][pidx])
                    loss = loss + settings.weight * distillation_loss(rep, target[pidx])
                # plain SGD on the one flat parameter tensor (no torch.optim: its first
                # use imports torch's compiler, which dwarfs this small run)
                flat = net.flat_parameters()
                flat.grad = None
                loss.backward()
                grad = flat.grad
                assert grad is not None
                with torch.no_grad():
                    flat -= settings.lr * grad
        if models:
            average_shared_models(nets, layouts)
        if scheme == "fedlinked" and done >= settings.warmup and done % settings.refresh == 0:
            reps = [public_representation(net, d.public_x) for net, d in zip(nets, data,
                                                                             strict=True)]
            for i in range(len(data)):
                others = [k for k in range(len(data)) if k != i]
                for k in rng.choice(others, min(settings.peers, len(others)), replace=False):
                    caches[i][int(k)] = reps[int(k)]
                    pulled[i] += reps[int(k)].nbytes
                result = distillation_target(reps[i], caches[i], eta=settings.eta,
                                             sharpness=settings.sharpness)
                targets[i] = torch.from_numpy(result.target)
                utilities[i] = result.utilities
    accuracy = [evaluate_model(net, d.test_x, d.test_y).accuracy for net, d in zip(nets, data,
                                                                                    strict=True)]
    run = Run(scheme, seed, accuracy)
    if scheme == "fedlinked":
        run.same_task_first = same_task_first(utilities, len(data))
        run.representation_bytes_pulled = float(pulled.mean())
        run.utilities = utilities
    return run


def node_level(settings: Settings, scheme: str, seed: int, root: Path) -> dict[str, object]:
    """One run of real nodes through the simulation host (virtual clock, simulated
    links, inline training): ``local`` or ``fedlinked``, the same task sets; returns the
    mean accuracy, parameter (push) bytes sent and representation bytes pulled per node."""
    import dataclasses

    import trio

    from p2p.config import NodeConfig
    from p2p.runtime.train_runner import InlineRunner
    from p2p.simulation.host import Simulation
    from p2p.simulation.network import SimNetwork
    from p2p.swarm import SwarmSpec
    from p2p.testing.clock import virtual_clock

    spec = SwarmSpec(nodes=settings.nodes, rounds=settings.rounds, scheme="local",
                     public_size=settings.public_size, seed=seed, layers=settings.network,
                     lr=settings.lr, batch_size=settings.batch_size,
                     steps_per_round=settings.steps_per_round, round_interval=1.0,
                     eval_every=settings.rounds, start_together=True,
                     strategy="fedlinked" if scheme == "fedlinked" else None)

    def configure(config: NodeConfig) -> NodeConfig:
        index = config.data.node_index
        # shards of a 3x larger swarm: about 30 samples per node, as samples_per_node = 30
        data = dataclasses.replace(config.data, num_nodes=3 * settings.nodes,
                                   classes=TASK_SETS[task_set(index, settings.nodes)])
        strategy = config.strategy.with_keys(
            fedlinked_weight=settings.weight, fedlinked_eta=settings.eta,
            fedlinked_sharpness=settings.sharpness, fedlinked_peers=settings.peers,
            fedlinked_every=settings.refresh, fedlinked_warmup=settings.warmup,
            fedlinked_public_batch=settings.public_batch)
        return dataclasses.replace(config, data=data, strategy=strategy)

    sim = Simulation(spec, root, SimNetwork(seed=seed), runner_for=lambda i: InlineRunner(),
                     configure=configure)
    trio.run(sim.run, clock=virtual_clock())
    rows = sim.node_records()
    pulled = [float(str(slot.node.strategy.status().get("representation_bytes_pulled", 0)))
              for slot in sim.slots if slot.node is not None]
    return {"scheme": scheme, "seed": seed,
            "mean_accuracy": float(np.mean([r["accuracy"] for r in rows])),
            "parameter_bytes_sent_per_node": float(np.mean([r["bytes_sent"] for r in rows])),
            "representation_bytes_pulled_per_node": float(np.mean(pulled))}


def summary(runs: Sequence[Run], schemes: Sequence[str]) -> dict[str, dict[str, object]]:
    """Per scheme: median, min and max over seeds of the mean accuracy over nodes."""
    out: dict[str, dict[str, object]] = {}
    for scheme in schemes:
        means = [r.mean for r in runs if r.scheme == scheme]
        row: dict[str, object] = {"median": float(np.median(means)), "min": min(means),
                                  "max": max(means), "per_seed": means}
        local = {r.seed: r.mean for r in runs if r.scheme == "local"}
        gains = [r.mean - local[r.seed] for r in runs if r.scheme == scheme and r.seed in local]
        if scheme != "local" and gains:  # paired by seed: same nodes, data and seed
            row["gain_over_local_median"] = float(np.median(gains))
            row["gain_over_local_min"] = min(gains)
            row["gain_over_local_max"] = max(gains)
        ranks = [r.same_task_first for r in runs if r.scheme == scheme
                 and r.same_task_first is not None]
        if ranks:
            row["same_task_first_median"] = float(np.median(ranks))
            row["same_task_first_min"] = min(ranks)
            row["representation_bytes_pulled_per_node"] = float(np.median(
                [r.representation_bytes_pulled for r in runs if r.scheme == scheme]))
            row["parameter_bytes_sent"] = 0
        out[scheme] = row
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (default 5)")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="start the seeds here (split a run over processes)")
    parser.add_argument("--rounds", type=int, default=Settings.rounds)
    parser.add_argument("--weight", type=float, default=Settings.weight,
                        help="distillation weight (strategy.fedlinked_weight)")
    parser.add_argument("--peers", type=int, default=Settings.peers,
                        help="peers pulled per refresh")
    parser.add_argument("--sharpness", type=float, default=Settings.sharpness)
    parser.add_argument("--samples-per-node", type=int, default=Settings.samples_per_node,
                        help="labelled samples per node before the class filter")
    parser.add_argument("--schemes", default=",".join(SCHEMES))
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--node-level", action="store_true",
                        help="instead: real nodes through the simulation host (local and "
                        "fedlinked; shards of a 36-node split, about 30 samples each)")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds: expected an integer >= 1")
    schemes = tuple(s for s in args.schemes.split(",") if s)
    unknown = [s for s in schemes if s not in SCHEMES]
    if unknown:
        parser.error(f"--schemes: unknown {unknown[0]!r}; expected some of {', '.join(SCHEMES)}")
    settings = Settings(seeds=tuple(range(args.first_seed, args.first_seed + args.seeds)), rounds=args.rounds, weight=args.weight,
                        peers=args.peers, sharpness=args.sharpness, schemes=schemes,
                        samples_per_node=args.samples_per_node)
    torch.set_num_threads(1)
    started = time.monotonic()
    if args.node_level:
        import tempfile

        found = []
        for seed in settings.seeds:
            for scheme in ("local", "fedlinked"):
                with tempfile.TemporaryDirectory() as root:
                    found.append(node_level(settings, scheme, seed, Path(root)))
                print(json.dumps(found[-1]), flush=True)
        return 0
    runs: list[Run] = []
    for seed in settings.seeds:
        data = node_data(settings, seed)
        for scheme in schemes:
            runs.append(run_scheme(settings, scheme, seed, data))
            if not args.json:
                print(f"seed {seed} {scheme:9s} mean accuracy {runs[-1].mean:.4f}"
                      + (f"  same-task first {runs[-1].same_task_first:.3f}"
                         if runs[-1].same_task_first is not None else ""), flush=True)
    table = summary(runs, schemes)
    if args.json:
        print(json.dumps({"settings": asdict(settings), "summary": table,
                          "seconds": time.monotonic() - started,
                          "runs": [{"scheme": r.scheme, "seed": r.seed, "accuracy": r.accuracy,
                                    "same_task_first": r.same_task_first,
                                    "representation_bytes_pulled": r.representation_bytes_pulled}
                                   for r in runs]}, indent=1))
        return 0
    print(f"\n{'scheme':10s} {'median':>7s} {'min':>7s} {'max':>7s}   (mean accuracy over "
          f"{settings.nodes} nodes, {len(settings.seeds)} seeds)")
    for scheme, row in table.items():
        gain = (f"   gain over local (paired): median {row['gain_over_local_median']:+.4f} "
                f"[{row['gain_over_local_min']:+.4f}..{row['gain_over_local_max']:+.4f}]"
                if "gain_over_local_median" in row else "")
        print(f"{scheme:10s} {row['median']:7.4f} {row['min']:7.4f} {row['max']:7.4f}{gain}")
        if "same_task_first_median" in row:
            print(f"{'':10s} same-task peer ranked first: median {row['same_task_first_median']:.3f}"
                  f", min {row['same_task_first_min']:.3f}; parameter bytes sent 0; "
                  f"representation bytes pulled per node "
                  f"{row['representation_bytes_pulled_per_node']:.0f}")
    print(f"({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
