"""Random image shifts: what they move, where they refuse, and that training uses them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from learner.augment import check_shift, random_shifts
from learner.layout import ModelLayout
from learner.network import PartialNetwork
from learner.spec import NetworkSpec
from learner.train_config import TrainConfig, TrainConfigError
from learner.trainer import Trainer
from p2p.config import ConfigError, parse_config_text

SMALL_CNN = "1x8x8=c4k3=pool2=12=3"


def _moved(image: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """`image` (C, H, W) moved down by dy and right by dx, zero-filled."""
    out = np.zeros_like(image)
    h, w = image.shape[1:]
    out[:, max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = \
        image[:, max(-dy, 0):h - max(dy, 0), max(-dx, 0):w - max(dx, 0)]
    return out


def test_every_image_is_its_own_shift_within_the_bound() -> None:
    rng = np.random.default_rng(3)
    shape = (2, 6, 5)
    x = torch.from_numpy(rng.uniform(0.1, 1.0, size=(64, 60)).astype(np.float32))
    out = random_shifts(x, shape, 2, np.random.default_rng(0)).numpy()
    assert out.shape == x.shape and out.dtype == np.float32
    seen = set()
    for row, moved in zip(x.numpy(), out, strict=True):
        image = row.reshape(shape)
        matches = [(dy, dx) for dy in range(-2, 3) for dx in range(-2, 3)
                   if np.array_equal(_moved(image, dy, dx), moved.reshape(shape))]
        assert len(matches) == 1, "each output is exactly one shift of its own input"
        seen.add(matches[0])
    assert len(seen) > 10, "offsets differ between images"


def test_input_is_untouched_and_zero_shift_copies() -> None:
    x = torch.arange(18, dtype=torch.float32).reshape(2, 9)
    before = x.clone()
    random_shifts(x, (1, 3, 3), 1, np.random.default_rng(0))
    assert torch.equal(x, before)
    same = random_shifts(x, (1, 3, 3), 0, np.random.default_rng(0))
    assert torch.equal(same, x) and same.data_ptr() != x.data_ptr()


def test_refusals_name_the_problem() -> None:
    with pytest.raises(ValueError, match="expected rows of 9 values"):
        random_shifts(torch.zeros(2, 10), (1, 3, 3), 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="input is flat"):
        check_shift(2, None)
    with pytest.raises(ValueError, match="does not fit 3x3"):
        check_shift(3, (1, 3, 3))
    check_shift(0, None)  # off: fits anything
    with pytest.raises(TrainConfigError, match="shift"):
        TrainConfig(shift=-1)


def _trainer(shift: int, network: str = SMALL_CNN) -> Trainer:
    spec = NetworkSpec.parse(network)
    model = PartialNetwork(ModelLayout(spec, []), seed=0)
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, size=(40, spec.input_features)).astype(np.float32)
    y = rng.integers(0, 3, size=40)
    return Trainer(model, x, y, TrainConfig(lr=0.1, batch_size=8, shift=shift, seed=5))


def test_training_sees_shifted_images_and_zero_shift_is_unchanged() -> None:
    plain, again, shifted = _trainer(0), _trainer(0), _trainer(2)
    for t in (plain, again, shifted):
        t.train_steps(5)
    values = [torch.cat([p.detach().flatten() for p in t.model.parameters()])
              for t in (plain, again, shifted)]
    assert torch.equal(values[0], values[1])
    assert not torch.allclose(values[0], values[2]), "shift had no effect on training"
    assert torch.isfinite(values[2]).all()


def test_trainer_refuses_a_shift_for_flat_inputs() -> None:
    with pytest.raises(ValueError, match="input is flat"):
        _trainer(1, "64=12=3")


def test_config_checks_the_shift_against_the_network() -> None:
    cnn = ('[data]\ntask = "mnist5k"\n[network]\nlayers = "1x28x28=c8k5=pool2=32=10"\n'
           '[training]\nshift = 2\n')
    assert parse_config_text(cnn).training.train_config().shift == 2
    with pytest.raises(ConfigError, match="training.shift") as info:
        parse_config_text('[training]\nshift = 2\n')  # the default digits MLP
    assert info.value.key == "training.shift"
