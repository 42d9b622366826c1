"""Partial models over a user's nn.Module: parameter-name and traced unit splits."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from module_kit import gated, mlp, resnet
from torch import nn

from learner import ModelLayout, NetworkSpec, PartialModelSpec, SpecError
from learner.module_spec import ModuleModelSpec
from learner.modules.build import ModuleRecipe, build_partial_module, module_layout
from learner.modules.partial import PartialModule
from learner.user_code import FactoryError


def recipe(factory: object, *models: ModuleModelSpec, shape: tuple[int, ...] = (1, 8, 8),
           classes: int = 10) -> ModuleRecipe:
    return ModuleRecipe(factory, shape, classes, tuple(models))  # type: ignore[arg-type]


def owned(module: PartialModule, model: str) -> dict[str, int]:
    """Tensor -> how many of its values ``model``'s vector holds."""
    return {p.tensor: p.size for p in module.layout.pieces(model)}


# ------------------------------------------------------------------ by parameter name


def test_params_split_batch_norm_statistics_follow_and_counters_stay_local() -> None:
    net = build_partial_module(recipe(resnet, ModuleModelSpec("global",
                                                              params=("features.*",))), 0)
    held = owned(net, "global")
    assert "features.1.running_mean" in held and "features.3.bn2.running_var" in held
    assert not any(name.endswith("num_batches_tracked") for name in held)  # integers: local
    assert not any(name.startswith("head") for name in held)
    floats = sum(t.numel() for name, t in net.module.state_dict().items()
                 if name.startswith("features") and t.is_floating_point())
    assert net.layout.vector_length("global") == floats
    assert net.layout.model_kind("global") == "global"


def test_buffers_local_keeps_the_statistics_on_the_node() -> None:
    net = build_partial_module(recipe(resnet, ModuleModelSpec(
        "global", params=("features.*",), buffers="local")), 0)
    assert not any("running" in name for name in owned(net, "global"))


@pytest.mark.parametrize(("models", "message"), [
    ((ModuleModelSpec("g", params=("feat*",)),), "glob 'feat\\*' matches no parameter"),
    ((ModuleModelSpec("g", params=("1.*",)), ModuleModelSpec("h", params=("1.weight",))),
     "'1.weight' .* already claimed by partial model 'g'"),
    ((ModuleModelSpec("g", params=("1.*",)), ModuleModelSpec("h", units=1.0)),
     "already claimed by a unit split"),
    ((ModuleModelSpec("g", params=("1.*",)), ModuleModelSpec("h", units=((("1", 0.5)),),
                                                             depends_on=("x",))),
     "depends on unknown model 'x'"),
])
def test_bad_declarations_are_one_line_naming_the_model(models: tuple[ModuleModelSpec, ...],
                                                        message: str) -> None:
    with pytest.raises(SpecError, match=message) as caught:
        build_partial_module(recipe(mlp, *models), 0)
    assert "\n" not in str(caught.value)


def test_a_model_left_empty_is_refused() -> None:
    with pytest.raises(SpecError, match="'g' holds no parameter"):
        build_partial_module(recipe(resnet, ModuleModelSpec(
            "g", params=("features.1.running_*",), buffers="local")), 0)


# ------------------------------------------------------------------ by units


def test_unit_split_of_an_mlp_owns_what_the_notation_layout_owns() -> None:
    net = build_partial_module(recipe(mlp, ModuleModelSpec("global", units=0.5),
                                      shape=(6,), classes=3), 0)
    notation = ModelLayout(NetworkSpec((6, 12, 3)), [PartialModelSpec("global", (6, 6, 3))])
    assert net.layout.vector_length("global") == notation.vector_length("global")
    # hidden units 0..5 are the model's: their rows of the first weight, their biases,
    # and the output layer's columns from them (the output is held whole)
    assert owned(net, "global") == {"1.weight": 36, "1.bias": 6, "3.weight": 18, "3.bias": 3}
    weight = net.module[3].weight  # type: ignore[index]
    with torch.no_grad():
        weight.zero_()
    vector = net.extract("global")
    with torch.no_grad():
        weight[:, :6] = 1.0  # the global columns
    assert net.extract("global").sum() - vector.sum() == pytest.approx(18.0)


def test_residual_additions_tie_channels_and_batch_norm_follows_them() -> None:
    net = build_partial_module(recipe(resnet, ModuleModelSpec("global", units=0.5)), 0)
    held = owned(net, "global")
    # width 4: 2 channels global in the stem and in the block's second convolution (tied
    # by the addition); the block's first convolution reads 2 global channels of 4
    assert held["features.0.weight"] == 2 * 1 * 9 and held["features.0.bias"] == 2
    assert held["features.1.running_mean"] == 2 and held["features.3.bn2.weight"] == 2
    assert held["features.3.conv2.weight"] == 2 * 2 * 9
    # the head reads 4 channels x 2x2 pooled: the global channels' 8 columns, all rows
    assert held["head.weight"] == 10 * 8 and held["head.bias"] == 10


def test_tied_layers_given_different_units_are_refused() -> None:
    spec = ModuleModelSpec("global", units=(("features.0", 2), ("features.3.conv2", 3),
                                            ("head", 1.0)))
    with pytest.raises(SpecError, match="added together .* give both the same"):
        build_partial_module(recipe(resnet, spec), 0)


def test_what_tracing_cannot_follow_is_refused_naming_the_layer() -> None:
    with pytest.raises(SpecError, match="units of layer 'b': .*'softmax'.* params"):
        build_partial_module(recipe(gated, ModuleModelSpec("g", units=0.5)), 0)

    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(64, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.a(x.flatten(1))
            return h if h.sum() > 0 else -h  # data-dependent control flow

    with pytest.raises(SpecError, match="cannot trace Branchy with torch.fx") as caught:
        build_partial_module(recipe(Branchy, ModuleModelSpec("g", units=0.5)), 0)
    assert caught.value.model == "g"
    # the same module split by name is fine: tracing is only needed for units
    build_partial_module(recipe(Branchy, ModuleModelSpec("g", params=("a.weight",))), 0)


# ------------------------------------------------------------------ fingerprints, values


def test_fingerprint_covers_the_code_not_the_node() -> None:
    spec = ModuleModelSpec("global", params=("features.*",))
    a = build_partial_module(recipe(resnet, spec), 1).layout.fingerprint("global")
    assert build_partial_module(recipe(resnet, spec), 2).layout.fingerprint("global") == a

    def wider(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        from module_kit import TinyResNet
        return TinyResNet(input_shape[0], num_classes, width=6)

    def tanh_head(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        module = resnet(input_shape, num_classes)
        module.features[2] = nn.Tanh()  # type: ignore[index]  # same tensors, other graph
        return module

    assert build_partial_module(recipe(wider, spec), 1).layout.fingerprint("global") != a
    assert build_partial_module(recipe(tanh_head, spec), 1).layout.fingerprint("global") != a
    other = ModuleModelSpec("global", params=("features.0.*", "features.1.*", "features.3.*"))
    assert build_partial_module(recipe(resnet, other), 1).layout.fingerprint("global") != a


def test_shared_values_start_identical_and_local_ones_from_the_node_seed() -> None:
    spec = ModuleModelSpec("global", params=("features.*",))
    one, two = (build_partial_module(recipe(resnet, spec), seed) for seed in (1, 2))
    assert np.array_equal(one.extract("global"), two.extract("global"))
    assert not torch.equal(one.module.head.weight, two.module.head.weight)
    again = build_partial_module(recipe(resnet, spec), 1)
    assert torch.equal(one.module.head.weight, again.module.head.weight)


def test_one_transfer_each_way_per_model_and_round() -> None:
    net = build_partial_module(recipe(resnet, ModuleModelSpec("global", units=0.5)), 0)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    before = dict(net.transfers)
    for _ in range(3):  # a round: train, then the gossip side's sync (ModelSync's calls)
        net.train()
        loss = net(torch.randn(4, 1, 8, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        trained = net.extract("global")  # the deltas of the round: one device -> host copy
        net.assign("global", trained + 0.01)  # the merged values: one host -> device copy
        assert np.allclose(net.extract("global"), (trained + 0.01).astype(np.float32))
    assert net.transfers["to_host"] - before["to_host"] == 3
    assert net.transfers["to_device"] - before["to_device"] == 3


def test_assign_refuses_bad_vectors_and_leaves_the_module_unchanged() -> None:
    net = build_partial_module(recipe(mlp, ModuleModelSpec("g", params=("1.*",)),
                                      shape=(6,), classes=3), 0)
    vector = net.extract("g")
    bad = vector.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="index 3 .* not a finite float32"):
        net.assign("g", bad)
    with pytest.raises(ValueError, match="shape"):
        net.assign("g", vector[:-1])
    assert np.array_equal(net.extract("g"), vector)


def test_factory_failures_are_one_line() -> None:
    def listing(**_: object) -> object:
        return [1, 2]

    def needs_width(width: int) -> nn.Module:
        return nn.Linear(width, 2)

    def raises(**_: object) -> nn.Module:
        raise RuntimeError("no GPU\nsecond line")

    def ten_outputs(input_shape: tuple[int, ...]) -> nn.Module:
        return nn.Linear(input_shape[0], 10)

    for factory, message in ((listing, "returned a list; expected a torch.nn.Module"),
                             (needs_width, "requires width"),
                             (raises, "raised RuntimeError: no GPU$"),
                             (ten_outputs, r"outputs of shape \(2, 10\) .* expected \(2, 3\)")):
        with pytest.raises(FactoryError, match=message):
            build_partial_module(recipe(factory, shape=(4,), classes=3), 0)


def test_module_layout_needs_no_module_run() -> None:
    module = resnet((1, 8, 8), 10)
    layout = module_layout(recipe(resnet, ModuleModelSpec("g", params=("head.*",))), module)
    assert layout.owner_of("head.weight") == "g" and layout.owner_of("features.0.bias") == "local"
    assert layout.graph_digest is not None  # traceable: the graph is in the fingerprint
