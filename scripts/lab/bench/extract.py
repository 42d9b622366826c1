#!/usr/bin/env python
"""Benchmark: extract + assign of a partial model against a plain torch.cat.

Network 784=300=100=10 (the papers' MNIST layout). For a global model at the
papers' 80% averaging level (784-240-80-10), one covering the whole network
(784-300-100-10) and a semi-local model (0-30-10-0 depending on the 80% G), it
times ``extract`` (into a float64 vector) followed by ``assign`` (back, with
validation), and in the same run the baseline: ``torch.cat`` of all parameters
of an equivalent ``nn.Sequential`` of ``nn.Linear`` layers plus the inverse copy
back into each parameter (and the same with a float64 round trip, which is what
a float64 gossip vector costs). Prints medians and ratios.

    .venv/bin/python scripts/bench/extract.py [--repeats 15] [--inner 20] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from learner import ModelLayout, NetworkSpec, PartialMLP, PartialModelSpec

NETWORK = "784=300=100=10"
G80 = PartialModelSpec.parse("G", "784-240-80-10")
CASES: dict[str, tuple[list[PartialModelSpec], str]] = {
    "global 80%": ([G80], "G"),
    "global 100%": ([PartialModelSpec.parse("G", "784-300-100-10")], "G"),
    "semi-local": ([G80, PartialModelSpec.parse("A", "0-30-10-0", depends_on=["G"])], "A"),
}


def median_time(fn: Callable[[], None], repeats: int, inner: int) -> float:
    """Median over ``repeats`` of the mean time of ``inner`` calls, in seconds."""
    fn()  # warm up
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples)


def baseline(sizes: tuple[int, ...]) -> tuple[Callable[[], None], Callable[[], None], int]:
    layers = [nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True)]
    model = nn.Sequential(*layers)
    params = list(model.parameters())
    total = sum(p.numel() for p in params)

    def cat_and_back() -> None:
        with torch.no_grad():
            vec = torch.cat([p.detach().reshape(-1) for p in params])
            offset = 0
            for p in params:
                n = p.numel()
                p.copy_(vec[offset:offset + n].view_as(p))
                offset += n

    def cat_f64_and_back() -> None:
        with torch.no_grad():
            vec = torch.cat([p.detach().reshape(-1) for p in params]).numpy().astype(np.float64)
            back = torch.from_numpy(vec.astype(np.float32))
            offset = 0
            for p in params:
                n = p.numel()
                p.copy_(back[offset:offset + n].view_as(p))
                offset += n

    return cat_and_back, cat_f64_and_back, total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--inner", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    net = NetworkSpec.parse(NETWORK)
    cat_fn, cat64_fn, total = baseline(net.sizes)
    results: dict[str, object] = {
        "network": NETWORK,
        "total_parameters": total,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "threads": args.threads,
        "repeats": args.repeats,
        "inner": args.inner,
        "models": {},
    }
    print(f"network {NETWORK}: {total} parameters, torch {torch.__version__}, "
          f"{args.threads} thread(s), median of {args.repeats} x {args.inner} calls")
    for label, (specs, name) in CASES.items():
        layout = ModelLayout(net, specs)
        model = PartialMLP(layout, seed=0)
        n = layout.vector_length(name)
        out = np.empty(n)
        vec = model.extract(name)

        def ours(model: PartialMLP = model, name: str = name) -> None:
            model.assign(name, model.extract(name))

        def only_extract(model: PartialMLP = model, name: str = name,
                         out: np.ndarray = out) -> None:
            model.extract(name, out=out)

        def only_assign(model: PartialMLP = model, name: str = name,
                        vec: np.ndarray = vec) -> None:
            model.assign(name, vec)

        t_cat = median_time(cat_fn, args.repeats, args.inner)
        t_ours = median_time(ours, args.repeats, args.inner)
        t_cat64 = median_time(cat64_fn, args.repeats, args.inner)
        t_ext = median_time(only_extract, args.repeats, args.inner)
        t_asg = median_time(only_assign, args.repeats, args.inner)
        row = {
            "models": [str(m) for m in specs],
            "model": name,
            "vector_length": n,
            "blocks": len(layout.blocks(name)),
            "extract_assign_ms": t_ours * 1e3,
            "extract_out_ms": t_ext * 1e3,
            "assign_ms": t_asg * 1e3,
            "cat_and_back_ms": t_cat * 1e3,
            "cat_float64_and_back_ms": t_cat64 * 1e3,
            "ratio_vs_cat": t_ours / t_cat,
            "ratio_vs_cat_float64": t_ours / t_cat64,
        }
        results["models"][label] = row  # type: ignore[index]
        print(f"{label}: {name}={layout.spec(name).notation()} ({n} values, "
              f"{row['blocks']} blocks): extract+assign {t_ours * 1e3:.3f} ms "
              f"(extract {t_ext * 1e3:.3f}, assign {t_asg * 1e3:.3f}) | torch.cat of all "
              f"{total} + copy back {t_cat * 1e3:.3f} ms, via float64 {t_cat64 * 1e3:.3f} ms | "
              f"ratio {t_ours / t_cat:.2f}x vs cat, {t_ours / t_cat64:.2f}x vs cat+float64")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
