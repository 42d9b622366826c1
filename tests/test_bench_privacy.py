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
