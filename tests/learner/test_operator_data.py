"""A user's own data: scaled with statistics every node shares, and nodes set apart by flags.

- Stored features (floats) are standardized by default with the mean and
  standard deviation over every node's training samples, so every node
  applies the same map; built-in tasks and uint8 images keep their scaling.
- ``data.scale = "none"`` keeps them as stored, with a warning when they are
  far from unit scale.
- ``p2p run --name --seed --node-index --num-nodes`` let nodes share one TOML
  file (real daemons: each logs its own shard).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from learner.data import DataSpec, load_node_data
from learner.tasks import digits_task, task_shape

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def raw_npz(path: Path, *, test_set: bool = False, seed: int = 0) -> Path:
    """Features on wildly different scales (as the wine data's): column j ~ 10^(j-3)."""
    rng = np.random.default_rng(seed)
    scales = 10.0 ** (np.arange(6) - 3)
    x = 5 * scales + rng.normal(size=(300, 6)) * scales
    arrays = {"x": x, "y": np.arange(300) % 3}
    if test_set:
        arrays |= {"x_test": x[:30] * 1.5, "y_test": np.arange(30) % 3}
    np.savez(path, **arrays)
    return path


def test_stored_features_are_standardized_alike_on_every_node(tmp_path: Path) -> None:
    path = str(raw_npz(tmp_path / "raw.npz"))
    nodes = [load_node_data(DataSpec(task="npz", path=path, node_index=i, num_nodes=3))
             for i in range(3)]
    union = np.concatenate([n.train_x for n in nodes]).astype(np.float64)
    # the statistics are those of all nodes' training samples together
    np.testing.assert_allclose(union.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(union.std(axis=0), 1.0, atol=1e-4)
    for n in nodes:  # one shared test part, mapped the same way on every node
        np.testing.assert_array_equal(n.test_x, nodes[0].test_x)
        assert np.abs(n.train_x.mean(axis=0)).max() < 0.5  # no shard is off on its own
    raw = load_node_data(DataSpec(task="npz", path=path, node_index=0, num_nodes=3,
                                  scale="none"))
    assert raw.train_x[:, 5].mean() > 100  # unscaled: as stored


def test_statistics_come_from_the_training_samples_when_the_file_has_a_test_set(
        tmp_path: Path) -> None:
    path = str(raw_npz(tmp_path / "raw.npz", test_set=True))
    data = load_node_data(DataSpec(task="npz", path=path))
    with np.load(path) as f:
        x, x_test = f["x"], f["x_test"]
    expected = (x_test - x.mean(axis=0)) / x.std(axis=0)
    np.testing.assert_allclose(data.test_x, expected, rtol=1e-4, atol=1e-4)


def test_builtin_tasks_and_uint8_images_keep_their_scaling(tmp_path: Path) -> None:
    for spec in (DataSpec(), DataSpec(task="synthetic")):
        scaled = load_node_data(spec)
        kept = load_node_data(DataSpec(task=spec.task, scale="none"))
        np.testing.assert_array_equal(scaled.train_x, kept.train_x)
    digits = load_node_data(DataSpec(num_nodes=1))
    assert digits.train_x.min() == 0.0 and digits.train_x.max() == 1.0  # pixels / 16
    assert digits_task().x.max() == 1.0
    pixels = np.random.default_rng(1).integers(0, 256, size=(50, 16), dtype=np.uint8)
    np.savez(tmp_path / "img.npz", x=pixels, y=np.arange(50) % 2)
    images = load_node_data(DataSpec(task="npz", path=str(tmp_path / "img.npz")))
    assert images.train_x.min() >= 0.0 and images.train_x.max() <= 1.0
    assert set(np.round(images.train_x.ravel() * 255).astype(int)) <= set(pixels.ravel())


def test_unscaled_features_far_from_unit_scale_are_warned_about(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = str(raw_npz(tmp_path / "raw.npz"))
    with caplog.at_level(logging.WARNING, logger="learner.data"):
        load_node_data(DataSpec(task="npz", path=path, scale="none"))
    (line,) = [r.getMessage() for r in caplog.records]
    assert "features are far from unit scale (feature 5 has root mean square" in line
    assert 'set data.scale = "standard"' in line
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="learner.data"):
        load_node_data(DataSpec(task="npz", path=path))  # scaled: nothing to say
        load_node_data(DataSpec(scale="none"))  # digits are in [0, 1] already
    assert not caplog.records


def test_task_shape_agrees_with_the_loaded_task(tmp_path: Path) -> None:
    path = str(raw_npz(tmp_path / "raw.npz", test_set=True))
    for task, where in (("npz", path), ("digits", None), ("synthetic", None)):
        data = load_node_data(DataSpec(task=task, path=where))
        shape = task_shape(task, where, 0)
        assert (shape.num_features, shape.num_classes) == (data.num_features, data.num_classes)


def test_config_checks_the_scale_key(tmp_path: Path) -> None:
    toml = tmp_path / "n.toml"
    toml.write_text('[data]\nscale = "standart"\n')
    done = subprocess.run([sys.executable, "-m", "p2p", "config", "--config", str(toml)],
                          capture_output=True, text=True, env=ENV, timeout=120)
    assert done.returncode == 2
    assert ("data.scale: expected one of \"standard\" | \"none\", got 'standart' "
            "(did you mean 'standard'?)") in done.stderr


# --------------------------------------------------------------------------- real daemons


def status(data_dir: Path) -> dict[str, object] | None:
    try:
        done = subprocess.run([sys.executable, "-m", "p2p", "status", "--data-dir",
                               str(data_dir), "--json"],
                              capture_output=True, text=True, env=ENV, timeout=120)
    except subprocess.TimeoutExpired:  # a starved machine: ask again, within wait_for's limit
        return None
    return json.loads(done.stdout) if done.returncode == 0 else None


def wait_for(predicate: object, what: str, timeout: float = 240.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()  # type: ignore[operator]
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"still waiting after {timeout:g} s for {what}")


@pytest.fixture
def daemons() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in started:
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.e2e
def test_nodes_from_one_shared_toml_get_their_own_name_seed_and_shard(
        tmp_path: Path, daemons: list[subprocess.Popen[str]]) -> None:
    raw_npz(tmp_path / "mine.npz")
    (tmp_path / "swarm.toml").write_text(
        '[network]\nlayers = "6=8=3"\n[[models]]\nname = "global"\nneurons = "6-8-3"\n'
        '[training]\nrounds = 5\n[data]\ntask = "npz"\npath = "mine.npz"\n')
    for i in range(2):  # started together: what is checked needs no peer
        log = (tmp_path / f"n{i}.log").open("w")
        daemons.append(subprocess.Popen(
            [sys.executable, "-m", "p2p", "run", "--config", "swarm.toml",
             "--data-dir", f"n{i}", "--listen", "127.0.0.1:0",
             "--name", f"node-{i}", "--seed", str(10 + i),
             "--node-index", str(i), "--num-nodes", "2"],
            cwd=tmp_path, env=ENV, stdout=log, stderr=subprocess.STDOUT, text=True))
    for i in range(2):
        report = wait_for(lambda i=i: status(tmp_path / f"n{i}"), f"node {i} to answer")
        assert report["name"] == f"node-{i}"  # type: ignore[index]
        log = (tmp_path / f"n{i}.log").read_text()
        assert f"data: shard {i} of 2, 120 training samples, 60 test samples" in log, log
        assert "features standardized with the mean and standard deviation of the 240 " \
               "training samples of all nodes" in log, log
