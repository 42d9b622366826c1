"""The learned collaboration graph (paper 003, Bellet et al.) on the S3 task.

12 nodes, the six permutations of digits 7, 8, 9, two nodes each (as
``reproduce_paper.py semi-local``). Each node keeps its own model and learns
weights to the others with :mod:`p2p.strategies.graph.maths`: on each
wake-up of its Poisson clock it trains one round, samples ``kappa`` peers, pulls
their released model, loss, confidence and degree, takes one step of the
degree-regularised graph objective on those edges (distance: outputs on the
task's public split), mixes its model with its heaviest neighbours' and releases
it with per-node Laplace noise.

What is measured, per seed, in one run:

- ``graph`` (in-process maths simulation): the nodes' real torch models and
  trainers, the graph maths, exponential wake-up times; no transport. After
  ``--wakeups`` wake-ups per node: each node's share of its edge weight on its
  same-permutation partner (criterion >= 80 %; uniform weights give 1/11, about
  9 %), its test accuracy, the epsilon it spent and the noise scale;
- the baselines on the same nodes, data and training settings with the
  synchronous reference (one round per wake-up): ``none`` (local only),
  ``global80`` (partial averaging: 80 % of each hidden layer shared by all),
  ``full`` (one global model) and ``group`` (one model per permutation group,
  the oracle the graph should approach);
- with ``--node-level N``: the same swarm as real nodes (strategy ``graph``)
  through the simulation host on a virtual clock, for the first N seeds (slower;
  reported separately).

Medians over seeds with min-max spreads.

    python scripts/paper/graph.py --seeds 5
    python scripts/paper/graph.py --seeds 5 --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from p2p.strategies.graph.maths import (
    CollabGraph,
    GraphParams,
    PeerView,
    PrivacyLedger,
    confidence,
    laplace_scale,
    mix_models,
    output_distance,
    release_noise,
    softmax,
)

logger = logging.getLogger("paper_graph")

BASELINES = ("none", "global80", "full", "group")
LABELS = {
    "graph": "learned collaboration graph",
    "none": "local only",
    "global80": "partial averaging (80 % global)",
    "full": "one global model",
    "group": "one model per permutation group (oracle)",
}
CRITERION = 0.8


@dataclass(frozen=True)
class Settings:
    """Everything that defines a run (recorded in the JSON output)."""

    task: str = "digits"
    network: str = "mlp"
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    wakeups: int = 200
    lr: float = 0.05
    optimizer: str = "momentum"
    batch_size: int = 16
    steps_per_round: int = 1
    public_size: int = 200
    test_fraction: float = 0.2
    # the scheme's own defaults (p2p.strategies.graph.maths.GraphParams)
    mu: float = GraphParams.mu
    beta: float = GraphParams.beta
    delta: float = GraphParams.delta
    kappa: int = GraphParams.kappa
    local_lipschitz: float = GraphParams.local_lipschitz
    max_neighbours: int = GraphParams.max_neighbours
    confidence_samples: int = 1000
    epsilon: float = math.inf
    sensitivity: float = 1.0
    baselines: tuple[str, ...] = BASELINES

    @property
    def params(self) -> GraphParams:
        return GraphParams(mu=self.mu, beta=self.beta, delta=self.delta, kappa=self.kappa,
                           local_lipschitz=self.local_lipschitz,
                           max_neighbours=self.max_neighbours)


@dataclass
class GraphOutcome:
    """One seed of the maths simulation."""

    accuracy: list[float]
    partner_share: list[float]
    degree: list[float]
    epsilon_spent: list[float]
    noise_scale: list[float]
    confidence: list[float]
    weights: list[list[float]] = field(default_factory=list)


def node_plan() -> tuple[list[str], list[int]]:
    """Each node's permutation of digits 7-9 and its group (two nodes a group)."""
    from learner.permutations import last_classes_permutations

    specs = last_classes_permutations(3, 10)
    return [specs[i // 2] for i in range(12)], [i // 2 for i in range(12)]


def _node_data(settings: Settings, seed: int) -> list[Any]:
    from learner.data import DataSpec, load_node_data

    perms, _ = node_plan()
    return [load_node_data(DataSpec(task=settings.task, node_index=i, num_nodes=len(perms),
                                    permutation=p, seed=seed,
                                    test_fraction=settings.test_fraction,
                                    public_size=settings.public_size))
            for i, p in enumerate(perms)]


def _train_config(settings: Settings, seed: int) -> Any:
    from learner.trainer import TrainConfig

    return TrainConfig(lr=settings.lr, batch_size=settings.batch_size,
                       steps_per_round=settings.steps_per_round, optimizer=settings.optimizer,
                       seed=seed)


def _network_spec(settings: Settings) -> Any:
    from learner.spec import NetworkSpec
    from learner.tasks import resolve_network

    return NetworkSpec.parse(resolve_network(settings.task, settings.network), "relu")


def simulate_graph(settings: Settings, seed: int) -> GraphOutcome:
    """The maths simulation of one seed (see the module docstring)."""
    import torch
    import torch.nn.functional as F

    from learner.layout import ModelLayout
    from learner.network import PartialNetwork
    from learner.trainer import Trainer, evaluate_model

    params = settings.params
    datas = _node_data(settings, seed)
    n = len(datas)
    _, groups = node_plan()
    network = _network_spec(settings)
    layout = ModelLayout(network, [])
    # one common initialisation: averaging networks started apart mixes unrelated units
    nets = [PartialNetwork(layout, seed * 1000) for _ in range(n)]
    base = _train_config(settings, seed)
    trainers = [Trainer(net, d.train_x, d.train_y,
                        dataclasses.replace(base, seed=seed * 1000 + i))
                for i, (net, d) in enumerate(zip(nets, datas, strict=True))]
    public = torch.from_numpy(datas[0].public_x)
    scratch = PartialNetwork(layout, 0)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x6EA9]))
    graphs: list[CollabGraph[int]] = [CollabGraph(params) for _ in range(n)]
    conf = [confidence(int(d.train_y.size), settings.confidence_samples) for d in datas]
    ledgers = [PrivacyLedger(settings.epsilon) for _ in range(n)]

    def vector(net: PartialNetwork) -> np.ndarray:
        return net.flat.detach().numpy().copy()

    @torch.no_grad()
    def outputs_of(vec: np.ndarray) -> np.ndarray:
        scratch.flat.copy_(torch.from_numpy(vec))
        scratch.eval()
        return softmax(scratch(public).numpy())

    @torch.no_grad()
    def train_loss(i: int, vec: np.ndarray) -> float:
        scratch.flat.copy_(torch.from_numpy(vec))
        scratch.eval()
        d = datas[i]
        return float(F.cross_entropy(scratch(torch.from_numpy(d.train_x)),
                                     torch.from_numpy(d.train_y)))

    published = [vector(net) for net in nets]
    pub_outputs = [outputs_of(v) for v in published]
    pub_loss = [train_loss(i, v) for i, v in enumerate(published)]
    wakes = [0] * n
    clocks = rng.exponential(1.0, n)
    while True:
        live = [i for i in range(n) if wakes[i] < settings.wakeups]
        if not live:
            break
        i = min(live, key=lambda k: clocks[k])
        clocks[i] += rng.exponential(1.0)
        wakes[i] += 1
        trainers[i].train_round()
        own = vector(nets[i])
        own_out = outputs_of(own)
        others = [j for j in range(n) if j != i]
        sampled = rng.choice(others, size=min(params.kappa, len(others)), replace=False)
        views = {int(j): PeerView(distance=output_distance(own_out, pub_outputs[j]),
                                  loss=pub_loss[j], confidence=conf[j],
                                  degree=graphs[j].degree, weight_back=graphs[j].weight(i))
                 for j in sampled}
        own_loss = train_loss(i, own)
        for j, w in graphs[i].update(views, own_loss, conf[i]).items():
            graphs[j].set_weight(i, w)  # tell the other end of the edge
        top = graphs[i].neighbours(params.max_neighbours)
        mixed = mix_models(own, {j: published[j] for j, _ in top}, dict(top), conf[i], params)
        if ledgers[i].noisy:
            mixed = mixed + release_noise(rng, mixed.size, settings.epsilon, settings.sensitivity,
                                          int(datas[i].train_y.size), conf[i], params)
        ledgers[i].record()
        with torch.no_grad():
            nets[i].flat.copy_(torch.from_numpy(mixed))
        published[i] = mixed
        pub_outputs[i] = outputs_of(mixed)
        pub_loss[i] = train_loss(i, mixed)

    accuracy = [evaluate_model(net, d.test_x, d.test_y).accuracy
                for net, d in zip(nets, datas, strict=True)]
    share = []
    for i in range(n):
        partner = next(j for j in range(n) if j != i and groups[j] == groups[i])
        share.append(graphs[i].share(partner))
    weights = [[graphs[i].weight(j) for j in range(n)] for i in range(n)]
    noise = [0.0 if not ledgers[i].noisy else
             laplace_scale(settings.epsilon, settings.sensitivity, int(d.train_y.size))
             for i, d in enumerate(datas)]
    return GraphOutcome(accuracy, share, [g.degree for g in graphs],
                        [led.spent if led.noisy else math.inf for led in ledgers], noise, conf,
                        weights)


def run_baseline(settings: Settings, scheme: str, seed: int) -> list[float]:
    """Per-node final accuracy of `scheme` with the synchronous reference."""
    from learner.reference import NodeSetup, run_reference
    from learner.schemes import semi_local_scheme

    network = _network_spec(settings)
    _, groups = node_plan()
    setups = [NodeSetup(network, tuple(semi_local_scheme(network, scheme, g)), d,
                        seed=seed * 1000 + i)
              for i, (d, g) in enumerate(zip(_node_data(settings, seed), groups, strict=True))]
    result = run_reference(setups, settings.wakeups, _train_config(settings, seed),
                           eval_every=settings.wakeups)
    return list(result.final_accuracy)


def node_level_run(settings: Settings, seed: int, root: Path,
                   compute_seconds: float = 0.05) -> dict[str, Any]:
    """The same swarm as real nodes (strategy ``graph``) through the simulation host on a
    virtual clock: per-node accuracy, partner share, wake-ups, epsilon spent."""
    import torch
    import trio

    from p2p.runtime.train_runner import InlineRunner
    from p2p.simulation.host import Simulation
    from p2p.simulation.network import SimNetwork
    from p2p.strategies.graph.node import GraphStrategy
    from p2p.swarm import SwarmSpec
    from p2p.testing.clock import virtual_clock

    torch.set_num_threads(1)
    perms, groups = node_plan()
    spec = SwarmSpec(nodes=len(perms), rounds=settings.wakeups, scheme="local",
                     public_size=settings.public_size, permutations=tuple(perms), seed=seed,
                     task=settings.task, layers=settings.network, lr=settings.lr,
                     batch_size=settings.batch_size, optimizer=settings.optimizer,
                     steps_per_round=settings.steps_per_round, round_interval=0.0,
                     eval_every=settings.wakeups, strategy="graph")
    epsilon = settings.epsilon if math.isfinite(settings.epsilon) else 0.0

    def configure(config: Any) -> Any:
        strategy = dataclasses.replace(
            config.strategy, graph_mu=settings.mu, graph_beta=settings.beta,
            graph_delta=settings.delta, graph_kappa=settings.kappa,
            graph_local_lipschitz=settings.local_lipschitz,
            graph_neighbours=settings.max_neighbours,
            graph_period=compute_seconds,  # about one wake-up per training round
            graph_epsilon=epsilon, graph_sensitivity=settings.sensitivity,
            graph_confidence_samples=settings.confidence_samples)
        return dataclasses.replace(config, strategy=strategy)

    sim = Simulation(spec, root, SimNetwork(seed=seed),
                     runner_for=lambda i: InlineRunner(compute_seconds), configure=configure,
                     sample_every=10.0)
    started = time.perf_counter()
    trio.run(sim.run, clock=virtual_clock())
    nodes = [slot.node for slot in sim.slots]
    ids = [n.identity.node_id if n is not None else b"" for n in nodes]
    rows: list[dict[str, Any]] = []
    for i, node in enumerate(nodes):
        if node is None or not isinstance(node.strategy, GraphStrategy):
            rows.append({"node": i, "accuracy": None})
            continue
        g = node.strategy
        partner = next(j for j in range(len(nodes)) if j != i and groups[j] == groups[i])
        rows.append({"node": i, "permutation": perms[i], "accuracy": node.progress.accuracy,
                     "partner_share": g.graph.share(ids[partner]), "degree": g.graph.degree,
                     "wakeups": g.wakeups, "rounds": node.progress.round,
                     "epsilon_spent": g.ledger.spent if g.ledger.noisy else None})
    acc = [r["accuracy"] for r in rows if r["accuracy"] is not None]
    shares = [r["partner_share"] for r in rows if "partner_share" in r]
    return {"seed": seed, "nodes": rows,
            "mean_accuracy": float(np.mean(acc)) if acc else None,
            "min_partner_share": min(shares) if shares else None,
            "mean_wakeups": float(np.mean([r["wakeups"] for r in rows if "wakeups" in r])),
            "wall_seconds": time.perf_counter() - started}


def _spread(values: Sequence[float]) -> dict[str, Any]:
    v = np.asarray(values, dtype=np.float64)
    return {"median": float(np.median(v)), "min": float(v.min()), "max": float(v.max()),
            "per_seed": [float(x) for x in v]}


def run(settings: Settings, progress: bool = False, node_level: int = 0) -> dict[str, Any]:
    """Every seed of the graph simulation and the baselines (and ``node_level`` seeds of real
    nodes); the summary."""
    import torch

    torch.set_num_threads(1)
    started = time.perf_counter()
    graph: dict[int, GraphOutcome] = {}
    base: dict[str, dict[int, list[float]]] = {b: {} for b in settings.baselines}
    for seed in settings.seeds:
        graph[seed] = simulate_graph(settings, seed)
        if progress:
            g = graph[seed]
            print(f"seed {seed}: graph {100 * np.mean(g.accuracy):.1f}%, partner share min "
                  f"{100 * min(g.partner_share):.0f}% ({time.perf_counter() - started:.0f}s)",
                  file=sys.stderr, flush=True)
        for b in settings.baselines:
            base[b][seed] = run_baseline(settings, b, seed)
            if progress:
                print(f"seed {seed}: {b} {100 * np.mean(base[b][seed]):.1f}%", file=sys.stderr,
                      flush=True)
    seeds = list(settings.seeds)
    accuracy = {"graph": _spread([float(np.mean(graph[s].accuracy)) for s in seeds])}
    for b in settings.baselines:
        accuracy[b] = _spread([float(np.mean(base[b][s])) for s in seeds])
    paired = {b: _spread([float(np.mean(graph[s].accuracy) - np.mean(base[b][s])) for s in seeds])
              for b in settings.baselines}
    min_share = [min(graph[s].partner_share) for s in seeds]
    mean_share = [float(np.mean(graph[s].partner_share)) for s in seeds]
    nodes_meeting = [sum(x >= CRITERION for x in graph[s].partner_share) for s in seeds]
    first = graph[seeds[0]]
    nodes_runs = []
    for seed in seeds[:node_level]:
        with tempfile.TemporaryDirectory(prefix="paper_graph_") as tmp:
            nodes_runs.append(node_level_run(settings, seed, Path(tmp)))
        if progress:
            r = nodes_runs[-1]
            print(f"seed {seed}: node-level graph {100 * (r['mean_accuracy'] or 0):.1f}%, partner "
                  f"share min {100 * (r['min_partner_share'] or 0):.0f}%, "
                  f"{r['mean_wakeups']:.0f} wake-ups a node", file=sys.stderr, flush=True)
    return {
        "settings": {**asdict(settings), "epsilon": _json_float(settings.epsilon)},
        "kind": "in-process maths simulation (real torch models and trainers, no transport)",
        "accuracy": accuracy,
        "labels": LABELS,
        "graph_minus_baseline": paired,
        "partner_share": {"min_over_nodes": _spread(min_share),
                          "mean_over_nodes": _spread(mean_share),
                          "nodes_at_or_above_criterion": nodes_meeting,
                          "criterion": CRITERION, "uniform": 1 / 11,
                          "met_on_every_node_every_seed": all(m >= CRITERION for m in min_share)},
        "privacy": {"epsilon_per_wakeup": _json_float(settings.epsilon),
                    "epsilon_spent_per_node": [_json_float(e) for e in first.epsilon_spent],
                    "laplace_scale_per_node": first.noise_scale,
                    "confidence_per_node": first.confidence,
                    "sensitivity_L0": settings.sensitivity,
                    "note": "nominal for SGD-trained networks: one sample's effect on a round "
                            "of SGD is not bounded by L0/m without clipping"},
        "per_seed": {str(s): asdict(graph[s]) | {"baselines": {b: base[b][s]
                                                               for b in settings.baselines}}
                     for s in seeds},
        "node_level": {"kind": "real nodes (strategy graph) through p2p.simulation.host on a "
                               "virtual clock, one wake-up per training round on average",
                       "runs": nodes_runs},
        "elapsed_seconds": time.perf_counter() - started,
    }


def _json_float(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def print_summary(result: dict[str, Any]) -> None:
    s = result["settings"]
    print(f"S3 task ({s['task']}, 12 nodes), {s['wakeups']} wake-ups per node, "
          f"{len(s['seeds'])} seeds: {result['kind']}")
    print("mean node accuracy, median [min, max] over seeds; graph minus scheme (paired):")
    for name, acc in result["accuracy"].items():
        diff = result["graph_minus_baseline"].get(name)
        extra = (f"   graph - this: {100 * diff['median']:+.1f} "
                 f"[{100 * diff['min']:+.1f}, {100 * diff['max']:+.1f}]") if diff else ""
        print(f"  {LABELS[name]:44s} {100 * acc['median']:5.1f} [{100 * acc['min']:.1f}, "
              f"{100 * acc['max']:.1f}]{extra}")
    p = result["partner_share"]
    print(f"edge weight on the same-permutation partner: smallest over nodes, median "
          f"{100 * p['min_over_nodes']['median']:.0f}% [{100 * p['min_over_nodes']['min']:.0f}, "
          f"{100 * p['min_over_nodes']['max']:.0f}]; mean over nodes median "
          f"{100 * p['mean_over_nodes']['median']:.0f}% (criterion {100 * p['criterion']:.0f}%, "
          f"uniform {100 * p['uniform']:.0f}%); nodes meeting it per seed: "
          f"{p['nodes_at_or_above_criterion']}")
    for r in result["node_level"]["runs"]:
        print(f"node-level (real nodes, sim host) seed {r['seed']}: mean accuracy "
              f"{100 * (r['mean_accuracy'] or 0):.1f}%, smallest partner share "
              f"{100 * (r['min_partner_share'] or 0):.0f}%, {r['mean_wakeups']:.0f} wake-ups a node")
    pv = result["privacy"]
    print(f"privacy: epsilon {pv['epsilon_per_wakeup']} per wake-up, spent per node "
          f"{pv['epsilon_spent_per_node'][0]} after {s['wakeups']} wake-ups; Laplace scale "
          f"s_i = L0/(eps m_i) = {pv['laplace_scale_per_node'][0]:.3g} (node 0; {pv['note']})")


def _floats(text: str) -> float:
    return math.inf if text.strip().lower() in ("inf", "none", "off") else float(text)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=5, help="number of seeds (default 5)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--task", default="digits")
    p.add_argument("--network", default="mlp")
    p.add_argument("--wakeups", type=int, default=200, help="wake-ups per node (default 200)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--public-size", type=int, default=200)
    p.add_argument("--mu", type=float, default=Settings.mu)
    p.add_argument("--beta", type=float, default=Settings.beta)
    p.add_argument("--delta", type=float, default=Settings.delta)
    p.add_argument("--kappa", type=int, default=Settings.kappa)
    p.add_argument("--local-lipschitz", type=float, default=Settings.local_lipschitz)
    p.add_argument("--max-neighbours", type=int, default=Settings.max_neighbours)
    p.add_argument("--epsilon", type=_floats, default=math.inf,
                   help="per-wake-up epsilon of the Laplace noise (default inf: no noise)")
    p.add_argument("--sensitivity", type=float, default=1.0, help="L0 of s_i = L0/(eps m_i)")
    p.add_argument("--baselines", default=",".join(BASELINES),
                   help=f"comma-separated among {', '.join(BASELINES)} ('' for none)")
    p.add_argument("--node-level", type=int, default=0, metavar="N",
                   help="also run the first N seeds as real nodes through the simulation host")
    p.add_argument("--progress", action="store_true")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="write every figure as JSON to PATH ('-' or no value: stdout)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run and print (and with ``--json`` write) the comparison; 0 on success."""
    args = parse_args(argv)
    baselines = tuple(b for b in (x.strip() for x in args.baselines.split(",")) if b)
    for b in baselines:
        if b not in BASELINES:
            raise SystemExit(f"--baselines: {b!r} is not one of {', '.join(BASELINES)}")
    settings = Settings(task=args.task, network=args.network,
                        seeds=tuple(range(args.first_seed, args.first_seed + args.seeds)),
                        wakeups=args.wakeups, lr=args.lr, batch_size=args.batch_size,
                        public_size=args.public_size, mu=args.mu, beta=args.beta,
                        delta=args.delta, kappa=args.kappa, local_lipschitz=args.local_lipschitz,
                        max_neighbours=args.max_neighbours, epsilon=args.epsilon,
                        sensitivity=args.sensitivity, baselines=baselines)
    result = run(settings, progress=args.progress, node_level=args.node_level)
    if args.json == "-":
        json.dump(result, sys.stdout, indent=1)
        print()
    else:
        print_summary(result)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as fh:
                json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(main())
