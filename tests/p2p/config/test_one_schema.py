"""One schema, one rule per concept: the config builds the learner's own objects,
defaults agree across layers, and every layer parses addresses, permutations
and private files the same way."""

from __future__ import annotations

import dataclasses
import errno
import inspect
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gossip import PushSum
from learner import DataSpec, TrainConfig
from learner.permutations import parse_cycles
from p2p.config import (
    SECTION_KEYS,
    ConfigError,
    GossipConfig,
    LimitsConfig,
    NodeConfig,
    TrainingConfig,
    parse_config_text,
    parse_host_port,
)
from p2p.config.kinds import settings_of
from p2p.files import FileWriteError, write_private_file
from p2p.wire.transport import Transport, parse_address
from peersampling import InvalidDescriptor
from peersampling import parse_address as descriptor_address

ROOT = Path(__file__).resolve().parents[3]


def test_importing_config_and_learner_does_not_load_torch() -> None:
    code = "import sys, p2p.config, learner; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_torch_names_of_learner_still_resolve() -> None:
    import learner

    assert learner.Trainer.__name__ == "Trainer"
    assert learner.PartialNetwork.__name__ == "PartialNetwork"  # MLPs and CNNs
    assert learner.PartialMLP is learner.PartialNetwork  # the name before CNNs, kept
    with pytest.raises(AttributeError):
        learner.NoSuchThing  # noqa: B018


def test_a_model_name_the_learner_refuses_is_refused_by_the_config() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config_text("[[models]]\nname = '1g'\nneurons = '64-40-24-10'\n")
    assert info.value.key == "models[0].name"
    assert str(info.value).startswith("models[0].name: ")
    assert "'1g'" in str(info.value) and "valid model name" in str(info.value)


def test_learner_checks_are_reported_under_the_config_key() -> None:
    cases = {
        "[training]\nsteps_per_round = 0": "training.steps_per_round",
        "[data]\ntest_fraction = 0": "data.test_fraction",
        "[data]\nseed = -1": "data.seed",
        "[[models]]\nname = 'a'\nneurons = '0-1-0-0'\n[[models]]\nname = 'b'\n"
        "neurons = '0-1-0-0'\ndepends_on = ['c']": "models[1].depends_on",
    }
    for text, key in cases.items():
        with pytest.raises(ConfigError) as info:
            parse_config_text(text)
        assert info.value.key == key, text


def test_each_key_is_declared_once_with_help() -> None:
    for section, keys in SECTION_KEYS.items():
        assert keys, section
        if section == "models":
            continue
        cls = type(getattr(NodeConfig(), section))
        settings = settings_of(cls)
        assert tuple(settings) == keys
        assert all(s.help for s in settings.values()), section
        if section == "strategy":  # name, then each plug-in's keys (p2p.config.plugins)
            plugins = getattr(NodeConfig(), section).plugins
            assert ["name", *(f.name for p in plugins for f in dataclasses.fields(p))] == list(keys)
            continue
        assert [f.name for f in dataclasses.fields(cls)] == list(keys)


def test_defaults_agree_across_layers() -> None:
    # the node's effective defaults are the lower layers' defaults
    assert TrainingConfig().lr == TrainConfig().lr == 0.05
    assert TrainingConfig().momentum == TrainConfig().momentum
    pushsum = inspect.signature(PushSum).parameters
    assert pushsum["mask_std"].default == GossipConfig().mask_std == 10.0
    transport = inspect.signature(Transport).parameters
    limits = LimitsConfig()
    assert transport["read_timeout"].default == limits.read_timeout == 30.0
    assert transport["connect_timeout"].default == limits.connect_timeout
    assert transport["max_connections"].default == limits.max_connections
    data = NodeConfig().data.spec()
    assert (data.task, data.test_fraction, data.seed) == (DataSpec().task,
                                                           DataSpec().test_fraction, 0)


@pytest.mark.parametrize("bad", ["::1:7400", "bad host:1", "[nothex]:1", "h:99999", "h:"])
def test_one_address_rule_everywhere(bad: str) -> None:
    with pytest.raises(ConfigError):
        parse_host_port(bad, "k")
    with pytest.raises(InvalidDescriptor):
        descriptor_address(bad)
    with pytest.raises(ValueError):
        parse_address(bad)


def test_bracketed_ipv6_is_accepted_everywhere() -> None:
    assert str(parse_host_port("[::1]:7400", "k")) == "[::1]:7400"
    assert descriptor_address("[::1]:7400") == ("::1", 7400) == parse_address("[::1]:7400")


@pytest.mark.parametrize(("text", "cycles"), [
    ("7:8:9", ((7, 8, 9),)),
    ("(7 8 9)", ((7, 8, 9),)),
    ("8:9,6:7", ((8, 9), (6, 7))),
    ("id", ()),
    ("rate:3", ((7, 8, 9),)),
])
def test_one_permutation_notation(text: str, cycles: tuple[tuple[int, ...], ...]) -> None:
    config = parse_config_text(f'[data]\npermutation = "{text}"')
    assert config.data.permutation == cycles
    assert parse_cycles(config.data.permutation_text) == cycles  # canonical text reads back
    assert config.data.spec().permutation == config.data.permutation_text


def test_private_file_writer(tmp_path: Path) -> None:
    target = tmp_path / "secret"
    write_private_file(target, b"one")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    with pytest.raises(FileWriteError) as info:
        write_private_file(target, b"two", exclusive=True)
    assert info.value.errno == errno.EEXIST
    assert target.read_bytes() == b"one"
    write_private_file(target, b"three")
    assert target.read_bytes() == b"three"
    assert [p.name for p in tmp_path.iterdir()] == ["secret"]


def test_overrides_reject_unknown_options() -> None:
    with pytest.raises(TypeError, match="unknown option"):
        NodeConfig().with_overrides(lr=0.1)
    assert NodeConfig().with_overrides(seed=4, name="n4").node.seed == 4
