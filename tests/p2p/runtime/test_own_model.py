"""Nodes training the user's module on the user's datasets, over an in-memory network."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from module_kit import item_data, mlp, tensor_data

from p2p.api import node_config
from p2p.runtime.node import Node
from p2p.testing import MemoryNetwork, running, wait_until
from p2p.wire.identity import Identity

ADDRESSES = ["10.0.0.1:7000", "10.0.0.2:7000"]


def factory_node(net: MemoryNetwork, root: Path, index: int, **sections: Any) -> Node:
    data_dir = root / f"node{index}"
    data_dir.mkdir(mode=0o700, parents=True)
    defaults: dict[str, Any] = {
        "node": {"name": f"node{index}", "data_dir": str(data_dir), "seed": index,
                 "listen": ADDRESSES[index], "bootstrap": ADDRESSES[:1] if index else []},
        "network": {"factory": mlp},
        "models": [{"name": "global", "params": ["1.*"]}],
        "data": {"factory": tensor_data, "node_index": index, "num_nodes": 2},
        "training": {"rounds": 6, "eval_every": 2, "steps_per_round": 3, "lr": 0.1},
        "peer_sampling": {"period": 0.05},
    }
    for key, value in sections.items():  # merged into the defaults; None removes a key
        if isinstance(value, dict):
            merged = {**defaults.get(key, {}), **value}
            value = {k: v for k, v in merged.items() if v is not None}
        defaults[key] = value
    config = node_config(**defaults)
    transport = net.transport(Identity.load_or_create(data_dir), ADDRESSES[index])
    node = Node(config, transport=transport)
    transport.tags = frozenset(node.by_fingerprint)
    return node


def spread(nodes: list[Node], model: str) -> float:
    vectors = [n.cores[model].values for n in nodes]
    return float(np.linalg.norm(vectors[1] - vectors[0]) / np.linalg.norm(vectors[0]))


async def test_two_nodes_average_the_shared_part_of_their_own_module(tmp_path: Path) -> None:
    net = MemoryNetwork()
    nodes = [factory_node(net, tmp_path, i) for i in range(2)]
    assert nodes[0].learning.fingerprints == nodes[1].learning.fingerprints
    # the shared part starts identical, the rest from each node's seed
    assert spread(nodes, "global") == 0.0
    heads = [n.learning.network.module[3].weight for n in nodes]  # type: ignore[index]
    assert not torch.equal(heads[0], heads[1])
    async with running(nodes):
        await wait_until(lambda: all(n.progress.finished for n in nodes))
        at_finish = spread(nodes, "global")
        await wait_until(lambda: spread(nodes, "global") < min(1e-3, at_finish / 10))
    for node in nodes:
        assert node.model_counters("global")["pushes_received"] > 0
        assert node.progress.metrics["accuracy"] == node.progress.accuracy
        assert node.progress.accuracy is not None and node.progress.accuracy > 0.5
        status = node.admin.status()
        assert status.metrics is not None and "accuracy" in status.metrics
        assert node.admin.metrics().counters["task.accuracy"] == status.metrics["accuracy"]
    local = [n.learning.network.module[3].weight for n in nodes]  # type: ignore[index]
    assert not torch.allclose(local[0], local[1])  # the heads stay each node's own


def mse(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(outputs.squeeze(1), targets)


class MeanError:
    """A metrics class: the root of the mean squared error over the whole test set."""

    def __init__(self) -> None:
        self.total, self.count = 0.0, 0

    def update(self, outputs: torch.Tensor, targets: torch.Tensor) -> None:
        self.total += float((outputs.squeeze(1) - targets).pow(2).sum())
        self.count += len(targets)

    def compute(self) -> dict[str, float]:
        return {"rmse": (self.total / self.count) ** 0.5}


def regression(node_index: int) -> tuple[object, object]:
    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(node_index)
    x = torch.randn(200, 16, generator=g)
    w = torch.linspace(-1, 1, 16)
    return (TensorDataset(x, x @ w), TensorDataset(x[:50], (x @ w)[:50]))


def one_output(input_shape: tuple[int, ...]) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(input_shape[0], 8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 1))


async def test_a_regression_node_reports_its_own_metrics(tmp_path: Path) -> None:
    node = factory_node(MemoryNetwork(), tmp_path, 0,
                        network={"factory": one_output},
                        models=[{"name": "global", "params": ["0.*"]}],
                        data={"factory": regression},
                        training={"loss": mse, "metrics": MeanError, "rounds": 4})
    async with running([node]):
        await wait_until(lambda: node.progress.finished)
    assert node.progress.accuracy is None
    assert set(node.progress.metrics) == {"rmse"} and node.progress.metrics["rmse"] > 0
    assert node.admin.status().metrics == node.progress.metrics


async def test_items_read_through_a_data_loader(tmp_path: Path) -> None:
    node = factory_node(MemoryNetwork(), tmp_path, 0, data={"factory": item_data},
                        training={"rounds": 4, "eval_every": 4})
    assert node.learning.trainer.batches is not None  # not a TensorDataset: the loader path
    async with running([node]):
        await wait_until(lambda: node.progress.finished)
    assert node.progress.accuracy is not None and node.progress.steps == 12


def test_the_same_data_trains_the_same_way_through_a_loader_or_in_memory(
        tmp_path: Path) -> None:
    """One seed, one dataset: both paths take the same number of samples per step and
    learn; only the order of the samples differs (a loader shuffles with its generator)."""
    losses = {}
    for name, factory in (("memory", tensor_data), ("loader", item_data)):
        node = factory_node(MemoryNetwork(), tmp_path / name, 0, data={"factory": factory})
        trainer = node.learning.trainer
        first = trainer.train_steps(1)
        for _ in range(20):
            last = trainer.train_steps(3)
        losses[name] = (first, last)
    for first, last in losses.values():
        assert last < first


@pytest.mark.parametrize("precision", ["bf16"])
def test_mixed_precision_on_the_cpu_trains(tmp_path: Path, precision: str) -> None:
    node = factory_node(MemoryNetwork(), tmp_path, 0, training={"precision": precision})
    trainer = node.learning.trainer
    first = trainer.train_steps(1)
    for _ in range(20):
        last = trainer.train_steps(3)
    assert last < first
    assert node.learning.network.module[1].weight.dtype == torch.float32  # type: ignore[index]


def halving(optimizer: torch.optim.Optimizer) -> object:
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)


async def test_the_optimizer_and_schedule_are_the_users_and_resume(tmp_path: Path) -> None:
    sections: dict[str, Any] = {"training": {"optimizer_factory": torch.optim.AdamW,
                                             "schedule": halving, "lr": 0.01}}
    node = factory_node(MemoryNetwork(), tmp_path, 0, **sections)
    trainer = node.learning.trainer
    assert isinstance(trainer.optimizer, torch.optim.AdamW)
    trainer.train_steps(12)
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.01 / 4)
    await node.save_checkpoint()
    again = factory_node(MemoryNetwork(), tmp_path / "again", 0, **sections)
    from p2p.runtime.state import restore_state

    state = node.store.load()
    assert state is not None
    restore_state(again, state)  # as a restart on the first node's directory would
    resumed = again.learning.trainer
    assert resumed.schedule.last_epoch == 12  # type: ignore[union-attr]
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(0.01 / 4)


def test_a_round_moves_each_shared_model_once_each_way(tmp_path: Path) -> None:
    """The node's round as the trainer task runs it: SGD steps on the module's device,
    then ModelSync folds them into the push-sum core and loads the merged values back.
    On the CPU the copies are counted all the same: one each way per model and round."""
    node = factory_node(MemoryNetwork(), tmp_path, 0, training={"device": "auto"},
                        models=[{"name": "global", "params": ["1.*"]},
                                {"name": "head", "units": {"3": 2}, "depends_on": ["global"]}])
    network = node.learning.network
    before = dict(network.transfers)  # type: ignore[union-attr]
    for _ in range(4):
        node.learning.trainer.train_round()
        node.sync.sync()
    moved = {k: v - before[k] for k, v in network.transfers.items()}  # type: ignore[union-attr]
    assert moved == {"to_host": 4 * 2, "to_device": 4 * 2}  # 2 shared models, 4 rounds


@pytest.mark.parametrize("factory", [tensor_data, item_data])
def test_a_notation_network_trains_on_the_users_datasets(tmp_path: Path, factory: Any) -> None:
    node = factory_node(MemoryNetwork(), tmp_path, 0,
                        network={"factory": None, "layers": "16=12=5"},
                        models=[{"name": "global", "neurons": "16-8-5"}],
                        data={"factory": factory})
    trainer = node.learning.trainer
    first = trainer.train_steps(1)
    for _ in range(20):
        last = trainer.train_steps(3)
    assert last < first
    assert node.learning.evaluate().samples == 100


def test_a_notation_network_that_does_not_fit_the_datasets_is_one_line(tmp_path: Path) -> None:
    from p2p.config import ConfigError

    with pytest.raises(ConfigError, match="inputs of shape 16 .* end with 5; got 16=12=10"):
        factory_node(MemoryNetwork(), tmp_path, 0, network={"factory": None, "layers": "16=12=10"},
                     models=[], data={"factory": tensor_data})


def test_dp_refuses_batch_norm_in_one_line(tmp_path: Path) -> None:
    from module_kit import resnet

    from p2p.config import ConfigError

    with pytest.raises(ConfigError, match="DP-SGD cannot train a module with BatchNorm"):
        factory_node(MemoryNetwork(), tmp_path, 0, network={"factory": resnet},
                     models=[{"name": "global", "params": ["features.*"]}],
                     data={"factory": None, "task": "digits"},
                     gossip={"privacy": "dp"})
