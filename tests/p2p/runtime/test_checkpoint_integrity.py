"""Issue 30, item 1: checkpoints that cannot lie.

A checkpoint carries a SHA-256 digest of its content; the store keeps the last
two; a node resumes the newest good one, moves a corrupt one aside
(``<name>.corrupt-<time>``) with one line saying what the fallback does to its
push-sum mass, exits 2 when both are corrupt, refuses values no node could
hold under a valid digest, and never writes a state it could not validate.
The reported case: bytes 6000-6200 of ``checkpoint.pt`` (the push-sum values)
flipped, which loaded silently and ruined the node.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from p2p.cli.main import main
from p2p.config import render_config_toml
from p2p.runtime import checkpoint as ckpt
from p2p.runtime.checkpoint import CheckpointCorrupt, CheckpointError, CheckpointStore
from p2p.runtime.node import Node
from p2p.swarm import node_config
from p2p.testing import MemoryNetwork, fast_spec, memory_addresses, memory_node, running, wait_until

SPEC = fast_spec(rounds=2)


def _flip(path: Path, start: int, count: int = 200, seed: int = 0) -> bytes:
    """Overwrite ``count`` bytes of ``path`` from ``start`` with random ones; the new bytes."""
    data = bytearray(path.read_bytes())
    rng = np.random.default_rng(seed)
    data[start:start + count] = rng.integers(0, 256, size=min(count, len(data) - start),
                                             dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    return bytes(data)


async def _train(root: Path, rounds: int) -> None:
    """Two nodes over memory train to ``rounds`` (resuming their checkpoints) and stop."""
    spec = dataclasses.replace(SPEC, rounds=rounds)
    net, addresses = MemoryNetwork(), memory_addresses(2)
    nodes = [memory_node(net, root / f"n{i}", spec, i, addresses[i],
                         bootstrap=addresses[:1] if i else ()) for i in range(2)]
    async with running(nodes):
        await wait_until(lambda: all(n.progress.finished for n in nodes))


def _values_offset(path: Path) -> int:
    """Where the push-sum values of model ``global`` start in the checkpoint file."""
    state = CheckpointStore(path.parent).load()
    assert state is not None
    offset = path.read_bytes().find(state.pushsum["global"].values.tobytes()[:64])
    assert offset > ckpt.HEADER_BYTES
    return offset


# --------------------------------------------------------------------------- the file


def test_the_digest_refuses_truncation_flips_and_zeroed_headers(tmp_path: Path) -> None:
    payload = b"x" * 1000
    sealed = ckpt.seal(payload)
    assert ckpt.unseal(sealed, tmp_path)[0] == payload
    for bad, reason in ((sealed[:700], "holds 652 bytes of content, its header says 1000"),
                        (sealed[:500] + b"y" + sealed[501:], "does not match its SHA-256"),
                        (b"\0" * 64 + sealed[64:], "header is not a checkpoint's"),
                        (b"", "empty")):
        with pytest.raises(CheckpointCorrupt, match=reason):
            ckpt.unseal(bad, tmp_path)


def test_the_store_keeps_the_previous_checkpoint_and_sets_a_corrupt_one_aside(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = CheckpointStore(tmp_path)
    state = ckpt.NodeState(model_state={"w": torch.ones(3)}, round=1)
    store.save(state)
    first = store.path.read_bytes()
    store.save(dataclasses.replace(state, round=2))
    assert store.previous.read_bytes() == first
    loaded = store.load(path=store.previous)
    assert loaded is not None and loaded.round == 1
    corrupt = _flip(store.path, 100, 10)
    store.save(dataclasses.replace(state, round=3))  # never rotated into the older slot
    assert store.previous.read_bytes() == first
    (aside,) = tmp_path.glob("checkpoint.pt.corrupt-*")
    assert aside.read_bytes() == corrupt
    assert any("moved it to" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- nodes


async def test_flipped_push_sum_values_fall_back_to_the_older_checkpoint(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    await _train(tmp_path, 2)
    await _train(tmp_path, 4)  # resumes round 2: checkpoint.pt at 4, checkpoint.prev.pt at 2
    store = CheckpointStore(tmp_path / "n0")
    older = store.previous.read_bytes()
    corrupt = _flip(store.path, _values_offset(store.path))  # the reported case
    caplog.set_level(logging.INFO)
    spec = dataclasses.replace(SPEC, rounds=6)
    net, addresses = MemoryNetwork(), memory_addresses(2)
    nodes = [memory_node(net, tmp_path / f"n{i}", spec, i, addresses[i],
                         bootstrap=addresses[:1] if i else ()) for i in range(2)]
    node = nodes[0]
    assert node.resumed_at == 2 and node.progress.round == 2  # the older one
    older_state = store.load(path=store.previous)
    assert older_state is not None and node.progress.accuracy == older_state.accuracy
    (aside,) = (tmp_path / "n0").glob("checkpoint.pt.corrupt-*")
    assert aside.read_bytes() == corrupt and not store.path.exists()  # kept, not overwritten
    assert store.previous.read_bytes() == older
    (line,) = [r.getMessage() for r in caplog.records if "is corrupt" in r.getMessage()]
    assert "does not match its SHA-256 digest" in line and f"moved it to {aside}" in line
    assert "resumed the older checkpoint checkpoint.prev.pt (round 2" in line
    assert "weights: global" in line and "lost or counted twice" in line
    assert any(r.getMessage() == "resumed from checkpoint.prev.pt at round 2"
               for r in caplog.records)
    async with running(nodes):
        status = node.admin.status()
        assert status.checkpoint is not None and "resumed the older checkpoint" in status.checkpoint
        await wait_until(lambda: node.collaboration().collaborating)  # an exchange accepted
        await wait_until(lambda: node.progress.finished)
    assert store.previous.read_bytes() == older and aside.read_bytes() == corrupt
    final = store.load()
    assert final is not None and final.round == 6 and final.sealed


@pytest.mark.usefixtures("restore_logging")
async def test_both_corrupt_exits_2_in_one_line_and_moves_both_aside(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    await _train(tmp_path, 2)
    await _train(tmp_path, 3)
    data_dir = tmp_path / "n0"
    store = CheckpointStore(data_dir)
    _flip(store.path, 3000)
    _flip(store.previous, 0, 4096)  # a zeroed-out page would do the same
    config = tmp_path / "n0.toml"
    config.write_text(render_config_toml(node_config(SPEC, 0, data_dir, None).with_overrides(
        listen="127.0.0.1:0", bootstrap=[])))
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["run", "--config", str(config)])
    errors = [line for line in capsys.readouterr().err.splitlines()
              if line.startswith("p2p: error:")]
    assert code == 2 and len(errors) == 1
    assert errors[0].startswith(f"p2p: error: no good checkpoint in {data_dir}: checkpoint ")
    assert "run it again to start over with the same identity" in errors[0]
    assert not store.exists()
    assert len(list(data_dir.glob("checkpoint.pt.corrupt-*"))) == 1
    assert len(list(data_dir.glob("checkpoint.prev.pt.corrupt-*"))) == 1


async def test_values_no_node_could_hold_are_refused_under_a_valid_digest(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    await _train(tmp_path, 2)
    await _train(tmp_path, 3)
    data_dir = tmp_path / "n0"
    store = CheckpointStore(data_dir)
    state = store.load()
    assert state is not None
    for bad in (np.nan, 3e7):  # non-finite, beyond the merge bound (1e6)
        values = state.pushsum["global"].values.copy()
        values[5] = bad
        pushsum = {"global": dataclasses.replace(state.pushsum["global"], values=values)}
        store.path.write_bytes(store.encode(dataclasses.replace(state, pushsum=pushsum)))
        node = Node(node_config(SPEC, 0, data_dir, None).with_overrides(
            listen="127.0.0.1:0", bootstrap=[]))
        await node.transport.aclose()
        assert node.resumed_at == 2  # the older one
        assert node.checkpoint_note is not None
        assert "push-sum values of model 'global' holds" in node.checkpoint_note
        for aside in data_dir.glob("checkpoint.pt.corrupt-*"):
            aside.unlink()


async def test_a_state_no_node_could_hold_is_never_written(tmp_path: Path) -> None:
    await _train(tmp_path, 2)
    data_dir = tmp_path / "n0"
    before = (data_dir / "checkpoint.pt").read_bytes()
    node = memory_node(MemoryNetwork(), data_dir, SPEC, 0, "10.0.0.1:7000")
    node.learning.network.flat.data[3] = float("inf")
    with pytest.raises(CheckpointError, match="checkpoint not written, checkpoint.pt and "
                                              "checkpoint.prev.pt kept"):
        await node.save_checkpoint()
    assert (data_dir / "checkpoint.pt").read_bytes() == before


async def test_a_corrupt_older_checkpoint_is_set_aside_and_the_newest_resumed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    await _train(tmp_path, 2)
    await _train(tmp_path, 3)
    data_dir = tmp_path / "n0"
    _flip(data_dir / "checkpoint.prev.pt", 2000)
    node = memory_node(MemoryNetwork(), data_dir, SPEC, 0, "10.0.0.1:7000")
    assert node.resumed_at == 3
    assert node.checkpoint_note is not None
    assert node.checkpoint_note.endswith("the next checkpoint writes a new older one")
    assert len(list(data_dir.glob("checkpoint.prev.pt.corrupt-*"))) == 1


async def test_a_checkpoint_of_an_older_version_has_no_digest_and_still_resumes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    await _train(tmp_path, 2)
    data_dir = tmp_path / "n0"
    payload, _ = ckpt.unseal((data_dir / "checkpoint.pt").read_bytes(), data_dir)
    raw = torch.load(io.BytesIO(payload), weights_only=True)
    raw["version"] = 4
    torch.save(raw, data_dir / "checkpoint.pt")  # a bare torch file, as version 4 wrote it
    caplog.set_level(logging.WARNING)
    node = memory_node(MemoryNetwork(), data_dir, SPEC, 0, "10.0.0.1:7000")
    assert node.resumed_at == 2
    assert any("carries no digest (an older version wrote it)" in r.getMessage()
               for r in caplog.records)
    raw["version"] = 5  # the current version always has its digest
    torch.save(raw, data_dir / "checkpoint.pt")
    with pytest.raises(CheckpointCorrupt, match="without its digest"):
        CheckpointStore(data_dir).load()
