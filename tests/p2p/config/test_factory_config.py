"""Configs naming the user's code: network.factory, data.factory, the hooks, the device."""

from __future__ import annotations

from pathlib import Path

import pytest

from learner.module_spec import ModuleModelSpec
from p2p.config import ConfigError, load_config, parse_config_text, render_config_toml

FACTORY = '[network]\nfactory = "module_kit:resnet"\n'


def test_factory_models_read_and_write_back(tmp_path: Path) -> None:
    text = FACTORY + '''
[[models]]
name = "global"
params = ["features.*"]
buffers = "local"

[[models]]
name = "group"
units = {"features.0" = 0.5, "head" = 2}
depends_on = ["global"]

[data]
factory = "data.py:load"
path = "private/node-{node_index}.npz"
num_workers = 2

[training]
device = "auto"
precision = "bf16"
loss = "torch.nn.functional:mse_loss"
'''
    (tmp_path / "node.toml").write_text(text)
    config = load_config(tmp_path / "node.toml")
    assert config.models[0] == ModuleModelSpec("global", params=("features.*",),
                                               buffers="local")
    assert config.models[1].units == (("features.0", 0.5), ("head", 2))
    assert config.data.factory is not None and config.data.factory.path == tmp_path / "data.py"
    # written back (paths made absolute) and read again: the same config
    (tmp_path / "again.toml").write_text(render_config_toml(config))
    assert load_config(tmp_path / "again.toml") == config


def test_a_callable_is_a_factory_too() -> None:
    from module_kit import mlp

    from p2p.api import node_config
    config = node_config(network={"factory": mlp}, models=[{"name": "g", "units": 0.5}])
    assert config.network.factory is not None and config.network.factory.target is mlp
    assert config.network.factory.text == "module_kit:mlp"


@pytest.mark.parametrize(("text", "key", "fragment"), [
    (FACTORY + 'layers = "64=10"\n', "network.layers", "not used with network.factory"),
    (FACTORY + '[[models]]\nname = "g"\nneurons = "1-2"\n', "models[0].neurons",
     "with network.factory give params"),
    ('[[models]]\nname = "g"\nparams = ["x"]\n', "models[0].neurons",
     "split a network.factory module"),
    ('[[models]]\nname = "g"\nparams = ["x"]\nneurons = "64-4-4-10"\n', "models[0].params",
     "not both"),
    (FACTORY + '[[models]]\nname = "g"\nunits = 1.5\n', "models[0].units", "outside \\(0, 1\\]"),
    (FACTORY + '[[models]]\nname = "g"\nunits = {"a" = 0}\n', "models[0].units",
     "below 1"),
    (FACTORY + '[[models]]\nname = "g"\nbuffers = "local"\n', "models[0].params",
     "holds nothing"),
    (FACTORY + '[strategy]\nname = "fedcurv"\n', "strategy.name", "does not run with"),
    (FACTORY + '[clustering]\nmode = "auto"\n[data]\npublic_size = 10\n', "clustering.mode",
     "does not run with network.factory"),
    ('[network]\nfactory = "not a reference"\n', "network.factory", "not a factory reference"),
    ('[network]\nfactory = "pkg.mod:"\n', "network.factory", "not a factory reference"),
    ('[data]\nfactory = "d.py:load"\ntask = "mnist5k"\n', "data.task",
     "not used with data.factory"),
    ('[training]\ndevice = "gpu"\n', "training.device", "expected \"cpu\""),
    ('[training]\ndevice = "cuda:x"\n', "training.device", "expected"),
    ('[training]\nprecision = "fp16"\n', "training.precision", "needs CUDA"),
    ('[training]\noptimizer = "adam"\noptimizer_factory = "torch.optim:AdamW"\n',
     "training.optimizer", "not used with training.optimizer_factory"),
])
def test_what_cannot_run_is_one_line_naming_the_key(text: str, key: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as caught:
        parse_config_text(text)
    assert caught.value.key == key
    assert "\n" not in str(caught.value)


EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.mark.parametrize(("config", "shape", "local"), [
    ("own-model/node.toml", (1, 28, 28), {"head.weight", "head.bias"}),
    ("own-model/node-units.toml", (1, 28, 28), None),
    ("own-transformer/node.toml", (1, 40), {"head.weight", "head.bias"}),
    ("own-transformer/node-encoder.toml", (1, 40),
     {"embed.weight", "embed.bias", "position", "head.weight", "head.bias"}),
])
def test_the_examples_configs_split_their_modules(
        config: str, shape: tuple[int, ...], local: set[str] | None) -> None:
    """Each example config's models resolve on its own model.py (no data needed): the
    parameter splits leave exactly the head (and, for node-encoder.toml, the embedding)
    on the node; the unit split shares part of every tensor it cuts."""
    from learner.modules.build import ModuleRecipe, build_partial_module

    loaded = load_config(EXAMPLES / config)
    factory = loaded.network.factory
    assert factory is not None
    recipe = ModuleRecipe(factory.resolve("network.factory"), shape, 10, tuple(loaded.models))
    layout = build_partial_module(recipe, seed=0).layout
    assert layout.shared_models == ("global",)
    names = {name for name, _ in recipe.build(0).named_parameters()}
    on_node = {n for n in names if layout.owner_of(n) == "local"}
    if local is None:
        assert not on_node and any(layout.owner_of(n) is None for n in names)
    else:
        assert on_node == local
