#!/usr/bin/env python
"""Benchmark: one SGD step through the daemon's trainer on one core, against plain torch.

For each notation network (default: mnist5k's ``cnn`` and ``mlp``, and the
node's default ``64=48=32=10``) and batch size (default:
:class:`learner.TrainConfig`'s), it times ``Trainer.train_steps`` on a
:class:`learner.PartialNetwork` cut at the 80 % averaging level, and the same
step on an equivalent ``nn.Sequential`` of torch's own modules (the cost of
keeping every parameter in one flat tensor); it also times moving the global
model out and back in (``extract`` + ``assign``), which the node does once per
averaging. For the user's modules (``--modules``: the default MLP as an
``nn.Sequential`` and examples/own-model's ResNet, both 80 % units global) it
times the trainer on the node's :class:`~learner.modules.partial.PartialModule`
against a plain torch loop on the same module, data and batch size, both
called for ``steps_per_round`` steps at a time as the daemon's rounds call it: the
trainer's overhead, and the trainer's steps/s on each device present (cpu,
cuda, mps; ``--cpu-only``: the CPU alone). torch runs on one thread; both runs of a pair alternate, and the
medians of wall and thread CPU time are reported (on a busy machine the CPU
time is the steadier figure).

    .venv/bin/python scripts/bench/train_step.py [--networks cnn,mlp] [--batch-sizes 32]
    .venv/bin/python scripts/bench/train_step.py --networks none --modules mlp,resnet
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
from learner.module_spec import ModuleModelSpec
from learner.modules.build import ModuleRecipe, build_partial_module
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
    return measure_pair(fn, None, inner, repeats)[0]


def measure_pair(fn: Callable[[], object], other: Callable[[], object] | None, inner: int,
                 repeats: int) -> list[tuple[float, float]]:
    """Median wall and CPU seconds per call of `fn` (and of `other`, alternating with it
    repeat by repeat, so that both see the same machine load)."""
    fns = [fn] if other is None else [fn, other]
    for f in fns:
        f()
    walls: list[list[float]] = [[] for _ in fns]
    cpus: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, f in enumerate(fns):
            w0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(inner):
                f()
            cpus[i].append((time.thread_time() - c0) / inner)
            walls[i].append((time.perf_counter() - w0) / inner)
    return [(statistics.median(w), statistics.median(c)) for w, c in zip(walls, cpus,
                                                                           strict=True)]


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


def default_mlp(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The node's default network, 64=48=32=10 with relu, as the user would write it."""
    return nn.Sequential(nn.Flatten(), nn.Linear(input_shape[-1], 48), nn.ReLU(),
                         nn.Linear(48, 32), nn.ReLU(), nn.Linear(32, num_classes))


def own_resnet() -> Callable[..., nn.Module]:
    from learner.user_code import FactoryRef

    root = Path(__file__).resolve().parents[3]
    ref = FactoryRef.parse(f"{root / 'examples' / 'own-model' / 'model.py'}:build", "model")
    return ref.resolve("model")


#: --modules: name -> (factory, input shape of one sample)
MODULES: dict[str, tuple[Callable[[], Callable[..., nn.Module]], tuple[int, ...]]] = {
    "mlp": (lambda: default_mlp, (64,)),
    "resnet": (own_resnet, (1, 28, 28)),
}


def bench_module(name: str, batch: int, inner: int, repeats: int,
                 device: str = "cpu") -> dict[str, object]:
    """The trainer on the node's PartialModule against a plain loop on the same module."""
    factory, shape = MODULES[name]
    recipe = ModuleRecipe(factory(), shape, 10, (ModuleModelSpec("global", units=0.8),))
    node = build_partial_module(recipe, seed=0)
    rng = np.random.default_rng(0)
    x = rng.random((1024, *shape), dtype=np.float32)
    y = rng.integers(0, 10, 1024)
    config = TrainConfig(batch_size=batch)
    trainer = Trainer(node, x, y, config, device=device)

    plain = recipe.build(0).to(device)
    opt = torch.optim.SGD(plain.parameters(), lr=config.lr)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    order = np.random.default_rng(1).permutation(1024)
    cursor = [0]

    def plain_steps() -> None:  # the same batches: a seeded pass, reshuffled when done
        plain.train()
        for _ in range(steps):
            if cursor[0] + batch > order.size:
                order[:] = np.random.default_rng(cursor[0]).permutation(1024)
                cursor[0] = 0
            index = torch.from_numpy(order[cursor[0]:cursor[0] + batch])
            cursor[0] += batch
            xb, yb = xt[index].to(device), yt[index].to(device)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(plain(xb), yb).backward()
            opt.step()

    # as the daemon drives it: one call per round of steps_per_round steps
    steps = config.steps_per_round
    ours, base = measure_pair(lambda: trainer.train_steps(steps), plain_steps,
                              max(1, inner // steps), repeats)
    ours, base = (ours[0] / steps, ours[1] / steps), (base[0] / steps, base[1] / steps)
    return {"module": name, "device": device, "batch_size": batch,
            "values": node.layout.total_parameters, "steps_per_call": steps,
            "step_ms": 1000 * ours[0], "step_cpu_ms": 1000 * ours[1],
            "torch_step_ms": 1000 * base[0], "torch_step_cpu_ms": 1000 * base[1],
            "overhead_cpu": ours[1] / base[1], "steps_per_second": 1.0 / ours[0]}


def devices_present() -> list[str]:
    found = ["cpu"]
    if torch.cuda.is_available():
        found.append("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append("mps")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="mnist5k")
    parser.add_argument("--networks", default="cnn,mlp,64=48=32=10",
                        help="names the task knows or notations, comma-separated "
                             "(\"none\": no notation network)")
    parser.add_argument("--modules", default="mlp,resnet",
                        help=f"user modules against a plain loop ({', '.join(MODULES)}; "
                             "\"none\": none)")
    parser.add_argument("--cpu-only", action="store_true",
                        help="the modules on the CPU alone, not on every device present")
    parser.add_argument("--batch-sizes", default=str(TrainConfig().batch_size))
    parser.add_argument("--inner", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    networks = [] if args.networks == "none" else args.networks.split(",")
    rows = [bench(resolve_network(args.task, name.strip()), int(b), args.inner, args.repeats)
            for name in networks for b in args.batch_sizes.split(",")]
    print(f"{'network':42} {'batch':>5} {'step ms':>8} {'cpu ms':>7} {'torch ms':>9} "
          f"{'torch cpu':>9} {'x/a ms':>7}")
    for r in rows:
        print(f"{r['network']!s:42} {r['batch_size']:>5} {r['step_ms']:8.2f} "
              f"{r['step_cpu_ms']:7.2f} {r['torch_step_ms']:9.2f} {r['torch_step_cpu_ms']:9.2f} "
              f"{r['extract_assign_ms']:7.2f}")
    print("one torch thread; medians over repeats; x/a: extract + assign of the 80 % global "
          "model; torch: the same step on nn.Sequential")
    modules = [] if args.modules == "none" else args.modules.split(",")
    devices = ["cpu"] if args.cpu_only else devices_present()
    module_rows = [bench_module(name.strip(), int(b), args.inner, args.repeats, device)
                   for name in modules for b in args.batch_sizes.split(",")
                   for device in devices]
    if module_rows:
        print(f"\n{'module':8} {'device':6} {'batch':>5} {'values':>7} {'step ms':>8} "
              f"{'cpu ms':>7} {'plain ms':>9} {'plain cpu':>9} {'ratio':>6} {'steps/s':>8}")
    for r in module_rows:
        print(f"{r['module']!s:8} {r['device']!s:6} {r['batch_size']:>5} {r['values']:>7} "
              f"{r['step_ms']:8.2f} {r['step_cpu_ms']:7.2f} {r['torch_step_ms']:9.2f} "
              f"{r['torch_step_cpu_ms']:9.2f} {r['overhead_cpu']:6.3f} "
              f"{r['steps_per_second']:8.1f}")
    if module_rows:
        print("modules: the node's trainer on its PartialModule (80 % units global) against a "
              "plain torch loop on the same module, data and batches, both called for "
              "steps_per_round (10) steps as a round does; ratio: CPU time, trainer / plain; "
              "steps/s: the trainer's, wall time")
    if args.json:
        args.json.write_text(json.dumps({"networks": rows, "modules": module_rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
