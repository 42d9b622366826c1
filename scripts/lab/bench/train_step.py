#!/usr/bin/env python
"""Benchmark: one SGD step of a partial network on one core, against plain torch.

For each network (default: mnist5k's ``cnn`` and ``mlp``) and batch size
(default: :class:`learner.TrainConfig`'s), it times ``Trainer.train_steps`` on a
:class:`learner.PartialNetwork` cut at the 80 % averaging level, and the same
step on an equivalent ``nn.Sequential`` of torch's own modules (the cost of
keeping every parameter in one flat tensor). It also times moving the global
model out and back in (``extract`` + ``assign``), which the node does once per
averaging. torch runs on one thread. Both wall time and the thread's CPU time
are reported (medians over repeats): on a busy machine the CPU time is the
steadier figure.

    .venv/bin/python scripts/bench/train_step.py [--networks cnn,mlp] [--batch-sizes 32]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from learner import ModelLayout, NetworkSpec, TrainConfig
from learner.network import PartialNetwork
from learner.schemes import averaging_level
from learner.tasks import resolve_network
from learner.trainer import Trainer


def torch_twin(network: NetworkSpec) -> nn.Sequential:
    """The same architecture from torch's own modules."""
    layers: list[nn.Module] = []
    if network.input_image is not None:
        layers.append(nn.Unflatten(1, network.input_image))
    act = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[network.activation]
    for part in range(1, network.num_layers):
        conv = network.conv(part)
        if conv is not None:
            layers.append(nn.Conv2d(network.sizes[part - 1], network.sizes[part], conv.kernel,
                                    stride=conv.stride, padding=conv.padding))
        else:
            if part == len(network.convs) + 1 and network.image_size is not None:
                layers.append(nn.Flatten())
            fan_in = network.sizes[part - 1] * network.weights_per_pair(part)
            layers.append(nn.Linear(fan_in, network.sizes[part]))
        if part < network.num_layers - 1:
            layers.append(act())
        if conv is not None and conv.pool > 1:
            layers.append(nn.MaxPool2d(conv.pool))
    return nn.Sequential(*layers)


def measure(fn: Callable[[], object], inner: int, repeats: int) -> tuple[float, float]:
    """Median wall and CPU seconds per call of `fn`."""
    fn()
    walls, cpus = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(inner):
            fn()
        cpus.append((time.thread_time() - c0) / inner)
        walls.append((time.perf_counter() - w0) / inner)
    return statistics.median(walls), statistics.median(cpus)


def bench(notation: str, batch: int, inner: int, repeats: int) -> dict[str, object]:
    network = NetworkSpec.parse(notation)
    layout = ModelLayout(network, averaging_level(network, 80))
    model = PartialNetwork(layout, seed=0)
    rng = np.random.default_rng(0)
    x = rng.random((1024, network.input_features), dtype=np.float32)
    y = rng.integers(0, network.sizes[-1], 1024)
    config = TrainConfig(batch_size=batch)
    trainer = Trainer(model, x, y, config)
    ours = measure(lambda: trainer.train_steps(1), inner, repeats)

    twin = torch_twin(network)
    opt = torch.optim.SGD(twin.parameters(), lr=config.lr)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    def plain() -> None:
        index = torch.randint(0, 1024, (batch,))
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(twin(xt[index]), yt[index]).backward()
        opt.step()

    base = measure(plain, inner, repeats)
    vector = model.extract("global")
    move = measure(lambda: model.assign("global", model.extract("global")), inner, repeats)
    return {"network": notation, "batch_size": batch, "optimizer": config.optimizer,
            "parameters": layout.total_parameters, "global80_length": int(vector.size),
            "step_ms": 1000 * ours[0], "step_cpu_ms": 1000 * ours[1],
            "torch_step_ms": 1000 * base[0], "torch_step_cpu_ms": 1000 * base[1],
            "extract_assign_ms": 1000 * move[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="mnist5k")
    parser.add_argument("--networks", default="cnn,mlp",
                        help="names the task knows or notations, comma-separated")
    parser.add_argument("--batch-sizes", default=str(TrainConfig().batch_size))
    parser.add_argument("--inner", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = [bench(resolve_network(args.task, name.strip()), int(b), args.inner, args.repeats)
            for name in args.networks.split(",") for b in args.batch_sizes.split(",")]
    print(f"{'network':42} {'batch':>5} {'step ms':>8} {'cpu ms':>7} {'torch ms':>9} "
          f"{'torch cpu':>9} {'x/a ms':>7}")
    for r in rows:
        print(f"{r['network']!s:42} {r['batch_size']:>5} {r['step_ms']:8.2f} "
              f"{r['step_cpu_ms']:7.2f} {r['torch_step_ms']:9.2f} {r['torch_step_cpu_ms']:9.2f} "
              f"{r['extract_assign_ms']:7.2f}")
    print("one torch thread; medians over repeats; x/a: extract + assign of the 80 % global "
          "model; torch: the same step on nn.Sequential")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
