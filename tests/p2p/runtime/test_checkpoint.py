"""Atomic writes, failure safety, data-dir checks and checkpoint round trips."""

from __future__ import annotations

import errno
import io
import os
import stat
from pathlib import Path

import numpy as np
import pytest
import torch

from p2p.runtime import checkpoint as ckpt
from p2p.runtime.checkpoint import (
    CheckpointError,
    CheckpointStore,
    DataDirError,
    NodeState,
    PeerRecord,
    PushSumRecord,
    atomic_write_bytes,
    check_data_dir_writable,
)


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def _state(seed: int = 0) -> NodeState:
    rng = np.random.default_rng(seed)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.randn(5, 4)).sum().backward()
    opt.step()  # creates momentum buffers: optimizer state with tensors
    return NodeState(
        model_state={k: v.detach().clone() for k, v in net.state_dict().items()},
        pushsum={
            "global": PushSumRecord(0.375, rng.standard_normal(7)),
            "group": PushSumRecord(1.5, rng.standard_normal(3), rng.standard_normal(3)),
        },
        counters={"pushes_sent": 12, "global.rejected": 1},
        round=41,
        steps=410,
        view=[PeerRecord(b"\x01" * 32, "127.0.0.1:7401", 3, (b"\xaa" * 8, "text-tag")),
              PeerRecord(b"\x02" * 32, "[::1]:7402", 0)],
        model_views={"group": [PeerRecord(b"\x03" * 32, "h:1", 5, (b"\xbb",))]},
        optimizer_state=opt.state_dict(),
        node_id=b"\x09" * 32,
        saved_at=1234.5,
    )


# --------------------------------------------------------------------------- atomic write


def test_atomic_write_creates_and_replaces_with_mode(tmp_path: Path) -> None:
    target = tmp_path / "f.bin"
    atomic_write_bytes(target, b"first")
    assert target.read_bytes() == b"first"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    atomic_write_bytes(target, b"second" * 1000, mode=0o640)
    assert target.read_bytes() == b"second" * 1000
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert _leftovers(tmp_path) == []


def test_enospc_during_write_keeps_previous_file(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "checkpoint.pt"
    atomic_write_bytes(target, b"old contents")
    calls = {"n": 0}
    real_write = os.write

    def full_disk(fd: int, data: bytes) -> int:
        calls["n"] += 1
        if calls["n"] == 1:  # a short first write, then the disk is full
            return real_write(fd, bytes(data[:3]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt.os, "write", full_disk)
    with pytest.raises(CheckpointError, match="no space left on device") as info:
        atomic_write_bytes(target, b"new contents that do not fit")
    assert info.value.errno == errno.ENOSPC
    assert str(target) in str(info.value)
    monkeypatch.undo()
    assert target.read_bytes() == b"old contents"
    assert _leftovers(tmp_path) == []
    assert calls["n"] == 2


def test_fsync_failure_keeps_previous_file(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "checkpoint.pt"
    atomic_write_bytes(target, b"old")

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(ckpt.os, "fsync", failing_fsync)
    with pytest.raises(CheckpointError, match="Input/output error"):
        atomic_write_bytes(target, b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


def test_rename_failure_keeps_previous_file(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "checkpoint.pt"
    atomic_write_bytes(target, b"old")

    def failing_replace(src: str, dst: str) -> None:
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(ckpt.os, "replace", failing_replace)
    with pytest.raises(CheckpointError, match="permission denied"):
        atomic_write_bytes(target, b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


def test_unwritable_directory_gives_a_clear_error(tmp_path: Path) -> None:
    # A path "under" a regular file cannot be written even by root.
    blocker = tmp_path / "plainfile"
    blocker.write_bytes(b"x")
    with pytest.raises(CheckpointError, match="cannot create a temporary file"):
        atomic_write_bytes(blocker / "checkpoint.pt", b"data")
    assert blocker.read_bytes() == b"x"


def test_keyboard_interrupt_mid_write_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f"
    atomic_write_bytes(target, b"old")

    def interrupted(fd: int, data: bytes) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt.os, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_bytes(target, b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


# --------------------------------------------------------------------------- data dir


def test_check_data_dir_creates_missing_directory(tmp_path: Path) -> None:
    path = check_data_dir_writable(tmp_path / "a" / "b")
    assert path.is_dir() and path.is_absolute()
    assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0
    assert list(path.iterdir()) == []  # the probe file is gone


def test_check_data_dir_errors(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DataDirError, match="not a directory"):
        check_data_dir_writable(blocker)
    with pytest.raises(DataDirError, match="cannot create data directory"):
        check_data_dir_writable(blocker / "sub")
    with pytest.raises(DataDirError, match="does not exist"):
        check_data_dir_writable(tmp_path / "missing", create=False)


def test_check_data_dir_not_writable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError(errno.EACCES, "Permission denied")

    import p2p.runtime.data_dir

    monkeypatch.setattr(p2p.runtime.data_dir.tempfile, "mkstemp", denied)
    with pytest.raises(DataDirError, match="is not writable: permission denied"):
        check_data_dir_writable(tmp_path)


# --------------------------------------------------------------------------- store


def test_round_trip(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    assert store.load() is None and not store.exists()
    state = _state()
    size = store.save(state)
    assert size == store.path.stat().st_size > 0
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    loaded = store.load(expected_node_id=b"\x09" * 32)
    assert loaded is not None
    assert loaded.round == 41 and loaded.steps == 410
    assert loaded.counters == state.counters
    assert loaded.view == state.view
    assert loaded.model_views == state.model_views
    assert loaded.node_id == state.node_id and loaded.saved_at == 1234.5
    assert loaded.model_state.keys() == state.model_state.keys()
    for key, tensor in state.model_state.items():
        assert torch.equal(loaded.model_state[key], tensor)
    for name, rec in state.pushsum.items():
        got = loaded.pushsum[name]
        assert got.weight == rec.weight
        assert isinstance(got.values, np.ndarray) and got.values.dtype == np.float64
        np.testing.assert_array_equal(got.values, rec.values)
        if rec.estimate is None:
            assert got.estimate is None
        else:
            np.testing.assert_array_equal(got.estimate, rec.estimate)
    # the optimizer state loads back into an optimizer
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    opt = torch.optim.SGD(net.parameters(), lr=0.5, momentum=0.9)
    assert loaded.optimizer_state is not None
    opt.load_state_dict(loaded.optimizer_state)
    assert opt.param_groups[0]["lr"] == 0.1


def test_saved_values_do_not_alias_live_arrays(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    state = _state()
    store.save(state)
    loaded = store.load()
    assert loaded is not None
    loaded.pushsum["global"].values[:] = 0  # mutating the loaded copy ...
    assert np.any(state.pushsum["global"].values != 0)  # ... leaves the original alone


def test_failed_save_keeps_previous_checkpoint(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store = CheckpointStore(tmp_path)
    store.save(_state(0))

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt.os, "fsync", full)
    newer = _state(1)
    newer.round = 99
    with pytest.raises(CheckpointError, match="no space"):
        store.save(newer)
    monkeypatch.undo()
    loaded = store.load()
    assert loaded is not None and loaded.round == 41
    assert _leftovers(tmp_path) == []


def test_other_identity_is_refused(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save(_state())
    with pytest.raises(CheckpointError, match="another node identity"):
        store.load(expected_node_id=b"\x07" * 32)


def test_garbage_and_foreign_files_are_rejected(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.path.write_bytes(b"definitely not a checkpoint")
    with pytest.raises(ckpt.CheckpointCorrupt, match="header is not a checkpoint's"):
        store.load()
    store.path.write_bytes(ckpt.seal(b"definitely not a checkpoint"))
    with pytest.raises(ckpt.CheckpointCorrupt, match="cannot decode"):
        store.load()
    buffer = io.BytesIO()
    torch.save({"format": "something else"}, buffer)
    store.path.write_bytes(ckpt.seal(buffer.getvalue()))
    with pytest.raises(CheckpointError, match="not a checkpoint of this program"):
        store.load()
    buffer = io.BytesIO()
    torch.save({"format": ckpt.CHECKPOINT_FORMAT, "version": 999}, buffer)
    store.path.write_bytes(ckpt.seal(buffer.getvalue()))
    with pytest.raises(CheckpointError, match="version 999"):
        store.load()


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("echo pwned > /dev/null",))


def test_arbitrary_objects_are_never_unpickled(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    buffer = io.BytesIO()
    torch.save({"format": ckpt.CHECKPOINT_FORMAT, "version": 1, "x": _Evil()}, buffer)
    store.path.write_bytes(ckpt.seal(buffer.getvalue()))
    with pytest.raises(CheckpointError, match="cannot decode"):
        store.load()


def test_malformed_fields_are_rejected(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    good = ckpt._state_to_plain(_state())
    for field, bad in (("model_state", {"w": 3}), ("round", "x"), ("counters", {"a": 1.5}),
                       ("view", [(b"id", "a", "old", ())]), ("pushsum", {"g": {"weight": 1}})):
        raw = dict(good, **{field: bad})
        buffer = io.BytesIO()
        torch.save(raw, buffer)
        store.path.write_bytes(ckpt.seal(buffer.getvalue()))
        with pytest.raises(CheckpointError, match="invalid"):
            store.load()
