#!/usr/bin/env python
"""Benchmark: one lock-step training round of N nodes, plain loop against batched.

For each N (default 10, 100, 1000) it builds two identical sets of N nodes:
the task's default network (a :class:`learner.PartialNetwork`, every node its
own seed) and a :class:`learner.Trainer` per node on its own shard of a
generated task (``mnist1d`` by default; ``--samples-per-node`` samples each,
>= 50), with the daemon's training defaults (:class:`learner.TrainConfig`:
``steps_per_round`` mini-batches of ``batch_size``). It times one round of
the first set with each trainer's own loop and one round of the second set with
:func:`learner.batched_training.train_steps_batched`, in the same run, then
prints both wall times, the speed-up, and the largest absolute difference
between the two sets' parameters and losses after the round (the batched step
must give the plain loop's results).

Both paths are warmed up on two throwaway nodes first. torch uses
``--threads`` intra-op threads (default 1); with one thread the main thread's
CPU time (also printed) is the steadier figure on a shared machine, where
wall times are noisy; ``--repeats`` times the round that many times (on fresh node
sets) and keeps the medians.

    .venv/bin/python scripts/bench/batched.py [--nodes 10,100,1000] [--task mnist1d]
        [--samples-per-node 60] [--threads 1] [--repeats 1] [--json PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from learner import ModelLayout, NetworkSpec, TrainConfig
from learner.batched_training import train_steps_batched
from learner.network import PartialNetwork
from learner.tasks import get_task, load_task, resolve_network
from learner.trainer import Trainer


def make_nodes(n: int, task: str, samples: int, seed: int) -> list[Trainer]:
    """`n` nodes, node i training on every n-th sample from i of a generated task."""
    data = load_task(task, None, seed, num_samples=n * samples)
    network = NetworkSpec.parse(resolve_network(task, None))
    layout = ModelLayout(network, [])
    return [Trainer(PartialNetwork(layout, seed=seed * 100_003 + i), data.x[i::n], data.y[i::n],
                    dataclasses.replace(TrainConfig(), seed=seed * 100_003 + i))
            for i in range(n)]


def _flat(trainers: list[Trainer]) -> torch.Tensor:
    return torch.stack([torch.cat([p.detach().flatten() for p in t.model.parameters()])
                        for t in trainers])


def bench(n: int, task: str, samples: int, repeats: int, seed: int) -> dict[str, float | int]:
    """One round of `n` nodes both ways; medians over `repeats` fresh pairs of node sets."""
    steps = TrainConfig().steps_per_round
    plain_s: list[float] = []
    batched_s: list[float] = []
    plain_cpu: list[float] = []
    batched_cpu: list[float] = []
    max_param = max_loss = 0.0
    for _ in range(repeats):
        plain, batched = make_nodes(n, task, samples, seed), make_nodes(n, task, samples, seed)
        t0, c0 = time.perf_counter(), time.thread_time()
        loss_plain = [t.train_steps(steps) for t in plain]
        t1, c1 = time.perf_counter(), time.thread_time()
        loss_batched = train_steps_batched(batched, steps)
        t2, c2 = time.perf_counter(), time.thread_time()
        plain_s.append(t1 - t0)
        batched_s.append(t2 - t1)
        plain_cpu.append(c1 - c0)
        batched_cpu.append(c2 - c1)
        max_param = max(max_param, float((_flat(plain) - _flat(batched)).abs().max()))
        max_loss = max(max_loss, float(np.max(np.abs(np.subtract(loss_plain, loss_batched)))))
    p, b = statistics.median(plain_s), statistics.median(batched_s)
    pc, bc = statistics.median(plain_cpu), statistics.median(batched_cpu)
    return {"nodes": n, "steps": steps, "plain_seconds": p, "batched_seconds": b,
            "speedup": p / b, "plain_cpu_seconds": pc, "batched_cpu_seconds": bc,
            "cpu_speedup": pc / bc, "max_abs_param_diff": max_param,
            "max_abs_loss_diff": max_loss}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--nodes", default="10,100,1000",
                        help="comma-separated node counts (default: 10,100,1000)")
    parser.add_argument("--task", default="mnist1d", help="a generated task: mnist1d or synthetic")
    parser.add_argument("--samples-per-node", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the rows there as JSON")
    args = parser.parse_args(argv)
    if get_task(args.task).num_samples is None:
        parser.error(f"--task {args.task}: expected a generated task (mnist1d, synthetic)")
    if args.samples_per_node < 50:
        parser.error("--samples-per-node: expected >= 50")
    if args.repeats < 1 or args.threads < 1:
        parser.error("--repeats and --threads: expected >= 1")
    nodes = [int(v) for v in args.nodes.split(",")]
    torch.set_num_threads(args.threads)
    network = resolve_network(args.task, None)
    print(f"task {args.task}, network {network}, {args.samples_per_node} samples per node, "
          f"{TrainConfig().steps_per_round} steps of batch {TrainConfig().batch_size} per round, "
          f"torch threads {torch.get_num_threads()}")
    warm = make_nodes(2, args.task, args.samples_per_node, args.seed + 1)
    train_steps_batched(warm, 1)
    warm[0].train_steps(1)
    rows = []
    print(f"{'nodes':>6} {'plain s':>9} {'batched s':>10} {'speed-up':>9} {'plain cpu':>10} "
          f"{'batched cpu':>12} {'cpu speed-up':>13} {'max|dparam|':>12} {'max|dloss|':>11}")
    for n in nodes:
        row = bench(n, args.task, args.samples_per_node, args.repeats, args.seed)
        rows.append(row)
        print(f"{n:>6} {row['plain_seconds']:>9.3f} {row['batched_seconds']:>10.3f} "
              f"{row['speedup']:>8.1f}x {row['plain_cpu_seconds']:>10.3f} "
              f"{row['batched_cpu_seconds']:>12.3f} {row['cpu_speedup']:>12.1f}x "
              f"{row['max_abs_param_diff']:>12.3g} "
              f"{row['max_abs_loss_diff']:>11.3g}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"task": args.task, "network": network,
                                         "threads": args.threads, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
