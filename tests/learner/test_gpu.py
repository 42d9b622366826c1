"""The device path on a CUDA device: skipped where none exists (run with ``pytest -m gpu``).

On the CPU the same code paths are tested with the transfers counted
(tests/learner/test_module_models.py, tests/p2p/runtime/test_own_model.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from module_kit import resnet

from learner import ModelLayout, NetworkSpec, TrainConfig
from learner.module_spec import ModuleModelSpec
from learner.modules.build import ModuleRecipe, build_partial_module
from learner.network import PartialNetwork
from learner.schemes import averaging_level
from learner.trainer import Trainer

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_a_module_trains_on_cuda_with_one_transfer_each_way_per_round(precision: str) -> None:
    recipe = ModuleRecipe(resnet, (1, 8, 8), 10, (ModuleModelSpec("global", units=0.5),))
    net = build_partial_module(recipe, 0)
    rng = np.random.default_rng(0)
    x = rng.random((64, 64), dtype=np.float32)
    y = rng.integers(0, 10, 64)
    trainer = Trainer(net, x, y, TrainConfig(batch_size=16), device="cuda",
                      precision=precision)
    assert next(net.parameters()).is_cuda
    before = dict(net.transfers)
    for _ in range(3):
        first = trainer.train_round()
        trained = net.extract("global")
        net.assign("global", trained)
        assert np.array_equal(net.extract("global"), trained.astype(np.float32))
    assert net.transfers["to_host"] - before["to_host"] == 3
    assert net.transfers["to_device"] - before["to_device"] == 3
    assert np.isfinite(first)
    assert trainer.evaluate(x, y).samples == 64


def test_a_notation_network_moves_its_models_on_cuda_exactly() -> None:
    network = NetworkSpec.parse("64=48=32=10")
    cpu = PartialNetwork(ModelLayout(network, averaging_level(network, 80)), seed=1)
    gpu = PartialNetwork(ModelLayout(network, averaging_level(network, 80)), seed=1).cuda()
    assert np.array_equal(cpu.extract("global"), gpu.extract("global"))
    values = cpu.extract("global") + 0.5
    cpu.assign("global", values)
    gpu.assign("global", values)
    assert torch.equal(cpu.flat, gpu.flat.cpu())
