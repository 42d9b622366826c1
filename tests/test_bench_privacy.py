"""scripts/bench_privacy.py --real: the observer over real nodes on a virtual clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from p2p.testing import load_script


def test_real_observer_sees_the_model_in_clear_and_noise_inside_epochs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load_script("bench_privacy", monkeypatch)
    out = tmp_path / "real.json"
    assert bench.main(["--real", "--nodes", "4", "--rounds", "15", "--modes", "none,masked",
                       "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["run"]["nodes"] == 4 and figures["run"]["rounds"] == 15
    assert set(figures["modes"]) == {"none", "masked"}
    for mode in ("none", "masked"):
        r = figures["modes"][mode]
        for key in ("values_inside", "values_inside_hidden_case", "values_outside",
                    "updates_inside", "updates_outside"):
            assert {"count", "mean", "median", "noise_mean", "noise_p99"} <= set(r[key]), key
        assert r["rounds_trained"] == [15] * 4  # every node trained its rounds
        assert r["pushes_observed"] > 0
    none = figures["modes"]["none"]
    # a clear push is the sender's model: its values, less the swarm's average, are the
    # sender's values less that average
    assert none["values_inside"]["count"] == 0
    assert none["values_outside"]["count"] >= 3
    # the typical clear push is the sender's model (a few caught mid-merge read lower)
    assert none["values_outside"]["median"] > 0.9
    masked = figures["modes"]["masked"]
    # inside a masking epoch a push is not the sender's model (far from 1, the clear level)
    assert masked["values_inside"]["count"] > 0
    assert masked["values_inside"]["mean"] < 0.5


def test_the_observers_average_leaves_out_pushes_merged_but_not_yet_acknowledged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Between a one-way push's merge and its ack, the share is in both cores' mass:
    # counted twice, a noisy push's own noise entered the "average" the observer
    # compares with, and read as |corr| near 1 (the young-noise tail of issue 12).
    from types import SimpleNamespace

    import numpy as np

    from gossip.pushsum import PushSum

    bench = load_script("bench_privacy", monkeypatch)
    fp, dim = bytes(range(32)), 50
    rng = np.random.default_rng(3)
    cores = [PushSum(fp, rng.normal(0.0, 0.1, dim), privacy="masked", masked_pushes=0,
                     exchange="push", encoding="f64") for _ in range(3)]
    cores[0].add_noise_mass(rng.normal(0.0, 10.0, dim))
    cores[1].add_noise_mass(-cores[0].mass + cores[0].weight * cores[0].values)
    nodes = [SimpleNamespace(identity=SimpleNamespace(node_id=bytes([i + 1]) * 8),
                             cores={"m": c}) for i, c in enumerate(cores)]
    by_id = {n.identity.node_id: (n, None) for n in nodes}
    total = sum(c.mass for c in cores)
    weight = sum(c.weight for c in cores)
    [(_, push)] = cores[0].make_pushes([nodes[2].identity.node_id], 0.0)
    ack = cores[2].on_push(nodes[0].identity.node_id, push, 0.0)
    seen = sum(c.mass for c in cores)
    assert np.abs(seen - total).max() > 1.0  # the push's noisy share counted twice
    fix_mass, fix_weight = bench._in_flight(nodes, "m", by_id)
    assert np.allclose(seen - fix_mass, total, atol=1e-9)
    assert abs(sum(c.weight for c in cores) - fix_weight - weight) < 1e-12
    cores[0].on_ack(nodes[2].identity.node_id, ack, 0.0)
    fix_mass, fix_weight = bench._in_flight(nodes, "m", by_id)
    assert fix_weight == 0.0  # acknowledged: nothing counted twice any more
    assert np.allclose(sum(c.mass for c in cores), total, atol=1e-9)
