"""Issue 30, item 3: checks before anything is created.

``p2p config`` and ``p2p run`` run the same data, key and model checks, and
``p2p run`` creates no data directory, identity, lock or checkpoint before they
pass; each failure is one line and exit status 2. A data file's identity in the
checkpoint is its resolved path and content digest, so the same file under
another path resumes and a changed file does not. The CLI runs in-process.
"""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_wine

from p2p.cli.main import main
from p2p.config import load_config
from p2p.runtime.checkpoint import CheckpointConflict
from p2p.runtime.node import Node
from p2p.testing import running, wait_until

CONFIG = """\
[node]
listen = "127.0.0.1:0"
[network]
layers = "13=8=3"
[[models]]
name = "global"
neurons = "13-6-3"
[training]
rounds = 2
steps_per_round = 2
round_interval = 0.0
[data]
task = "npz"
path = "{path}"
"""


def _wine(path: Path, *, nan: bool = False) -> Path:
    d = load_wine()
    x = d.data.copy()
    if nan:
        x[3, 2] = np.nan
    np.savez(path, x=x, y=d.target)
    return path


def _run(*argv: str) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, [line for line in err.getvalue().splitlines() if line.startswith("p2p: error:")]


@pytest.mark.usefixtures("restore_logging")
def test_a_data_file_with_nan_fails_config_and_run_alike_and_run_creates_nothing(
        tmp_path: Path) -> None:
    _wine(tmp_path / "bad.npz", nan=True)
    config = tmp_path / "node.toml"
    config.write_text(CONFIG.format(path="bad.npz"))
    code, errors = _run("config", "--config", str(config))
    assert code == 2 and errors == [
        f"p2p: error: {config}: data.path: {tmp_path / 'bad.npz'}: key 'x': contains NaN or "
        "infinite values"]
    run_code, run_errors = _run("run", "--config", str(config), "--data-dir",
                                str(tmp_path / "d"))
    assert (run_code, run_errors) == (code, errors)
    assert not (tmp_path / "d").exists()  # no directory, identity, lock or checkpoint


@pytest.mark.usefixtures("restore_logging")
def test_a_bad_swarm_key_file_leaves_no_lock_behind(tmp_path: Path) -> None:
    _wine(tmp_path / "wine.npz")
    config = tmp_path / "node.toml"
    config.write_text(CONFIG.format(path="wine.npz"))
    key = tmp_path / "swarm.key"
    key.write_text("not a key\n")
    key.chmod(0o600)
    data_dir = tmp_path / "d"
    data_dir.mkdir(mode=0o700)
    code, errors = _run("run", "--config", str(config), "--data-dir", str(data_dir),
                        "--swarm-key-file", str(key))
    assert code == 2 and len(errors) == 1 and "swarm key file" in errors[0]
    assert list(data_dir.iterdir()) == []  # no node.lock, no identity.key
    code, errors = _run("config", "--config", str(config))
    assert code == 0


async def test_the_same_file_under_another_path_resumes_and_a_changed_one_does_not(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    examples = tmp_path / "examples"
    examples.mkdir()
    _wine(tmp_path / "wine.npz")
    config = examples / "node.toml"
    config.write_text(CONFIG.format(path="../wine.npz"))  # examples/../wine.npz
    data_dir = tmp_path / "d"
    node = Node(load_config(config).with_overrides(data_dir=str(data_dir)))
    async with running([node]):
        await wait_until(lambda: node.progress.finished)
    assert node.trained_with["data.path"] == str(tmp_path / "wine.npz")
    assert node.trained_with["data.content"].startswith("sha256:")

    absolute = tmp_path / "absolute.toml"
    absolute.write_text(CONFIG.format(path=tmp_path / "wine.npz"))
    again = Node(load_config(absolute).with_overrides(data_dir=str(data_dir)))
    await again.transport.aclose()
    assert again.resumed_at == 2  # the same file: resumed

    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy(tmp_path / "wine.npz", moved / "wine.npz")
    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text(CONFIG.format(path=moved / "wine.npz"))
    third = Node(load_config(elsewhere).with_overrides(data_dir=str(data_dir)))
    await third.transport.aclose()
    assert third.resumed_at == 2  # the same content under another path: resumed

    d = load_wine()
    np.savez(tmp_path / "wine.npz", x=d.data[:150], y=d.target[:150])  # changed in place
    with pytest.raises(CheckpointConflict, match="data.content = sha256:"):
        Node(load_config(absolute).with_overrides(data_dir=str(data_dir)))
