"""Issue 14, item 3: a restart with another layout or data never erases a trained model.

The checkpoint records what it was trained with (network, models and their
fingerprints, every ``[data]`` key). A restart whose configuration differs
refuses to start (exit 2, one line naming what changed and ``--fresh``);
``--fresh`` moves the old checkpoint aside. A resumed node shows its last
loss, and when ``training.rounds`` is already reached, how to train further.
"""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from p2p.config import NodeConfig, render_config_toml
from p2p.runtime.admin_commands import training_summary
from p2p.runtime.checkpoint import CheckpointConflict, CheckpointStore
from p2p.runtime.node import Node
from p2p.runtime.training_record import (
    RecordChange,
    conflict_message,
    record_changes,
    training_record,
)
from p2p.swarm import node_config
from p2p.testing import fast_spec, running, tcp_node, wait_until

SPEC = fast_spec(rounds=2)


def _config(data_dir: Path, **spec_changes: object) -> NodeConfig:
    spec = dataclasses.replace(SPEC, **spec_changes)  # type: ignore[arg-type]
    return node_config(spec, 0, data_dir, None).with_overrides(listen="127.0.0.1:0",
                                                              bootstrap=[])


def _with_task(config: NodeConfig, task: str) -> NodeConfig:
    return dataclasses.replace(config, data=dataclasses.replace(config.data, task=task))


async def _trained(data_dir: Path) -> bytes:
    """Train a node for SPEC.rounds rounds; the bytes of the checkpoint it leaves."""
    node = tcp_node(data_dir, SPEC, 0)
    async with running([node]):
        await wait_until(lambda: node.progress.finished)
    return (data_dir / "checkpoint.pt").read_bytes()


# --------------------------------------------------------------------------- the record


def test_the_record_names_layout_models_and_data(tmp_path: Path) -> None:
    config = _config(tmp_path)
    record = training_record(config)
    fp = config.layout().fingerprint("global").hex()[:8]
    assert record["network.layers"] == "64=48=32=10"
    assert record["models.global"] == f"64-48-32-10 (fingerprint {fp})"
    assert (record["data.task"], record["data.node_index"], record["data.path"]) == (
        "digits", "0", "(none)")
    assert record_changes(record, training_record(config)) == []


def test_changes_are_listed_and_said_in_one_line(tmp_path: Path) -> None:
    old = training_record(_config(tmp_path))
    new = training_record(_with_task(_config(tmp_path, layers="64=48=23=10"), "synthetic"))
    changes = record_changes(old, new)
    keys = [c.key for c in changes]
    assert keys == ["network.layers", "models.global", "data.task"]
    message = conflict_message(tmp_path, changes, "X/checkpoint.<date-time>.old")
    assert "\n" not in message
    assert message.startswith(f"the checkpoint in {tmp_path} was trained with network.layers "
                              "= 64=48=32=10, models.global = 64-48-32-10 (fingerprint ")
    assert "; this config says network.layers = 64=48=23=10, " in message
    assert message.endswith("pass --fresh to start over (the old checkpoint is moved to "
                            "X/checkpoint.<date-time>.old)")


def test_added_or_removed_models_count_and_unknown_keys_do_not() -> None:
    old = {"models.global": "a", "data.task": "digits"}
    new = {"models.global": "a", "models.semi": "b", "data.task": "digits", "data.new": "x"}
    assert record_changes(old, new) == [RecordChange("models.semi", "(none)", "b")]
    assert record_changes(new, old) == [RecordChange("models.semi", "b", "(none)")]


def test_training_summary_says_how_to_train_further() -> None:
    assert training_summary(0, 5, None) == "round 5, until stopped (training.rounds = 0)"
    assert training_summary(30, 12, None) == "round 12 of 30"
    assert training_summary(30, 30, 30).endswith(
        "To train further, raise training.rounds or pass --rounds N with N > 30")
    assert training_summary(30, 30, 10).startswith("finished training.rounds = 30")


# --------------------------------------------------------------------------- nodes


async def test_a_changed_config_refuses_and_fresh_moves_the_checkpoint_aside(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data_dir = tmp_path / "n0"
    trained = await _trained(data_dir)
    store = CheckpointStore(data_dir)
    state = store.load()
    assert state is not None and state.trained_with is not None and state.loss is not None

    for changed in (_with_task(_config(data_dir), "synthetic"),
                    _config(data_dir, layers="64=48=23=10")):
        with pytest.raises(CheckpointConflict) as info:
            Node(changed)
        assert "pass --fresh to start over" in str(info.value)
        assert store.path.read_bytes() == trained  # not touched

    # same settings: resumed, last loss shown, and how to train further
    node = Node(_config(data_dir))
    try:
        assert node.progress.round == SPEC.rounds and node.progress.loss == state.loss
        assert node.resumed_at == SPEC.rounds
        assert any("training.rounds = 2 is already reached" in r.getMessage()
                   for r in caplog.records)
    finally:
        await node.transport.aclose()

    caplog.set_level(logging.WARNING, logger="p2p.runtime.node")
    fresh = Node(_config(data_dir, layers="64=48=23=10"), fresh=True)
    await fresh.transport.aclose()
    (aside,) = data_dir.glob("checkpoint.*.old")
    assert aside.read_bytes() == trained and not store.path.exists()
    assert fresh.progress.round == 0
    assert any(f"--fresh: moved the old checkpoint to {aside}" in r.getMessage()
               for r in caplog.records)


async def test_a_checkpoint_without_a_record_still_resumes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="p2p.runtime.state")
    data_dir = tmp_path / "n0"
    await _trained(data_dir)
    store = CheckpointStore(data_dir)
    state = store.load()
    assert state is not None
    store.save(dataclasses.replace(state, trained_with=None))  # as an older version wrote it
    node = Node(_with_task(_config(data_dir), "synthetic"))  # fits: loaded, as before
    await node.transport.aclose()
    assert node.progress.round == SPEC.rounds
    assert any("does not record the settings it was trained with" in r.getMessage()
               for r in caplog.records)
    with pytest.raises(CheckpointConflict, match="does not fit this configuration's network"):
        Node(_config(data_dir, layers="64=48=23=10"))


@pytest.mark.e2e
async def test_p2p_run_with_another_task_exits_2_naming_the_change(tmp_path: Path) -> None:
    data_dir = tmp_path / "n0"
    trained = await _trained(data_dir)
    changed = tmp_path / "changed.toml"
    changed.write_text(render_config_toml(_with_task(_config(data_dir), "synthetic")))
    proc = subprocess.run([sys.executable, "-m", "p2p", "run", "--config", str(changed)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("p2p: error:")]
    assert errors == [
        f"p2p: error: the checkpoint in {data_dir} was trained with data.task = digits; "
        "this config says data.task = synthetic. Restore the old settings to resume it, or "
        f"pass --fresh to start over (the old checkpoint is moved to "
        f"{data_dir}/checkpoint.<date-time>.old)"]
    assert (data_dir / "checkpoint.pt").read_bytes() == trained
