"""Private data per node: each node reads only its own file.

Write the files once (5,000 MNIST images bundled with the project, cut into
one training shard per node and a test set; nothing is downloaded)::

    python examples/own-model/data.py --nodes 8 --out examples/own-model/private

Each node's config then names its own file (``path`` may hold ``{node_index}``,
so one config serves every node of a local swarm); ``load`` is the factory the
config names (``[data] factory = "data.py:load"``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset


def load(path: str) -> dict[str, object]:
    """This node's training and test sets, from its own file."""
    with np.load(path) as f:
        x, y = f["x"], f["y"]
        x_test, y_test = f["x_test"], f["y_test"]

    def images(a: np.ndarray) -> torch.Tensor:  # bytes to floats in [0, 1]
        return torch.from_numpy(a.astype(np.float32) / 255.0)

    return {"train": TensorDataset(images(x), torch.from_numpy(y.astype(np.int64))),
            "test": TensorDataset(images(x_test), torch.from_numpy(y_test.astype(np.int64))),
            "num_classes": 10}


def write(nodes: int, out: Path, seed: int = 0) -> list[Path]:
    """One file per node: its shard of mnist5k and the shared test part (uint8 images)."""
    from learner import DataSpec, load_node_data

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(nodes):
        data = load_node_data(DataSpec(task="mnist5k", node_index=index, num_nodes=nodes,
                                       seed=seed))

        def as_bytes(rows: np.ndarray) -> np.ndarray:
            return np.rint(rows * 255).astype(np.uint8).reshape(-1, 1, 28, 28)

        path = out / f"node-{index}.npz"
        np.savez_compressed(path, x=as_bytes(data.train_x), y=data.train_y,
                            x_test=as_bytes(data.test_x), y_test=data.test_y)
        paths.append(path)
    return paths


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="write one private mnist5k file per node")
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "private")
    parser.add_argument("--seed", type=int, default=0, help="the split's seed")
    args = parser.parse_args()
    for written in write(args.nodes, args.out, args.seed):
        print(written)
