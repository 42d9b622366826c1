"""Tests for learner.trainer: config validation, determinism, learning, evaluation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from learner.data import DataSpec, load_node_data
from learner.trainer import TrainConfig, TrainConfigError, Trainer, evaluate_model


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """Tiny models: extra intra-op threads only spin on a busy 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _mlp(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


@pytest.fixture(scope="module")
def digits():
    return load_node_data(DataSpec(node_index=0, num_nodes=2, seed=0))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"lr": 0.0}, "train.lr"),
        ({"lr": float("nan")}, "train.lr"),
        ({"batch_size": 0}, "train.batch_size"),
        ({"steps_per_round": 0}, "train.steps_per_round"),
        ({"optimizer": "rmsprop"}, "train.optimizer"),
        ({"momentum": 1.0}, "train.momentum"),
        ({"weight_decay": -1.0}, "train.weight_decay"),
    ],
)
def test_bad_config_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(TrainConfigError, match=field):
        TrainConfig(**kwargs)


def test_training_is_deterministic_under_a_seed(digits) -> None:
    def run(seed: int) -> torch.Tensor:
        model = _mlp(0)
        trainer = Trainer(model, digits.train_x, digits.train_y, TrainConfig(seed=seed))
        trainer.train_steps(25)
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    a, b, c = run(1), run(1), run(2)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)  # the seed drives the mini-batch order


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_accuracy_beats_chance_after_a_few_rounds(digits, optimizer: str) -> None:
    lr = 0.01 if optimizer == "adam" else 0.1
    model = _mlp(0)
    trainer = Trainer(model, digits.train_x, digits.train_y,
                      TrainConfig(lr=lr, optimizer=optimizer, batch_size=32, seed=0))
    before = trainer.evaluate(digits.test_x, digits.test_y)
    losses = [trainer.train_round() for _ in range(15)]
    after = trainer.evaluate(digits.test_x, digits.test_y)
    assert trainer.steps_done == 150
    assert losses[-1] < losses[0]
    assert after.loss < before.loss
    assert after.accuracy > 0.5  # chance is 0.1
    assert after.samples == digits.test_y.size


def test_parameters_overwritten_between_calls(digits) -> None:
    model = _mlp(0)
    trainer = Trainer(model, digits.train_x, digits.train_y, TrainConfig(optimizer="adam", lr=0.01))
    trainer.train_steps(5)
    with torch.no_grad():  # what a merge does: write new values in place
        for p in model.parameters():
            p.mul_(0.5)
    snapshot = [p.detach().clone() for p in model.parameters()]
    loss = trainer.train_steps(5)
    assert math.isfinite(loss)
    assert any(not torch.equal(s, p) for s, p in zip(snapshot, model.parameters(), strict=True))


def test_evaluation_of_a_constant_model() -> None:
    model = nn.Linear(3, 4)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.copy_(torch.tensor([0.0, 0.0, 5.0, 0.0]))
    x = np.ones((4, 3), dtype=np.float32)
    y = np.array([2, 2, 2, 0])
    result = evaluate_model(model, x, y)
    assert result.accuracy == pytest.approx(0.75)
    probs = torch.softmax(torch.tensor([0.0, 0.0, 5.0, 0.0]), 0)
    expected = float(-(3 * torch.log(probs[2]) + torch.log(probs[0])) / 4)
    assert result.loss == pytest.approx(expected, rel=1e-5)


def test_bad_training_data() -> None:
    with pytest.raises(ValueError, match="expected x of shape"):
        Trainer(_mlp(0), np.zeros((3, 64)), np.zeros(4, dtype=np.int64), TrainConfig())
    with pytest.raises(ValueError, match="no samples"):
        Trainer(_mlp(0), np.zeros((0, 64)), np.zeros(0, dtype=np.int64), TrainConfig())
    trainer = Trainer(_mlp(0), np.zeros((3, 64)), np.zeros(3, dtype=np.int64),
                      TrainConfig(batch_size=100))
    assert math.isfinite(trainer.train_steps(2))  # batch capped at the shard size
    with pytest.raises(ValueError, match="steps >= 1"):
        trainer.train_steps(0)
