"""Duplicate detection per (sender, model) as a sliding window, kept in checkpoints."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch

from gossip import DupWindow, Push, PushSum, RejectedPush, Seen, encode
from p2p.runtime import checkpoint as ckpt
from p2p.runtime.checkpoint import CheckpointStore, NodeState, PushSumRecord

FP = bytes(range(32))
A, B = b"node-a", b"node-b"


def test_the_window_remembers_ids_however_many_newer_ones_came() -> None:
    w = DupWindow(span=256)
    start = 2**40
    for i in range(200):
        w.record(A, start + i, replied=i % 2 == 0)
    assert w.lookup(A, start) is Seen.REPLIED  # 199 newer ids since
    assert w.lookup(A, start + 1) is Seen.MERGED
    assert w.lookup(A, start + 200) is Seen.NEW
    assert w.lookup(B, start) is Seen.NEW  # keyed by sender
    w.record(A, start + 300, replied=False)
    assert w.lookup(A, start) is Seen.TOO_OLD  # below the window: never merged twice
    assert w.lookup(A, start + 299) is Seen.NEW
    assert w.lookup(A, 5) is Seen.NEW  # far away: the sender restarted with a new start
    w.record(A, 5, replied=False)
    assert w.lookup(A, 5) is Seen.MERGED and w.lookup(A, start + 300) is Seen.NEW


def test_export_and_load_round_trip() -> None:
    w = DupWindow(span=64)
    for i in (10, 12, 70):
        w.record(A, i, replied=i == 12)
    copy = DupWindow(span=64)
    copy.load(w.export())
    assert [copy.lookup(A, i) for i in (10, 12, 70, 11, 6)] == \
        [Seen.MERGED, Seen.REPLIED, Seen.MERGED, Seen.NEW, Seen.TOO_OLD]
    with pytest.raises(ValueError, match="dup window"):
        copy.load([(A, -1, 0, 0)])


def _push(push_id: int) -> Push:
    return Push(FP, push_id, encode(np.array([1.0, 2.0]), "f64"), 0.01)


def test_a_retransmission_after_100_newer_pushes_is_not_merged_again() -> None:
    b = PushSum(FP, np.zeros(2), rng=np.random.default_rng(0))
    first = _push(1000)
    b.on_push(A, first, 0.0)
    for i in range(1, 101):
        b.on_push(A, _push(1000 + i), 0.0)
    w = b.weight
    b.on_push(A, first, 1.0)  # re-acknowledged, not merged
    assert b.weight == w and b.counters.duplicates == 1
    small = PushSum(FP, np.zeros(2), rng=np.random.default_rng(0), dup_span=16)
    small.on_push(A, first, 0.0)
    small.on_push(A, _push(1100), 0.0)
    with pytest.raises(RejectedPush, match="older than the 16 ids"):
        small.on_push(A, first, 0.0)


def test_the_window_survives_a_snapshot_and_a_checkpoint(tmp_path: Path) -> None:
    b = PushSum(FP, np.zeros(2), rng=np.random.default_rng(0))
    b.on_push(A, _push(7), 0.0)
    snap = b.snapshot()
    fresh = PushSum.from_snapshot(snap, rng=np.random.default_rng(1))
    w = fresh.weight
    fresh.on_push(A, _push(7), 0.0)
    assert fresh.weight == w and fresh.counters.duplicates == 1
    store = CheckpointStore(tmp_path)
    state = NodeState(model_state={"w": torch.zeros(1)},
                      pushsum={"m": PushSumRecord(snap.weight, snap.values, None, snap.seen)})
    store.save(state)
    assert store.load().pushsum["m"].seen == snap.seen


def test_a_version_1_checkpoint_without_windows_still_loads(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    buffer = io.BytesIO()
    torch.save({"format": ckpt.CHECKPOINT_FORMAT, "version": 1, "round": 3, "steps": 4,
                "model_state": {"w": torch.zeros(1)},
                "pushsum": {"m": {"weight": 1.0, "values": torch.zeros(2),
                                  "estimate": None}}}, buffer)
    store.path.write_bytes(buffer.getvalue())
    state = store.load()
    assert state.round == 3 and state.pushsum["m"].seen == ()
