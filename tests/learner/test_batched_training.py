"""learner.batched_training: many trainers' steps in one vectorised step, as the plain loop."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, cast

import numpy as np
import pytest
import torch
from torch import nn

from learner import ModelLayout, NetworkSpec, PartialModelSpec, PartialNetwork
from learner.batched_training import batch_key, train_steps_batched
from learner.dp.config import DPConfig
from learner.trainer import TrainConfig, Trainer

# float tolerance; on this CPU build the two paths agree bit for bit
TOL = 1e-5


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread() -> Iterator[None]:
    """Tiny models: extra intra-op threads only spin on a busy 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _trainers(n: int, notation: str = "12=16=4", *, samples: int = 40,
              models: tuple[tuple[str, str], ...] = (), **config: Any) -> list[Trainer]:
    """`n` trainers on seeded random shards (shard sizes differ), each its own model seed."""
    network = NetworkSpec.parse(notation)
    rng = np.random.default_rng(7)
    out = []
    for i in range(n):
        layout = ModelLayout(network, [PartialModelSpec.parse(*m) for m in models])
        count = samples + 3 * i
        x = rng.normal(size=(count, network.input_features)).astype(np.float32)
        y = rng.integers(0, network.sizes[-1], size=count)
        out.append(Trainer(PartialNetwork(layout, seed=i), x, y,
                           TrainConfig(seed=100 + i, batch_size=8, **config)))
    return out


def _flat(trainer: Trainer) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in trainer.model.parameters()])


def _assert_same(a: list[Trainer], b: list[Trainer]) -> None:
    for ta, tb in zip(a, b, strict=True):
        assert torch.allclose(_flat(ta), _flat(tb), rtol=0, atol=TOL)
        assert ta.steps_done == tb.steps_done


@pytest.mark.parametrize("config", [
    {},
    {"optimizer": "momentum", "momentum": 0.8, "weight_decay": 1e-2},
    {"optimizer": "adam", "lr": 0.01, "weight_decay": 1e-3},
], ids=["sgd", "momentum-wd", "adam-wd"])
def test_batched_equals_the_plain_loop(config: dict[str, Any]) -> None:
    loop, batched = _trainers(5, **config), _trainers(5, **config)
    for steps in (3, 7, 6):  # shards of 40+ samples in batches of 8: passes wrap around
        expected = [t.train_steps(steps) for t in loop]
        got = train_steps_batched(batched, steps)
        assert got == pytest.approx(expected, abs=TOL)
        _assert_same(loop, batched)
    # the optimizer state went back into each torch optimizer: a plain step continues alike
    assert [t.train_steps(2) for t in batched] == pytest.approx(
        [t.train_steps(2) for t in loop], abs=TOL)
    _assert_same(loop, batched)


def test_a_small_cnn_batches_alike() -> None:
    cnn = "1x6x6=c3k3=pool2=5"
    loop, batched = _trainers(3, cnn, optimizer="momentum"), _trainers(3, cnn, optimizer="momentum")
    expected = [t.train_steps(4) for t in loop]
    assert train_steps_batched(batched, 4) == pytest.approx(expected, abs=TOL)
    _assert_same(loop, batched)


def test_new_values_are_written_into_the_models_parameters_in_place() -> None:
    trainers = _trainers(3, models=(("A", "12-8-4"),))
    nets = [cast(PartialNetwork, t.model) for t in trainers]
    flats = [net.flat for net in nets]
    views = [net.bias(1) for net in nets]  # views of the flat tensor, taken before
    shared = [net.extract("A") for net in nets]
    before = [v.detach().clone() for v in views]
    train_steps_batched(trainers, 2)
    for t, net, flat, view, old, vec in zip(trainers, nets, flats, views, before, shared,
                                            strict=True):
        assert net.flat is flat and t.optimizer.param_groups[0]["params"][0] is flat
        assert not torch.equal(view.detach(), old)  # the view sees the new values
        assert not np.array_equal(net.extract("A"), vec)  # partial model moved too


def test_mixed_architectures_fall_back_to_the_loop(caplog: pytest.LogCaptureFixture) -> None:
    def mixed() -> list[Trainer]:
        a = _trainers(2)
        lone = _trainers(1, "12=9=4")  # no other trainer shares this one
        dp = _trainers(1)
        dp_trainer = Trainer(dp[0].model, np.zeros((20, 12), np.float32), np.zeros(20, np.int64),
                             dp[0].config, dp=DPConfig(noise_multiplier=1.0), noise_seed=3)
        return [a[0], *lone, dp_trainer, a[1]]

    loop, batched = mixed(), mixed()
    expected = [t.train_steps(3) for t in loop]
    with caplog.at_level(logging.DEBUG, logger="learner.batched_training"):
        got = train_steps_batched(batched, 3)
    assert got == pytest.approx(expected, abs=TOL)
    _assert_same(loop, batched)
    assert isinstance(batch_key(batched[2]), str)
    assert "trainer 1 trains with the plain loop" in caplog.text
    assert "trainer 2 trains with the plain loop: DP-SGD" in caplog.text


def test_only_identical_settings_share_a_batch() -> None:
    a, b = _trainers(1)[0], _trainers(1, lr=0.1)[0]
    assert batch_key(a) != batch_key(b)
    assert batch_key(a) == batch_key(_trainers(2)[1])  # other seed and shard size: same key
    relu = Trainer(nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)),
                   np.zeros((8, 4), np.float32), np.zeros(8, np.int64), TrainConfig())
    tanh = Trainer(nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)),
                   np.zeros((8, 4), np.float32), np.zeros(8, np.int64), TrainConfig())
    assert batch_key(relu) != batch_key(tanh)


def test_bad_input_is_refused() -> None:
    trainers = _trainers(2)
    with pytest.raises(ValueError, match="steps >= 1"):
        train_steps_batched(trainers, 0)
    with pytest.raises(ValueError, match="trainer 2 .* appears twice"):
        train_steps_batched([*trainers, trainers[0]], 1)


def test_a_trainer_with_a_loss_term_trains_with_its_own_loop() -> None:
    # a collaboration strategy's term (fedcurv, fedlinked) is added to every plain step;
    # the batched step has no place for it, so such a trainer must not be batched
    def with_term() -> list[Trainer]:
        trainers = _trainers(3)
        flat = cast(PartialNetwork, trainers[1].model).flat
        trainers[1].loss_term = lambda: 0.5 * (flat ** 2).sum()
        return trainers

    loop, batched = with_term(), with_term()
    assert isinstance(batch_key(batched[1]), str) and "loss term" in str(batch_key(batched[1]))
    expected = [t.train_steps(4) for t in loop]
    assert train_steps_batched(batched, 4) == pytest.approx(expected, abs=TOL)
    _assert_same(loop, batched)


def test_keys_worked_out_by_the_caller_are_used() -> None:
    loop, batched = _trainers(4), _trainers(4)
    keys = [batch_key(t) for t in batched]
    expected = [t.train_steps(3) for t in loop]
    assert train_steps_batched(batched, 3, keys=keys) == pytest.approx(expected, abs=TOL)
    _assert_same(loop, batched)
    with pytest.raises(ValueError, match="3 keys for 4 trainers"):
        train_steps_batched(batched, 1, keys=keys[:3])


def test_a_trainers_steps_do_not_depend_on_the_rest_of_its_batch() -> None:
    # a simulation's batches follow the scheduler; a node's result must not (bit for bit)
    alone = _trainers(5)
    train_steps_batched(alone, 6)
    shuffled = _trainers(5)
    train_steps_batched([shuffled[i] for i in (3, 0, 4, 1, 2)], 6)
    fewer = _trainers(5)[:2]
    train_steps_batched(fewer, 6)
    for a, b in zip(alone, shuffled, strict=True):
        assert torch.equal(_flat(a), _flat(b))
    for a, b in zip(alone, fewer, strict=False):
        assert torch.equal(_flat(a), _flat(b))
