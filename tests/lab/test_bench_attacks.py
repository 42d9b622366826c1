"""scripts/bench/attacks.py --compare: each honest node against itself without the attack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab.bench import attacks


def run(seed: int, accuracies: dict[int, list[float]], rollbacks: int = 0) -> dict[str, object]:
    """A --learning run record with per-node accuracies at each evaluation."""
    return {"seed": seed, "rollbacks": rollbacks,
            "per_node": [{"index": i, "accuracy": a} for i, a in accuracies.items()]}


def test_node_differences_read_median_worst_and_each_nodes_own_drop() -> None:
    base = run(0, {0: [0.5, 0.80], 1: [0.5, 0.70], 2: [0.5, 0.90]})
    # node 2 loses 10 points, but it stays above node 1: the worst node moves by nothing
    attacked = run(0, {0: [0.5, 0.80], 1: [0.5, 0.70], 2: [0.5, 0.80]})
    diffs = attacks.node_differences(attacked, base)
    assert [round(d["median"], 6) for d in diffs] == [0.0, 0.0]
    assert [round(d["worst"], 6) for d in diffs] == [0.0, 0.0]
    assert [round(d["drop"], 6) for d in diffs] == [0.0, -10.0]


def test_nodes_missing_from_the_base_or_an_evaluation_are_left_out() -> None:
    base = run(0, {0: [0.6], 1: [0.4, 0.5]})
    attacked = run(0, {0: [0.5, 0.7], 1: [0.4, 0.6], 7: [0.0, 0.0]})
    diffs = attacks.node_differences(attacked, base)
    assert len(diffs) == 2  # the second evaluation has node 1 only
    assert round(diffs[0]["drop"], 6) == -10.0 and round(diffs[1]["drop"], 6) == 10.0


def test_compare_prints_the_attack_and_the_noise_floor(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs.jsonl"
    null = tmp_path / "null.jsonl"
    lines = [{"attack": "none", "runs": [run(s, {0: [0.8], 1: [0.6]})]} for s in (0, 1)]
    lines += [{"attack": "reply poison 30", "runs": [run(s, {0: [0.8], 1: [0.5]}, 3)]}
              for s in (0, 1)]
    runs.write_text("".join(json.dumps(x) + "\n" for x in lines))
    null.write_text("".join(json.dumps({"attack": "none", "runs": [run(s, {0: [0.8], 1: [0.6]})]})
                            + "\n" for s in (0, 1)))
    assert attacks.compare_main(runs, null) == 0
    out = capsys.readouterr().out
    assert ("reply poison 30: at the last evaluation, median of 2 seeds: median node -5.0 "
            "(-5.0 to -5.0), worst node -10.0 (-10.0 to -10.0), largest drop of one node "
            "-10.0 (-10.0 to -10.0)") in out
    assert "none again (noise floor): at the last evaluation, median of 2 seeds: median node +0.0" in out
