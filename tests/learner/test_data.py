"""Tests for learner data: permutations, IDX files, task loaders and node splits."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from learner.data import DataSpec, load_node_data, split_task
from learner.data_errors import DataError
from learner.permutations import (
    format_cycles,
    format_permutation,
    last_classes_permutations,
    parse_cycles,
    parse_permutation,
)
from learner.tasks import digits_task, idx_task, load_task, npz_task, synthetic_task
from learner.tasks.idx import read_idx, write_idx

# ---------------------------------------------------------------- permutations


@pytest.mark.parametrize("spec", [None, "", "id", "identity", " () "])
def test_identity_specs(spec: str | None) -> None:
    assert parse_permutation(spec, 10).tolist() == list(range(10))


def test_swap_cycle_rate_and_map_specs() -> None:
    assert parse_permutation("8:9", 10).tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 9, 8]
    assert parse_permutation("6:7, 8:9", 10).tolist() == [0, 1, 2, 3, 4, 5, 7, 6, 9, 8]
    # (7 8 9): 7 -> 8, 8 -> 9, 9 -> 7
    assert parse_permutation("(7 8 9)", 10).tolist() == [0, 1, 2, 3, 4, 5, 6, 8, 9, 7]
    assert parse_permutation("(0 1)(8 9)", 10).tolist() == [1, 0, 2, 3, 4, 5, 6, 7, 9, 8]
    # difference rate r: cycle over the last r classes
    assert parse_permutation("rate:3", 10).tolist() == parse_permutation("(7 8 9)", 10).tolist()
    assert parse_permutation("rate:0", 10).tolist() == list(range(10))
    assert parse_permutation("rate:10", 10)[9] == 0
    assert parse_permutation("map:1,0,2", 3).tolist() == [1, 0, 2]


def test_one_notation_for_cycles() -> None:
    # "7:8:9" is the cycle 7 -> 8 -> 9 -> 7, the same as "(7 8 9)"; the colon form is canonical
    assert parse_permutation("7:8:9", 10).tolist() == parse_permutation("(7 8 9)", 10).tolist()
    assert parse_cycles("8:9,6:7") == ((8, 9), (6, 7))
    assert parse_cycles("(8 9)(6 7)") == ((8, 9), (6, 7))
    assert parse_cycles("") == parse_cycles("id") == ()
    assert format_cycles(((8, 9), (6, 7))) == "8:9,6:7"
    assert format_permutation(parse_permutation("(7 8 9)", 10)) == "7:8:9"
    assert format_cycles(()) == "id"


def test_format_round_trips() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        perm = rng.permutation(10)
        assert parse_permutation(format_permutation(perm), 10).tolist() == perm.tolist()


def test_last_classes_permutations_are_s3_on_last_digits() -> None:
    specs = last_classes_permutations()
    perms = [tuple(parse_permutation(s, 10).tolist()) for s in specs]
    assert specs[0] == "id"
    assert len(set(perms)) == 6
    for perm in perms:
        assert perm[:7] == tuple(range(7))
        assert sorted(perm[7:]) == [7, 8, 9]


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("8:x", "not a class index"),
        ("8:10", "out of range"),
        ("8:8", "itself"),
        ("8:9,", "not a class index"),
        ("8:9,9:7", "disjoint"),
        ("(7,8,9)", "comma separates cycles"),
        ("(7 8 7)", "repeats"),
        ("(7 8", "unexpected text"),
        ("(7 8) junk", "unexpected text"),
        ("rate:1", "difference rate"),
        ("rate:11", "difference rate"),
        ("rate:x", "integer"),
        ("map:0,1", "exactly once"),
        ("map:0,0,1,2,3,4,5,6,7,8", "exactly once"),
        ("shuffle", "unrecognised"),
    ],
)
def test_bad_permutation_specs(spec: str, fragment: str) -> None:
    with pytest.raises(DataError, match=fragment) as info:
        parse_permutation(spec, 10)
    assert repr(spec) in str(info.value)


# ------------------------------------------------------------------------ IDX


def test_idx_round_trip_plain_and_gzip(tmp_path: Path) -> None:
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    labels = np.array([7, -3, 100000], dtype=np.int32)
    floats = np.array([[1.5, -2.25]], dtype=np.float64)
    write_idx(tmp_path / "a.idx", images)
    write_idx(tmp_path / "b.idx", labels, compress=True)
    write_idx(tmp_path / "c", floats)
    assert (tmp_path / "b.idx").read_bytes()[:2] == b"\x1f\x8b"
    np.testing.assert_array_equal(read_idx(tmp_path / "a.idx"), images)
    np.testing.assert_array_equal(read_idx(tmp_path / "b.idx"), labels)
    np.testing.assert_array_equal(read_idx(tmp_path / "c"), floats)


def test_idx_reads_hand_written_mnist_header(tmp_path: Path) -> None:
    # 00 00 08 01 | size 3 | three unsigned bytes, gzipped as MNIST ships them
    raw = bytes([0, 0, 8, 1, 0, 0, 0, 3, 5, 0, 9])
    (tmp_path / "labels.gz").write_bytes(gzip.compress(raw))
    assert read_idx(tmp_path / "labels.gz").tolist() == [5, 0, 9]


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b"\x00\x00", "too short"),
        (bytes([1, 0, 8, 1, 0, 0, 0, 1, 0]), "bad magic"),
        (bytes([0, 0, 0x42, 1, 0, 0, 0, 1, 0]), "unknown IDX type"),
        (bytes([0, 0, 8, 0]), "0 dimensions"),
        (bytes([0, 0, 8, 2, 0, 0, 0, 1]), "truncated header"),
        (bytes([0, 0, 8, 1, 0, 0, 0, 3, 1, 2]), "needs 3"),
        (b"\x1f\x8bnot really gzip", "corrupt gzip"),
    ],
)
def test_idx_errors_name_the_file(tmp_path: Path, payload: bytes, fragment: str) -> None:
    path = tmp_path / "broken-idx"
    path.write_bytes(payload)
    with pytest.raises(DataError, match=fragment) as info:
        read_idx(path)
    assert str(path) in str(info.value)


def test_idx_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot read"):
        read_idx(tmp_path / "nope")


def _write_mnist_dir(root: Path, n_train: int = 12, n_test: int = 5, with_test: bool = True) -> None:
    rng = np.random.default_rng(0)
    write_idx(root / "train-images-idx3-ubyte.gz",
              rng.integers(0, 256, (n_train, 4, 4), dtype=np.uint8), compress=True)
    write_idx(root / "train-labels-idx1-ubyte.gz", (np.arange(n_train) % 3).astype(np.uint8),
              compress=True)
    if with_test:
        write_idx(root / "t10k-images-idx3-ubyte", rng.integers(0, 256, (n_test, 4, 4),
                                                                dtype=np.uint8))
        write_idx(root / "t10k-labels-idx1-ubyte", (np.arange(n_test) % 3).astype(np.uint8))


def test_idx_task_directory(tmp_path: Path) -> None:
    _write_mnist_dir(tmp_path)
    task = idx_task(tmp_path)
    assert task.x.shape == (12, 16) and task.x.dtype == np.float32
    assert 0.0 <= task.x.min() and task.x.max() <= 1.0
    assert task.num_classes == 3 and task.x_test is not None and task.x_test.shape == (5, 16)
    data = load_node_data(DataSpec(task="idx", path=str(tmp_path), node_index=1, num_nodes=3))
    assert data.train_x.shape == (4, 16) and data.test_x.shape == (5, 16)


def test_idx_task_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not a directory"):
        idx_task(tmp_path / "missing")
    _write_mnist_dir(tmp_path, with_test=False)
    (tmp_path / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match="no training labels file"):
        idx_task(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(7, dtype=np.uint8))
    with pytest.raises(DataError, match="7 labels but the features have 12"):
        idx_task(tmp_path)


# ------------------------------------------------------------------------ npz


def _npz(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)
    return path


def test_npz_task_with_and_without_test(tmp_path: Path) -> None:
    x = np.arange(40, dtype=np.float64).reshape(10, 2, 2)
    y = np.arange(10) % 4
    task = npz_task(_npz(tmp_path / "a.npz", x=x, y=y))
    assert task.x.shape == (10, 4) and task.x.dtype == np.float32 and task.num_classes == 4
    assert task.x_test is None
    task = npz_task(_npz(tmp_path / "b.npz", x=x, y=y, x_test=x[:3], y_test=y[:3]), num_classes=6)
    assert task.num_classes == 6 and task.x_test is not None and task.x_test.shape == (3, 4)
    pixels = npz_task(_npz(tmp_path / "c.npz", x=np.full((2, 3), 255, np.uint8), y=[0, 1]))
    assert pixels.x.max() == 1.0


@pytest.mark.parametrize(
    ("arrays", "fragment"),
    [
        ({"y": np.zeros(3, int)}, "missing key 'x'"),
        ({"x": np.zeros((3, 2))}, "missing key 'y'"),
        ({"x": np.zeros(3), "y": np.zeros(3, int)}, "shape \\(samples, features"),
        ({"x": np.zeros((0, 2)), "y": np.zeros(0, int)}, "no samples"),
        ({"x": np.zeros((3, 2)), "y": np.zeros((3, 1), int)}, "1-D array"),
        ({"x": np.zeros((3, 2)), "y": np.zeros(4, int)}, "4 labels but the features have 3"),
        ({"x": np.zeros((3, 2)), "y": np.array([0, -1, 1])}, ">= 0"),
        ({"x": np.zeros((3, 2)), "y": np.array([0.5, 1, 1])}, "integer labels"),
        ({"x": np.array([[0, np.nan]]), "y": np.array([0])}, "NaN"),
        ({"x": np.zeros((3, 2)), "y": np.zeros(3, int), "x_test": np.zeros((1, 2))},
         "given together"),
        ({"x": np.zeros((3, 2)), "y": np.array([0, 1, 1]), "x_test": np.zeros((1, 5)),
          "y_test": np.array([1])}, "5 columns"),
        ({"x": np.zeros((3, 2)), "y": np.array([0, 0, 0])}, "at least 2 classes"),
    ],
)
def test_npz_errors_name_file_and_key(tmp_path: Path, arrays: dict, fragment: str) -> None:
    path = _npz(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DataError, match=fragment) as info:
        npz_task(path)
    assert str(path) in str(info.value)


def test_npz_label_out_of_range_and_unreadable(tmp_path: Path) -> None:
    path = _npz(tmp_path / "d.npz", x=np.zeros((3, 2)), y=np.array([0, 1, 5]))
    with pytest.raises(DataError, match="label 5 out of range; expected 0..2"):
        npz_task(path, num_classes=3)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(DataError, match="not a readable .npz"):
        npz_task(junk)
    with pytest.raises(DataError, match="no such .npz"):
        npz_task(tmp_path / "absent.npz")


# ------------------------------------------------------------ tasks and splits


def test_digits_and_synthetic_tasks() -> None:
    digits = digits_task()
    assert digits.x.shape == (1797, 64) and digits.num_classes == 10
    assert digits.x.min() == 0.0 and digits.x.max() == 1.0
    a, b, c = synthetic_task(1), synthetic_task(1), synthetic_task(2)
    np.testing.assert_array_equal(a.x, b.x)
    assert not np.array_equal(a.x, c.x)
    assert a.x.shape == (2000, 64) and set(a.y.tolist()) == set(range(10))
    with pytest.raises(DataError, match="unknown data task"):
        load_task("cifar", None, 0)
    with pytest.raises(DataError, match="needs a path"):
        load_task("npz", None, 0)


def test_split_is_disjoint_and_seeded() -> None:
    task = digits_task()
    test_idx, shards = split_task(task, num_nodes=16, seed=4, test_fraction=0.2)
    every = np.concatenate([test_idx, *shards])
    assert every.size == task.x.shape[0] == np.unique(every).size
    assert abs(test_idx.size - 0.2 * 1797) <= 1
    assert max(s.size for s in shards) - min(s.size for s in shards) <= 1
    again, _ = split_task(task, num_nodes=16, seed=4, test_fraction=0.2)
    other, _ = split_task(task, num_nodes=16, seed=5, test_fraction=0.2)
    np.testing.assert_array_equal(test_idx, again)
    assert not np.array_equal(test_idx, other)


def test_node_data_shares_test_part_under_own_permutation() -> None:
    plain = load_node_data(DataSpec(node_index=0, num_nodes=4, seed=2))
    swapped = load_node_data(DataSpec(node_index=3, num_nodes=4, seed=2, permutation="8:9"))
    np.testing.assert_array_equal(plain.test_x, swapped.test_x)
    perm = np.array([0, 1, 2, 3, 4, 5, 6, 7, 9, 8])
    np.testing.assert_array_equal(perm[plain.test_y], swapped.test_y)
    assert plain.train_x.dtype == np.float32 and plain.train_y.dtype == np.int64
    assert plain.num_features == 64 and plain.num_classes == 10
    # shards of different nodes share no sample
    rows0 = {r.tobytes() for r in plain.train_x}
    assert not any(r.tobytes() in rows0 for r in swapped.train_x[:50] if r.any())
    capped = load_node_data(DataSpec(node_index=1, num_nodes=4, seed=2, samples_per_node=50))
    assert capped.train_x.shape == (50, 64)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"task": "mnist"}, "data.task"),
        ({"task": "npz"}, "data.path"),
        ({"num_nodes": 0}, "data.num_nodes"),
        ({"node_index": 4, "num_nodes": 4}, "data.node_index"),
        ({"node_index": -1, "num_nodes": 4}, "data.node_index"),
        ({"test_fraction": 1.0}, "data.test_fraction"),
        ({"samples_per_node": 0}, "data.samples_per_node"),
        ({"num_classes": 1}, "data.num_classes"),
    ],
)
def test_bad_data_spec_fields(kwargs: dict, fragment: str) -> None:
    with pytest.raises(DataError, match=fragment):
        DataSpec(**kwargs)


def test_more_nodes_than_samples_and_oversized_cap(tmp_path: Path) -> None:
    path = _npz(tmp_path / "tiny.npz", x=np.zeros((6, 2)), y=np.array([0, 1] * 3))
    with pytest.raises(DataError, match="10 nodes but only 5 training samples"):
        load_node_data(DataSpec(task="npz", path=str(path), node_index=0, num_nodes=10))
    with pytest.raises(DataError, match="exceeds the smallest shard"):
        load_node_data(DataSpec(node_index=0, num_nodes=16, samples_per_node=500))
    with pytest.raises(DataError, match="out of range"):
        load_node_data(DataSpec(task="npz", path=str(path), permutation="2:3"))
