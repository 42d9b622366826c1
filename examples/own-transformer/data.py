"""Private data per node: MNIST-1D-style signals (generated offline by the project).

Write one file per node once (nothing is downloaded)::

    python examples/own-transformer/data.py --nodes 4 --out examples/own-transformer/private

``load`` is the factory the config names (``[data] factory = "data.py:load"``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset


def load(path: str) -> dict[str, object]:
    """This node's training and test signals, from its own file."""
    with np.load(path) as f:
        parts = {k: torch.from_numpy(f[k]) for k in ("x", "y", "x_test", "y_test")}
    return {"train": TensorDataset(parts["x"].float(), parts["y"].long()),
            "test": TensorDataset(parts["x_test"].float(), parts["y_test"].long()),
            "num_classes": 10}


def write(nodes: int, out: Path, seed: int = 0) -> list[Path]:
    """One file per node: its shard of mnist1d and the shared test part, (1, 40) signals."""
    from learner import DataSpec, load_node_data

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(nodes):
        data = load_node_data(DataSpec(task="mnist1d", node_index=index, num_nodes=nodes,
                                       seed=seed))
        path = out / f"node-{index}.npz"
        np.savez_compressed(path, x=data.train_x.reshape(-1, 1, 40), y=data.train_y,
                            x_test=data.test_x.reshape(-1, 1, 40), y_test=data.test_y)
        paths.append(path)
    return paths


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="write one private mnist1d file per node")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "private")
    parser.add_argument("--seed", type=int, default=0, help="the split's seed")
    args = parser.parse_args()
    for written in write(args.nodes, args.out, args.seed):
        print(written)
