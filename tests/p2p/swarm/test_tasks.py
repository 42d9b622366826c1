"""scripts/swarm.py on any task: flags, a node config as template, the generated configs.

No daemon is started: the flags are parsed and every node's config is built
and read back as a daemon would read it.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from p2p.config import render_config_toml
from p2p.swarm import SwarmError, SwarmSpec, latency_summary, rounds_per_second
from p2p.swarm import cli as swarm_cli
from p2p.testing import swarm_node_configs


@pytest.fixture
def swarm_script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return swarm_cli


def _spec(script: ModuleType, *argv: str) -> SwarmSpec:
    spec: SwarmSpec = script.spec_from_args(script.build_parser().parse_args(list(argv)))
    return spec


def test_no_flags_is_the_digits_demo(swarm_script: ModuleType, tmp_path: Path) -> None:
    spec = _spec(swarm_script)
    assert spec == SwarmSpec(permutations=spec.permutations)  # make swarm: defaults unchanged
    assert spec.task == "digits" and spec.network().sizes == (64, 48, 32, 10)
    configs = swarm_node_configs(spec, tmp_path)
    assert [c.data.node_index for c in configs] == list(range(8))
    assert {c.data.task for c in configs} == {"digits"}
    assert configs[0].training.lr == 0.1 and configs[0].training.batch_size == 16


def test_task_network_and_training_flags_reach_every_node(swarm_script: ModuleType,
                                                          tmp_path: Path) -> None:
    spec = _spec(swarm_script, "--task", "mnist5k", "--nodes", "3", "--lr", "0.02",
                 "--optimizer", "adam", "--batch-size", "32", "--rounds", "7",
                 "--permuted", "id,8:9")
    configs = swarm_node_configs(spec, tmp_path)
    for i, config in enumerate(configs):
        assert config.data.task == "mnist5k"
        assert (config.data.node_index, config.data.num_nodes) == (i, 3)
        assert config.network.layers == (784, 300, 100, 10)  # the task's "mlp"
        t = config.training
        assert (t.lr, t.optimizer, t.batch_size, t.rounds) == (0.02, "adam", 32, 7)
    assert [c.data.permutation_text for c in configs] == ["id", "8:9", "id"]
    net = _spec(swarm_script, "--task", "mnist1d", "--network", "40=64=10")
    assert net.network().sizes == (40, 64, 10)


def test_a_network_that_does_not_fit_the_task_is_refused_before_start(
        swarm_script: ModuleType) -> None:
    with pytest.raises(SwarmError, match="784 features"):
        _spec(swarm_script, "--task", "mnist5k", "--network", "64=48=10")
    with pytest.raises(SwarmError, match="no network named 'cnn'"):
        _spec(swarm_script, "--task", "digits", "--network", "cnn")
    with pytest.raises(SwarmError, match="--nodes"):
        _spec(swarm_script, "--nodes", "1")
    with pytest.raises(SystemExit):
        swarm_script.build_parser().parse_args(["--task", "cifar"])


def test_config_template_is_kept_but_shards_permutations_and_flags_apply(
        swarm_script: ModuleType, tmp_path: Path) -> None:
    template = tmp_path / "template.toml"
    template.write_text(
        '[network]\nlayers = "40=32=10"\n'
        '[training]\nlr = 0.03\noptimizer = "adam"\nbatch_size = 8\nmomentum = 0.5\n'
        'rounds = 9\n'
        '[data]\ntask = "mnist1d"\nnum_samples = 400\npublic_size = 20\nseed = 4\n'
        '[peer_sampling]\nview_size = 7\n'
        '[limits]\nmax_connections = 33\n')
    spec = _spec(swarm_script, "--config", str(template), "--nodes", "4", "--batch-size", "4",
                 "--permuted", "id,8:9")
    assert spec.template == str(template.resolve())
    configs = swarm_node_configs(spec, tmp_path)
    for i, config in enumerate(configs):
        # the template's settings everywhere ...
        assert config.data.task == "mnist1d" and config.network.layers == (40, 32, 10)
        assert (config.data.num_samples, config.data.public_size, config.data.seed) == (
            400, 20, 4)
        t = config.training
        assert (t.lr, t.optimizer, t.momentum, t.rounds) == (0.03, "adam", 0.5, 9)
        assert config.peer_sampling.view_size == 7 and config.limits.max_connections == 33
        # ... the flag given on the command line wins ...
        assert t.batch_size == 4
        # ... and what differs per node is the node's own
        assert (config.data.node_index, config.data.num_nodes) == (i, 4)
        assert config.node.name == f"node{i}" and config.node.seed == 4000 + i
    assert [c.data.permutation_text for c in configs] == ["id", "8:9", "id", "8:9"]
    assert len({c.node.seed for c in configs}) == 4
    bad = tmp_path / "bad.toml"
    bad.write_text('[training]\nlr = "fast"\n')
    with pytest.raises(SwarmError, match="training.lr"):
        _spec(swarm_script, "--config", str(bad))


def test_swarm_speed_figures() -> None:
    history = [(0.0, 0, None), (1.0, 2, None), (3.0, 10, 0.5), (4.0, 12, 0.6)]
    assert rounds_per_second(history) == pytest.approx(10 / 3)
    assert rounds_per_second([(0.0, 0, None)]) is None
    figures = latency_summary([0.001, 0.002, 0.003, 0.010])
    assert figures is not None
    assert figures["median"] == pytest.approx(2.5) and figures["max"] == pytest.approx(10.0)
    assert latency_summary([]) is None


def test_a_convolutional_network_travels_through_the_node_config(
        swarm_script: ModuleType, tmp_path: Path) -> None:
    spec = _spec(swarm_script, "--task", "mnist5k", "--network", "cnn", "--nodes", "2")
    config = swarm_node_configs(spec, tmp_path)[1]
    assert config.network.spec == spec.network()  # image shape and convolutions kept
    assert config.network.spec.image_size == (28, 28) and len(config.network.spec.convs) == 2
    assert render_config_toml(config).count('layers = "1x28x28=c16k5=pool2=c32k5=pool2=100=10"')
    mlp = _spec(swarm_script, "--task", "mnist5k", "--network", "784=300=100=10", "--nodes", "2")
    assert swarm_node_configs(mlp, tmp_path)[0].network.layers == (784, 300, 100, 10)  # a plain tuple
    with pytest.raises(SwarmError, match="samples of shape 1x28x28"):
        _spec(swarm_script, "--task", "mnist5k", "--network", "1x8x8=c4k3=10")
    assert _spec(swarm_script, "--task", "digits", "--network", "1x8x8=c4k3=10").task == "digits"
