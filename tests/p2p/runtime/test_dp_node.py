"""The differential-privacy mode on the node: config keys, the swarm's knobs, the
checkpointed accountant, and a DP node that reports epsilon and stops at its budget."""

from __future__ import annotations

import logging
from pathlib import Path
from types import ModuleType

import pytest
import torch

from learner.dp.accounting import PrivacyAccountant
from p2p.cli.render import render_status, to_text
from p2p.config import (
    NODE_PRIVACY_MODES,
    ConfigError,
    GossipConfig,
    load_config,
    parse_config_text,
    render_config_toml,
)
from p2p.runtime.admin_server import to_jsonable
from p2p.runtime.assembly import private_training
from p2p.runtime.checkpoint import CheckpointError, CheckpointStore, NodeState
from p2p.swarm import SwarmError, budget_spent, dp_section, node_config
from p2p.swarm import cli as swarm_cli
from p2p.testing import (
    MemoryNetwork,
    fast_spec,
    memory_swarm,
    running,
    wait_until,
)

DP = '[gossip]\nprivacy = "dp"\n'


@pytest.mark.parametrize(("text", "key"), [
    (DP + "[dp]\nclip_norm = 0\n", "dp.clip_norm"),
    (DP + "[dp]\nnoise_multiplier = -1\n", "dp.noise_multiplier"),
    (DP + "[dp]\ndelta = 1.5\n", "dp.delta"),
    (DP + "[dp]\nepsilon_budget = 0\n", "dp.epsilon_budget"),
    (DP + "[dp]\nnoise_multiplier = 1.0\ntarget_epsilon = 4\n", "dp.noise_multiplier"),
    (DP + "[dp]\ntarget_epsilon = 4\n", "dp.target_epsilon"),  # training.rounds is 0
    (DP + "[dp]\nclip = 1\n", "dp.clip"),
    ('[gossip]\nprivacy = "dpsgd"\n', "gossip.privacy"),
])
def test_dp_config_errors_name_the_key(text: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config_text(text)
    assert info.value.key == key
    assert str(info.value).startswith(f"{key}: ")


def test_privacy_modes_split_into_masking_and_dp() -> None:
    assert set(NODE_PRIVACY_MODES) >= {"none", "masked", "dp", "masked+dp"}
    seen = {mode: (GossipConfig(privacy=mode).masking, GossipConfig(privacy=mode).dp)
            for mode in ("none", "masked", "dp", "masked+dp")}
    assert seen == {"none": ("none", False), "masked": ("masked", False),
                    "dp": ("none", True), "masked+dp": ("masked", True)}


def test_dp_keys_round_trip_and_a_target_epsilon_becomes_noise(tmp_path: Path) -> None:
    config = parse_config_text('[gossip]\nprivacy = "masked+dp"\n[training]\nrounds = 50\n'
                               "[dp]\ntarget_epsilon = 4\nclip_norm = 0.5\ndelta = 1e-6\n")
    path = tmp_path / "node.toml"
    path.write_text(render_config_toml(config))
    assert load_config(path) == config
    assert config.dp.budget == 4.0  # the target is the budget unless one is given
    dp = private_training(config, shard_size=90)
    assert dp is not None and dp.clip_norm == 0.5 and dp.delta == 1e-6 and dp.epsilon_budget == 4
    planned = 50 * config.training.steps_per_round
    rate = config.training.batch_size / 90
    spent = PrivacyAccountant(1e-6).epsilon_after(dp.noise_multiplier, rate, planned)
    assert 3.9 <= spent <= 4.0
    assert private_training(parse_config_text(""), shard_size=90) is None


def test_a_checkpoint_keeps_the_accountants_history(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    history = [(1.1, 0.02, 300), (2.0, 0.02, 7)]
    store.save(NodeState(model_state={"flat": torch.zeros(3)}, privacy_history=history))
    loaded = store.load()
    assert loaded is not None and loaded.privacy_history == history
    store.save(NodeState(model_state={"flat": torch.zeros(3)}))
    loaded = store.load()
    assert loaded is not None and loaded.privacy_history is None
    store.save(NodeState(model_state={"flat": torch.zeros(3)},
                         privacy_history=[(1.0, 2.0, 3)]))
    with pytest.raises(CheckpointError, match="privacy_history holds a malformed run"):
        store.load()


def test_swarm_specs_carry_the_dp_settings(tmp_path: Path) -> None:
    spec = fast_spec(privacy="masked+dp", dp_noise=1.3, dp_clip=0.5, dp_budget=6.0)
    config = node_config(spec, 0, tmp_path, None)
    assert config.gossip.masking == "masked" and config.gossip.dp
    assert (config.dp.noise_multiplier, config.dp.clip_norm, config.dp.epsilon_budget) == (
        1.3, 0.5, 6.0)
    # a target epsilon replaces the template's noise multiplier (they exclude each other)
    target = dp_section(fast_spec(dp_epsilon=2.0), config.dp)
    assert (target.target_epsilon, target.noise_multiplier) == (2.0, None)
    with pytest.raises(SwarmError, match="--dp-noise and --dp-epsilon"):
        dp_section(fast_spec(dp_noise=1.0, dp_epsilon=2.0))
    assert budget_spent({"privacy": {"budget_spent": True}})
    assert not budget_spent({"privacy": None}) and not budget_spent({})


def test_masked_dp_masks_pushes_and_trains_with_dp(tmp_path: Path) -> None:
    (node,) = memory_swarm(tmp_path, MemoryNetwork(), fast_spec(nodes=1, privacy="masked+dp"))
    assert node.cores["global"].privacy == "masked"
    spent = node.privacy_spent()
    assert spent is not None and spent.steps == 0 and spent.noise_multiplier == 1.0
    (plain,) = memory_swarm(tmp_path / "plain", MemoryNetwork(), fast_spec(nodes=1))
    assert plain.cores["global"].privacy == "none" and plain.privacy_spent() is None


@pytest.fixture
def swarm_script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return swarm_cli


def test_swarm_script_takes_dp_flags_and_shows_epsilon(swarm_script: ModuleType) -> None:
    args = swarm_script.build_parser().parse_args(
        ["--privacy", "dp", "--dp-noise", "1.5", "--dp-clip", "2", "--rounds", "5"])
    spec = swarm_script.spec_from_args(args)
    assert (spec.privacy, spec.dp_noise, spec.dp_clip) == ("dp", 1.5, 2.0)
    row = {"node": 0, "permutation": "id", "accuracy": 0.9, "loss": 0.3, "round": 5,
           "pushes_sent": 1, "pushes_received": 1, "pushes_rejected": 0, "bytes_sent": 10,
           "epsilon": 2.345, "privacy": {"epsilon": 2.345, "budget_spent": True}}
    text = to_text(swarm_script.results_table({"nodes": [row]}), width=200)
    assert "epsilon" in text and "2.35*" in text
    plain = dict(row, epsilon=None, privacy=None)
    assert "epsilon" not in to_text(swarm_script.results_table({"nodes": [plain]}), width=200)


async def test_a_dp_node_reports_epsilon_stops_at_its_budget_and_resumes_the_count(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # 2 nodes: shards of 719 samples, sample rate 16/719, noise 2: the 8th step would
    # spend more than 0.27, so each node trains 3 rounds of 2 steps and stops
    spec = fast_spec(privacy="dp", dp_noise=2.0, dp_budget=0.27, rounds=40, steps_per_round=2)
    caplog.set_level(logging.INFO, logger="p2p.runtime.node")
    nodes = memory_swarm(tmp_path, MemoryNetwork(), spec)
    async with running(nodes):
        await wait_until(lambda: all(n.progress.finished for n in nodes),
                         what="both nodes stop for their budget")
        node = nodes[0]
        status = node.admin.status()
        assert status.round == 3 and status.steps == 6
        privacy = status.privacy
        assert privacy is not None
        assert privacy["mode"] == "dp" and privacy["budget_spent"] is True
        assert 0.26 < privacy["epsilon"] <= 0.27 and privacy["budget"] == 0.27
        assert (privacy["steps"], privacy["noise_multiplier"], privacy["clip_norm"]) == (
            6, 2.0, 1.0)
        assert privacy["delta"] == 1e-5 and privacy["sample_rate"] == pytest.approx(16 / 719)
        assert status.training is not None and "privacy budget spent" in status.training
        counters = node.admin.metrics().counters
        assert counters["privacy.epsilon"] == privacy["epsilon"]
        assert counters["privacy.budget_spent"] == 1 and counters["privacy.dp_steps"] == 6
        shown = to_text(render_status(to_jsonable(status)), width=200)
        assert "epsilon 0.26" in shown and "budget 0.27" in shown
        # training stopped, gossip did not: the node keeps averaging with its peer
        sent = node.model_counters("global")["pushes_sent"]
        await wait_until(lambda: node.model_counters("global")["pushes_sent"] > sent + 2,
                         what="pushes after the budget is spent")
        assert node.progress.round == 3
        assert node.learning.trainer.privacy is not None
        history = node.learning.trainer.privacy.history
        epsilon = node.learning.trainer.privacy.epsilon()
    said = [r for r in caplog.records if "privacy budget spent" in r.getMessage()]
    assert len(said) == 2  # once per node
    # a restart resumes the count from the checkpoint: epsilon is not reset
    again = memory_swarm(tmp_path, MemoryNetwork(), spec)[0]
    privacy_again = again.learning.trainer.privacy
    assert privacy_again is not None
    assert privacy_again.history == history and privacy_again.epsilon() == epsilon
    assert not again.learning.trainer.can_train()


async def test_a_node_without_dp_reports_no_privacy(tmp_path: Path) -> None:
    nodes = memory_swarm(tmp_path, MemoryNetwork(), fast_spec(nodes=1))
    async with running(nodes):
        await wait_until(lambda: nodes[0].progress.finished)
        status = nodes[0].admin.status()
        assert status.privacy is None
        assert not any(k.startswith("privacy.") for k in nodes[0].admin.metrics().counters)
        assert "privacy" not in to_text(render_status(to_jsonable(status)), width=200)
