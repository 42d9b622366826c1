"""scripts/paper/graph.py end to end on a tiny run: the figures it promises are there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab.paper import graph as paper_graph


def test_paper_graph_reports_shares_accuracy_and_privacy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = paper_graph
    out = tmp_path / "graph.json"
    assert script.main(["--seeds", "1", "--wakeups", "3", "--baselines", "",
                        "--epsilon", "0.5", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert set(figures["accuracy"]) == {"graph"}
    assert 0.0 <= figures["accuracy"]["graph"]["median"] <= 1.0
    seed = figures["per_seed"]["0"]
    assert len(seed["partner_share"]) == 12 and all(0.0 <= s <= 1.0 for s in seed["partner_share"])
    # 3 releases at epsilon 0.5 each; the Laplace scale is L0 / (epsilon m_i)
    assert seed["epsilon_spent"] == [pytest.approx(1.5)] * 12
    assert seed["noise_scale"][0] == pytest.approx(1.0 / (0.5 * 104), rel=0.05)
    assert figures["partner_share"]["criterion"] == 0.8
