"""A full or read-only data directory at checkpoint time, on a running node.

Uses a real, tiny tmpfs mounted for the test (needs root and mount(2); skipped
otherwise): the disk really fills up and really turns read-only. The node must
report a clear error (admin reply and log line), keep the previous checkpoint
intact and loadable, keep running, and exit cleanly when stopped.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import trio

from p2p.cli.admin_client import AdminCommandError
from p2p.runtime.checkpoint import CheckpointStore
from p2p.testing import admin_request, fast_spec, tcp_node, wait_until

SIZE_KIB = 1024


def _mount_supported() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


@contextlib.contextmanager
def tiny_tmpfs(parent: Path) -> Iterator[Path]:
    mountpoint = parent / f"tmpfs-{uuid.uuid4().hex[:8]}"
    mountpoint.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE_KIB}k,mode=0700",
                             "tmpfs", str(mountpoint)], capture_output=True, text=True)
    if result.returncode != 0:
        mountpoint.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)
        with contextlib.suppress(OSError):
            mountpoint.rmdir()


def _fill(directory: Path) -> None:
    """Write until the file system refuses (ENOSPC)."""
    with open(directory / "filler", "wb", buffering=0) as f:
        block = b"\0" * 4096
        with contextlib.suppress(OSError):
            while True:
                f.write(block)


@pytest.mark.skipif(not _mount_supported(), reason="needs root and mount(8)")
@pytest.mark.parametrize("fault", ["full", "read-only"])
async def test_checkpoint_on_a_full_or_read_only_disk(
        tmp_path: Path, nursery: trio.Nursery, fault: str,
        caplog: pytest.LogCaptureFixture) -> None:
    with tiny_tmpfs(tmp_path) as mount:
        data_dir = mount / "node"
        node = tcp_node(data_dir, fast_spec(rounds=3), checkpoint_interval=0.2)
        done = trio.Event()

        async def run() -> None:
            await node.run()
            done.set()

        nursery.start_soon(run)
        await wait_until(lambda: node.progress.finished and node.counters["checkpoints"] >= 1)
        first = await admin_request(data_dir, "checkpoint")
        good = CheckpointStore(data_dir).load()
        assert good is not None and good.round == 3
        good_bytes = (data_dir / "checkpoint.pt").read_bytes()
        if fault == "full":
            _fill(mount)
            expected = "no space left on device"
        else:
            subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
            expected = "read-only file system"
        with caplog.at_level(logging.ERROR, logger="p2p"):
            with pytest.raises(AdminCommandError, match=expected) as info:
                await admin_request(data_dir, "checkpoint")
            assert "checkpoint.pt" in str(info.value)  # names the file
            # the periodic checkpointer fails too, says so, and the node keeps running
            await wait_until(lambda: any("periodic checkpoint failed" in r.getMessage()
                                         for r in caplog.records))
            status = await admin_request(data_dir, "status")
            assert status["round"] == 3
            # the previous checkpoint is intact, byte for byte, and loads
            assert (data_dir / "checkpoint.pt").read_bytes() == good_bytes
            again = CheckpointStore(data_dir).load()
            assert again is not None and again.round == good.round
            assert np.array_equal(again.pushsum["global"].values, good.pushsum["global"].values)
            assert not [p.name for p in data_dir.iterdir() if p.name.endswith(".tmp")]
            node.request_stop()
            with trio.fail_after(60):  # a hang guard
                await done.wait()  # a failed final checkpoint is logged, not raised
        assert any("final checkpoint failed" in r.getMessage() and expected in r.getMessage()
                   for r in caplog.records)
        assert first["bytes"] > 0
        assert (data_dir / "checkpoint.pt").read_bytes() == good_bytes
        if fault == "read-only":
            subprocess.run(["mount", "-o", "remount,rw", str(mount)], check=True)
        # restarting on the directory resumes from the last good checkpoint
        (mount / "filler").unlink(missing_ok=True)
        assert tcp_node(data_dir, fast_spec(rounds=3)).progress.round == 3


def test_tmpfs_helper_really_fills(tmp_path: Path) -> None:
    if not _mount_supported():
        pytest.skip("needs root and mount(8)")
    with tiny_tmpfs(tmp_path) as mount:
        _fill(mount)
        with pytest.raises(OSError) as info, open(mount / "x", "wb", buffering=0) as f:
            f.write(b"\0" * 65536)
        assert info.value.errno == errno.ENOSPC
