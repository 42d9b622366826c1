"""The task registry: mnist5k and mnist1d, public splits, and the older tasks unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from learner.data import DataSpec, load_node_data, split_parts, split_task
from learner.data_errors import DataError
from learner.spec import NetworkSpec
from learner.tasks import (
    TASKS,
    digits_task,
    get_task,
    load_task,
    mnist1d_task,
    mnist5k_task,
    resolve_network,
    synthetic_task,
    task_shape,
)
from p2p.config import ConfigError, DataConfig, parse_config_text


def _rows(x: np.ndarray) -> set[bytes]:
    return {r.tobytes() for r in x}


# ------------------------------------------------------------------ the registry


def test_registry_names_every_task_and_refuses_others() -> None:
    assert set(TASKS) == {"digits", "synthetic", "npz", "idx", "mnist5k", "mnist1d"}
    with pytest.raises(DataError, match="unknown data task 'mnist'.*mnist5k"):
        get_task("mnist")
    for name in ("mnist5k", "mnist1d"):
        assert DataConfig(task=name).spec().task == name
        assert parse_config_text(f'[data]\ntask = "{name}"\n').data.task == name


def test_shapes_agree_with_the_loaded_tasks() -> None:
    for name, features, sample in (("digits", 64, (1, 8, 8)), ("mnist5k", 784, (1, 28, 28)),
                                   ("mnist1d", 40, (1, 40)), ("synthetic", 64, (64,))):
        shape = task_shape(name, None, 0)
        task = load_task(name, None, 0)
        assert (shape.num_features, shape.num_classes) == (features, 10) == (
            task.num_features, task.num_classes)
        assert shape.sample_shape == task.sample_shape == sample
        assert int(np.prod(sample)) == features


def test_named_networks_fit_their_task() -> None:
    for name in ("digits", "synthetic", "mnist5k", "mnist1d"):
        net = NetworkSpec.parse(resolve_network(name, "mlp"))
        shape = task_shape(name, None, 0)
        assert (net.sizes[0], net.sizes[-1]) == (shape.num_features, shape.num_classes)
    assert resolve_network("mnist5k", None) == "784=300=100=10"
    assert resolve_network("mnist5k", "784=50=10") == "784=50=10"
    assert resolve_network("mnist5k", "cnn").startswith("1x28x28=")
    with pytest.raises(DataError, match="no network named 'cnn'"):
        resolve_network("digits", "cnn")
    with pytest.raises(DataError, match="no default network"):
        resolve_network("npz", None)


def test_sample_counts_are_for_generated_tasks_only() -> None:
    assert DataSpec(task="mnist1d", num_samples=300).num_samples == 300
    with pytest.raises(DataError, match="data.num_samples: .*generated tasks only"):
        DataSpec(task="digits", num_samples=300)
    with pytest.raises(ConfigError, match="data.num_samples"):
        DataConfig(task="mnist5k", num_samples=300)
    with pytest.raises(ConfigError, match="data.public_size"):
        parse_config_text("[data]\npublic_size = -1\n")


# ------------------------------------------------------------------ mnist5k


def test_mnist5k_loads_offline_from_the_package() -> None:
    task = mnist5k_task()
    assert task.x.shape == (5000, 784) and task.x.dtype == np.float32
    assert task.x.min() == 0.0 and task.x.max() == 1.0
    assert np.bincount(task.y).tolist() == [500] * 10
    assert task.x_test is None and task.num_classes == 10
    # an image, not noise: the border pixels of a digit are mostly blank
    images = task.x.reshape(-1, 28, 28)
    assert images[:, :3, :].mean() < 0.01 < images[:, 10:18, 10:18].mean()


def test_mnist5k_nodes_share_test_and_public_parts_and_own_disjoint_shards() -> None:
    nodes = [load_node_data(DataSpec(task="mnist5k", node_index=i, num_nodes=4, seed=1,
                                     permutation="8:9" if i % 2 else None)) for i in range(4)]
    first = nodes[0]
    assert first.test_y.size == 1000 and first.public_y.size == 500
    assert sum(n.train_y.size for n in nodes) == 3500
    assert first.sample_shape == (1, 28, 28)
    for node in nodes[1:]:
        np.testing.assert_array_equal(node.test_x, first.test_x)
        np.testing.assert_array_equal(node.public_x, first.public_x)
        np.testing.assert_array_equal(node.public_y, first.public_y)  # true labels everywhere
    perm = np.array([0, 1, 2, 3, 4, 5, 6, 7, 9, 8])
    np.testing.assert_array_equal(perm[first.test_y], nodes[1].test_y)
    public, test = _rows(first.public_x), _rows(first.test_x)
    assert not public & test
    seen: set[bytes] = set()
    for node in nodes:
        shard = _rows(node.train_x)
        assert not shard & public and not shard & test and not shard & seen
        seen |= shard
    # the public labels are the true ones: they match the images in the task
    task = mnist5k_task()
    where = {r.tobytes(): int(y) for r, y in zip(task.x, task.y, strict=True)}
    assert [where[r.tobytes()] for r in first.public_x[:50]] == first.public_y[:50].tolist()


def test_public_size_can_be_set_for_mnist5k() -> None:
    data = load_node_data(DataSpec(task="mnist5k", num_nodes=2, public_size=100))
    assert data.public_y.size == 100 and data.train_y.size == 1950
    with pytest.raises(DataError, match="leave no training samples"):
        load_node_data(DataSpec(task="mnist5k", num_nodes=2, public_size=4000))


# ------------------------------------------------------------------ mnist1d


def test_mnist1d_is_seeded_balanced_standardised_and_sized() -> None:
    a, b, c = mnist1d_task(3), mnist1d_task(3), mnist1d_task(4)
    np.testing.assert_array_equal(a.x, b.x)
    assert not np.array_equal(a.x, c.x)
    assert a.x.shape == (5000, 40) and a.sample_shape == (1, 40)
    assert np.bincount(a.y).tolist() == [500] * 10
    assert abs(float(a.x.mean())) < 1e-4 and abs(float(a.x.std()) - 1.0) < 1e-4
    small = load_task("mnist1d", None, 3, num_samples=200)
    assert small.x.shape == (200, 40)


def test_mnist1d_public_samples_are_drawn_apart() -> None:
    plain = mnist1d_task(0, public_size=0)
    with_public = mnist1d_task(0, public_size=300)
    np.testing.assert_array_equal(plain.x, with_public.x)
    assert with_public.x_public is not None and with_public.x_public.shape == (300, 40)
    assert not _rows(with_public.x_public) & _rows(plain.x)
    data = load_node_data(DataSpec(task="mnist1d", num_nodes=4, node_index=2))
    assert data.public_y.size == 500 and data.test_y.size == 1000
    assert data.train_y.size == 1000  # 4000 training samples over 4 nodes: nothing carved


def test_mnist1d_needs_more_than_a_linear_model() -> None:
    # class means alone separate the classes only a little: the task is hard for
    # linear models (the construction's point), yet far from noise
    task = mnist1d_task(0)
    x, y = task.x, task.y
    centroids = np.stack([x[:4000][y[:4000] == k].mean(axis=0) for k in range(10)])
    nearest = ((x[4000:, None, :] - centroids[None]) ** 2).sum(axis=-1).argmin(axis=1)
    accuracy = float((nearest == y[4000:]).mean())
    assert 0.15 < accuracy < 0.6


# ------------------------------------------------------------------ older tasks unchanged


def test_digits_and_synthetic_are_unchanged_by_public_splits() -> None:
    # digits carve no public split by default: test part and shards are split_task's
    task = digits_task()
    test_idx, shards = split_task(task, num_nodes=4, seed=3, test_fraction=0.2)
    data = load_node_data(DataSpec(node_index=2, num_nodes=4, seed=3))
    np.testing.assert_array_equal(data.train_x, task.x[shards[2]])
    np.testing.assert_array_equal(data.test_x, task.x[test_idx])
    assert data.public_y.size == 0
    # synthetic draws its public samples apart: its samples are what they were
    np.testing.assert_array_equal(synthetic_task(1).x, synthetic_task(1, public_size=200).x)
    node = load_node_data(DataSpec(task="synthetic", num_nodes=3, seed=5))
    assert node.public_y.size == 200


def test_a_carved_public_split_comes_after_the_test_part() -> None:
    task = digits_task()
    plain = split_parts(task, num_nodes=4, seed=3, test_fraction=0.2)
    carved = split_parts(task, num_nodes=4, seed=3, test_fraction=0.2, public_size=100)
    np.testing.assert_array_equal(plain.test, carved.test)
    assert plain.public.size == 0 and carved.public.size == 100
    every = np.concatenate([carved.test, carved.public, *carved.shards])
    assert every.size == np.unique(every).size == task.x.shape[0]
    data = load_node_data(DataSpec(num_nodes=4, seed=3, public_size=100))
    np.testing.assert_array_equal(data.public_x, task.x[carved.public])


def test_npz_public_split_from_the_file_or_carved(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    path = tmp_path / "d.npz"
    np.savez(path, x=rng.random((60, 5)), y=np.arange(60) % 3,
             x_public=rng.random((8, 5)), y_public=np.arange(8) % 3)
    data = load_node_data(DataSpec(task="npz", path=str(path), num_nodes=2))
    assert data.public_x.shape == (8, 5) and data.train_y.size == 24  # 48 / 2, nothing carved
    capped = load_node_data(DataSpec(task="npz", path=str(path), num_nodes=2, public_size=3))
    np.testing.assert_array_equal(capped.public_x, data.public_x[:3])
    with pytest.raises(DataError, match="exceeds the 8 public samples"):
        load_node_data(DataSpec(task="npz", path=str(path), public_size=9))
    plain = tmp_path / "p.npz"
    np.savez(plain, x=rng.random((60, 5)), y=np.arange(60) % 3)
    assert load_node_data(DataSpec(task="npz", path=str(plain))).public_y.size == 0
    carved = load_node_data(DataSpec(task="npz", path=str(plain), num_nodes=2, public_size=6))
    assert carved.public_y.size == 6 and carved.train_y.size == 21
    half = tmp_path / "half.npz"
    np.savez(half, x=rng.random((6, 2)), y=np.arange(6) % 2, x_public=rng.random((2, 2)))
    with pytest.raises(DataError, match="'x_public' and 'y_public' must be given together"):
        load_node_data(DataSpec(task="npz", path=str(half)))
