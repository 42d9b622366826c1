"""DP-SGD in the learner: per-sample gradients, clipping, noise, Poisson batches,
the accountant against opacus', the budget stop, the reference with DP."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from opacus.accountants import RDPAccountant
from torch import nn

from learner import DataSpec, ModelLayout, NetworkSpec, load_node_data
from learner.dp.accounting import PrivacyAccountant, noise_multiplier_for
from learner.dp.config import DPConfig, DPConfigError
from learner.dp.sgd import (
    PrivacyBudgetSpent,
    PrivateSGD,
    clip_and_sum,
    per_sample_gradients,
    private_gradient,
)
from learner.network import PartialNetwork
from learner.reference import NodeSetup, run_reference
from learner.schemes import averaging_level
from learner.trainer import TrainConfig, Trainer


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread() -> Iterator[None]:
    """Tiny models: extra intra-op threads only spin on a busy 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


MLP = "64=48=32=10"
CNN = "1x10x10=c3k3=pool2=c4k2=20=10"
DELTA = 1e-5


def partial_network(notation: str, seed: int = 3) -> PartialNetwork:
    network = NetworkSpec.parse(notation)
    return PartialNetwork(ModelLayout(network, averaging_level(network, 80)), seed)


def batch(features: int, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, features, generator=gen), torch.randint(0, 10, (n,), generator=gen)


def one_by_one(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[dict[str, torch.Tensor]]:
    """Each sample's gradient by plain autograd, one backward pass per sample."""
    out = []
    for i in range(len(x)):
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        out.append({name: p.grad.clone() for name, p in model.named_parameters()
                    if p.grad is not None})
    return out


@pytest.mark.parametrize("model_of", [
    lambda: partial_network(MLP),
    lambda: partial_network(CNN),
    # any torch module, not only the project's: several parameter tensors
    lambda: nn.Sequential(nn.Linear(64, 12), nn.Tanh(), nn.Linear(12, 10)),
], ids=["partial-mlp", "partial-cnn", "torch-sequential"])
def test_per_sample_gradients_equal_per_example_autograd(
        model_of: Callable[[], nn.Module]) -> None:
    torch.manual_seed(0)
    model = model_of()
    features = 100 if isinstance(model, PartialNetwork) and model.layout.network.convs else 64
    x, y = batch(features, 6)
    grads, losses = per_sample_gradients(model, x, y)
    expected = one_by_one(model, x, y)
    assert set(grads) == set(expected[0])
    for i, sample in enumerate(expected):
        for name, g in sample.items():
            assert torch.allclose(grads[name][i], g, atol=1e-6, rtol=1e-5), (i, name)
    assert torch.allclose(losses, F.cross_entropy(model(x), y, reduction="none"), atol=1e-6)


def test_clipping_bounds_each_samples_contribution() -> None:
    model = partial_network(MLP)
    x, y = batch(64, 8)
    grads, _ = per_sample_gradients(model, x, y)
    norms = grads["flat"].flatten(1).norm(dim=1)
    clip = float(norms.min()) / 10  # every sample's gradient is far above it
    sums, reported = clip_and_sum(grads, clip)
    assert torch.allclose(reported, norms)
    # each sample alone is scaled to the clip norm ...
    for i in range(len(x)):
        alone, _ = clip_and_sum({"flat": grads["flat"][i:i + 1]}, clip)
        assert float(alone["flat"].norm()) == pytest.approx(clip, rel=1e-4)
    # ... so adding or removing one sample moves the sum by at most the clip norm (the
    # sensitivity the noise is calibrated to); unclipped it would move by its whole norm
    without_last, _ = clip_and_sum({"flat": grads["flat"][:-1]}, clip)
    assert float((sums["flat"] - without_last["flat"]).norm()) <= clip * (1 + 1e-4)
    assert float(norms[-1]) > 5 * clip
    # a gradient already below the clip norm is kept as it is
    kept, _ = clip_and_sum(grads, float(norms.max()) * 2)
    assert torch.allclose(kept["flat"], grads["flat"].sum(dim=0), atol=1e-6)


def test_a_private_gradient_without_noise_and_clipping_is_the_mean_gradient() -> None:
    model = partial_network(CNN)
    x, y = batch(100, 5)
    grads, loss = private_gradient(model, x, y, clip_norm=1e9, noise_multiplier=0.0,
                                   expected_batch=5, generator=None)
    model.zero_grad(set_to_none=True)
    mean_loss = F.cross_entropy(model(x), y)
    mean_loss.backward()
    mean_loss = mean_loss.detach()
    assert torch.allclose(grads["flat"], model.flat.grad, atol=1e-6)
    assert loss == pytest.approx(mean_loss.item(), rel=1e-5)


def test_noise_has_the_configured_scale_and_follows_its_seed() -> None:
    model = partial_network(MLP)
    empty_x, empty_y = torch.empty(0, 64), torch.empty(0, dtype=torch.int64)
    # an empty Poisson batch releases noise only: N(0, (sigma * C)^2) / expected batch
    grads, loss = private_gradient(model, empty_x, empty_y, clip_norm=0.5, noise_multiplier=2.0,
                                   expected_batch=4.0,
                                   generator=torch.Generator().manual_seed(1))
    assert np.isnan(loss)
    values = grads["flat"]
    assert values.numel() > 4000
    assert float(values.std()) == pytest.approx(2.0 * 0.5 / 4.0, rel=0.05)
    assert abs(float(values.mean())) < 0.05 * float(values.std())
    again, _ = private_gradient(model, empty_x, empty_y, clip_norm=0.5, noise_multiplier=2.0,
                                expected_batch=4.0, generator=torch.Generator().manual_seed(1))
    assert torch.equal(again["flat"], values)


def shard(num_nodes: int = 16, index: int = 0) -> tuple[np.ndarray, np.ndarray]:
    data = load_node_data(DataSpec(task="digits", node_index=index, num_nodes=num_nodes))
    return data.train_x, data.train_y


def test_a_dp_step_without_noise_and_clipping_is_a_plain_sgd_step() -> None:
    x, y = shard()
    n = len(y)
    config = TrainConfig(lr=0.1, batch_size=n, steps_per_round=1, optimizer="sgd")
    plain_model, dp_model = partial_network(MLP), partial_network(MLP)
    assert torch.equal(plain_model.flat, dp_model.flat)
    plain = Trainer(plain_model, x, y, config)
    # sample rate batch / n = 1: every sample is in the batch, as in the plain full batch
    private = Trainer(dp_model, x, y, config,
                      dp=DPConfig(clip_norm=1e9, noise_multiplier=0.0), noise_seed=0)
    before = dp_model.flat.detach().clone()
    plain_loss, private_loss = plain.train_steps(1), private.train_steps(1)
    assert private_loss == pytest.approx(plain_loss, rel=1e-5)
    assert not torch.equal(dp_model.flat, before)
    assert torch.allclose(dp_model.flat, plain_model.flat, atol=1e-6)


def test_poisson_batches_have_the_expected_size_on_average() -> None:
    x, y = shard()
    model = partial_network(MLP)
    sgd = PrivateSGD(model, torch.from_numpy(x).float(), torch.from_numpy(y).long(),
                     DPConfig(noise_multiplier=1.0), batch_size=16, seed=5)
    assert sgd.sample_rate == pytest.approx(16 / len(y))
    sizes = [len(sgd.sample_batch()) for _ in range(2000)]
    assert np.mean(sizes) == pytest.approx(16, rel=0.05)
    assert min(sizes) < 10 < 22 < max(sizes)  # varies, as Poisson sampling does


def test_reported_epsilon_is_opacus_rdp_accountant() -> None:
    x, y = shard()
    model = partial_network(MLP)
    trainer = Trainer(model, x, y, TrainConfig(batch_size=16, steps_per_round=3),
                      dp=DPConfig(noise_multiplier=1.1), noise_seed=2)
    assert trainer.privacy is not None
    assert trainer.privacy.epsilon() == 0.0
    for _ in range(4):
        trainer.train_round()
    q = 16 / len(y)
    opacus = RDPAccountant()
    for _ in range(12):
        opacus.step(noise_multiplier=1.1, sample_rate=q)
    assert trainer.privacy.history == ((1.1, q, 12),)
    assert trainer.privacy.epsilon() == pytest.approx(opacus.get_epsilon(DELTA), rel=1e-9)
    spent = trainer.privacy_spent()
    assert spent is not None and spent.steps == 12 and spent.epsilon == trainer.privacy.epsilon()
    # a history of several noise levels composes as opacus composes it
    accountant = PrivacyAccountant(DELTA)
    mixed = RDPAccountant()
    for sigma, steps in ((2.0, 30), (0.9, 5), (2.0, 7)):
        accountant.record(sigma, 0.05, steps)
        for _ in range(steps):
            mixed.step(noise_multiplier=sigma, sample_rate=0.05)
    assert accountant.history == tuple(mixed.history)
    assert accountant.epsilon() == pytest.approx(mixed.get_epsilon(DELTA), rel=1e-9)
    assert accountant.epsilon_after(2.0, 0.05, 10) > accountant.epsilon()


def test_noise_for_a_target_epsilon_spends_at_most_the_target() -> None:
    sigma = noise_multiplier_for(4.0, DELTA, 0.18, 100)
    opacus = RDPAccountant()
    opacus.history = [(sigma, 0.18, 100)]
    assert 4.0 - 0.01 <= opacus.get_epsilon(DELTA) <= 4.0
    assert noise_multiplier_for(1.0, DELTA, 0.18, 100) > sigma  # less epsilon: more noise
    with pytest.raises(ValueError, match="steps"):
        noise_multiplier_for(4.0, DELTA, 0.18, 0)


def test_the_trainer_refuses_steps_past_the_budget_and_keeps_its_values() -> None:
    x, y = shard()
    model = partial_network(MLP)
    trainer = Trainer(model, x, y, TrainConfig(batch_size=16, steps_per_round=2),
                      dp=DPConfig(noise_multiplier=2.0, epsilon_budget=1.5), noise_seed=4)
    rounds = 0
    while trainer.can_train():
        trainer.train_round()
        rounds += 1
        assert rounds < 1000
    assert rounds >= 2
    privacy = trainer.privacy
    assert privacy is not None
    assert privacy.epsilon() <= 1.5 < privacy.accountant.epsilon_after(2.0, privacy.sample_rate, 2)
    spent = trainer.privacy_spent()
    assert spent is not None and spent.budget_spent and spent.budget == 1.5
    values = model.flat.detach().clone()
    with pytest.raises(PrivacyBudgetSpent, match="epsilon budget 1.5"):
        trainer.train_round()
    assert torch.equal(model.flat, values)
    assert privacy.accountant.steps == 2 * rounds  # nothing counted for the refused round


def test_a_resumed_history_continues_the_count() -> None:
    x, y = shard()
    first = Trainer(partial_network(MLP), x, y, TrainConfig(batch_size=16, steps_per_round=2),
                    dp=DPConfig(noise_multiplier=1.0), noise_seed=1)
    first.train_round()
    assert first.privacy is not None
    again = Trainer(partial_network(MLP), x, y, TrainConfig(batch_size=16, steps_per_round=2),
                    dp=DPConfig(noise_multiplier=1.0), privacy_history=first.privacy.history)
    assert again.privacy is not None
    assert again.privacy.epsilon() == first.privacy.epsilon() > 0
    again.train_round()
    assert again.privacy.accountant.steps == 4
    with pytest.raises(ValueError, match="privacy history entry"):
        PrivacyAccountant(DELTA, [(1.0, 1.5, 3)])


@pytest.mark.parametrize(("changes", "field"), [
    ({"clip_norm": 0.0}, "clip_norm"),
    ({"noise_multiplier": -1.0}, "noise_multiplier"),
    ({"delta": 1.0}, "delta"),
    ({"epsilon_budget": float("inf")}, "epsilon_budget"),
])
def test_dp_settings_are_checked_and_errors_name_the_field(changes: dict, field: str) -> None:
    with pytest.raises(DPConfigError) as info:
        DPConfig(**changes)
    assert info.value.field == field
    assert str(info.value).startswith(f"dp.{field}: ")


def test_the_reference_trains_with_dp_and_stops_nodes_at_their_budget() -> None:
    network = NetworkSpec.parse(MLP)
    models = tuple(averaging_level(network, 100))
    nodes = [NodeSetup(network, models, load_node_data(DataSpec(task="digits", node_index=i,
                                                                num_nodes=2)), seed=i)
             for i in range(2)]
    config = TrainConfig(batch_size=16, steps_per_round=1)
    # sample rate 16/719 and noise 2: the 8th step would go past 0.27
    dp = DPConfig(noise_multiplier=2.0, epsilon_budget=0.27)
    result = run_reference(nodes, 12, config, eval_every=12, dp=dp)
    again = run_reference(nodes, 12, config, eval_every=12, dp=dp)
    assert result.final_accuracy == again.final_accuracy  # seeded noise: reproducible
    assert len(result.epsilon) == 2 and all(0.26 < e <= 0.27 for e in result.epsilon)
    assert result.sample_rate == (16 / 719, 16 / 719)
    longer = run_reference(nodes, 16, config, eval_every=16, dp=dp)
    assert longer.epsilon == result.epsilon  # the budget, not the rounds, ended training
    plain = run_reference(nodes, 1, config)
    assert plain.epsilon == () and plain.sample_rate == ()
