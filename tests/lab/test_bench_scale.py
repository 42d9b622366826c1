"""scripts/bench/scale.py: the grid's flags, its table and its results file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab.bench import scale as bench_scale


def fake_run(task: str, nodes: int, scheme: str, churn: float, seed: int,
             accuracies: list[float], **extra: object) -> dict[str, object]:
    """A run record as run_grid stores it, with one sample per round."""
    series = [[0.1 * i, float(i + 1), acc, 1000.0 * (i + 1)] for i, acc in enumerate(accuracies)]
    return {"task": task, "nodes": nodes, "scheme": scheme, "churn": churn, "seed": seed,
            "data": "digits", "mean_accuracy": accuracies[-1], "worst_accuracy": 0.5,
            "payload_bytes_per_node": 1000.0 * len(accuracies), "wire_bytes_per_node": 3e6,
            "wall_seconds": 10.0 + seed, "cpu_seconds": 5.0, "series": series} | extra


def test_flags_of_the_two_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    scale = bench_scale
    assert scale.swapped_count(16) == 7 and scale.swapped_count(1000) == 438
    assert scale.swapped_count(2) == 1
    argv = scale.simulate_argv(scale.Cell("swap89", 16, "local", 0.1, 2), 50)
    assert argv[argv.index("--permuted") + 1] == "id*9,8:9*7"
    assert argv[argv.index("--task") + 1] == "digits"
    assert argv[argv.index("--churn") + 1] == "0.1" and "--semi-local" not in argv
    s3 = scale.simulate_argv(scale.Cell("s3", 256, "partial", 0.0, 0), 50, extra=["--x"])
    assert "--semi-local" in s3 and "--task" not in s3 and "--churn" not in s3
    assert s3[-1] == "--x"
    assert "--semi-local" not in scale.simulate_argv(scale.Cell("s3", 16, "full", 0.0, 0), 50)
    with pytest.raises(ValueError, match="scheme"):
        scale.Cell("swap89", 16, "global", 0.0, 0)
    cells = scale.grid(["swap89"], [16, 64], ["partial", "local"], [0.0], [0, 1])
    assert [c.seed for c in cells] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_table_takes_medians_and_rounds_to_the_reference(
        monkeypatch: pytest.MonkeyPatch) -> None:
    scale = bench_scale
    runs = [fake_run("swap89", 16, "partial", 0.0, 0, [0.5, 0.80, 0.90]),
            fake_run("swap89", 16, "partial", 0.0, 1, [0.5, 0.70, 0.89]),
            fake_run("swap89", 16, "partial", 0.0, 2, [0.5, 0.60, 0.70]),
            fake_run("swap89", 16, "local", 0.0, 0, [0.5, 0.6, 0.7], timed_out=True)]
    results = {"runs": {str(i): r for i, r in enumerate(runs)}, "references": {
        "swap89/n16/partial/seed0": {"mean_accuracy": 0.80},  # target 0.79: sample 2
        "swap89/n16/partial/seed1": {"mean_accuracy": 0.895},  # target 0.885: sample 3
        "swap89/n16/partial/seed2": {"mean_accuracy": 0.85},  # never
    }}
    rows = scale.summarise(results)
    assert [(r["scheme"], r["seeds"]) for r in rows] == [("partial", [0, 1, 2]), ("local", [0])]
    partial, local = rows
    assert partial["rounds_to_reference"] == 2.5 and partial["never_reached"] == 1
    assert partial["payload_bytes_per_node_to_reference"] == 2500.0
    assert partial["mean_accuracy"] == 0.89 and partial["reference_accuracy"] == 0.85
    assert local["with_reference"] == 0 and local["timed_out"] == 1
    table = scale.markdown_table(rows).splitlines()
    assert len(table) == 4 and table[0].startswith("| task (data) | N | scheme")
    assert "| 2.5 (1 of 3 never) |" in table[2] and "| 89.0 (70.0-90.0) |" in table[2]
    assert partial["mean_accuracy_range"] == [0.70, 0.90]
    assert "| 1 | 70.0 |" in table[3]  # one seed: no range
    assert "no reference" in table[3] and "(1 timed out)" in table[3]


def test_a_tiny_grid_runs_and_its_file_grows(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    scale = bench_scale
    cells = scale.grid(["swap89"], [4], ["partial"], [0.0], [0])
    saved: list[int] = []
    results = scale.run_grid(cells, scale.load_results(None), rounds=2, in_process=True,
                             options={"max_connections": 8, "descriptor_checks": "full",
                                      "eval_every": 1},
                             save=lambda doc: saved.append(len(doc["runs"])), log=lambda s: None)
    run = results["runs"]["swap89/n4/partial/churn0/seed0"]
    assert run["nodes"] == 4 and run["rounds"] == 2 and run["data"] == "digits"
    # the flags passed through, as the simulation used them
    assert run["max_connections"] == 8 and run["descriptor_checks"] == "full"
    assert run["eval_every"] == 1 and run["handshakes"] == "noise"
    assert 0.0 <= run["mean_accuracy"] <= 1.0 and run["payload_bytes_per_node"] > 0
    assert run["series"] and run["exit_code"] == 0
    ref = results["references"]["swap89/n4/partial/seed0"]
    assert 0.0 <= ref["mean_accuracy"] <= 1.0
    assert saved == [1, 1]  # after the run, after its reference
    path = tmp_path / "scale.json"
    path.write_text(json.dumps(results))
    # nothing left to run: the table of the file, and the file rewritten with it
    assert scale.main(["--nodes", "4", "--rounds", "2", "--churn", "0", "--schemes", "partial",
                       "--json", str(path), "--markdown", str(tmp_path / "t.md")]) == 0
    doc = json.loads(path.read_text())
    assert doc["rows"][0]["nodes"] == 4 and doc["table"].count("\n") == 2
    assert (tmp_path / "t.md").read_text().startswith("| task (data)")
    # a file of 2-round runs does not take 3-round ones; a bad task stops before running
    assert scale.main(["--nodes", "4", "--rounds", "3", "--churn", "0",
                       "--json", str(path)]) == 2
    assert scale.main(["--tasks", "cifar", "--table-only"]) == 2


def test_simulation_flags_pass_through_and_are_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scale = bench_scale
    cell = scale.Cell("swap89", 256, "partial", 0.0, 0)
    # not given: none of the flags, so simulate.py's defaults for the size apply
    bare = scale.simulate_argv(cell, 50)
    assert not {"--max-connections", "--descriptor-checks", "--lockstep", "--handshakes",
                "--eval-every", "--samples-per-node"} & set(bare)
    argv = scale.simulate_argv(cell, 50, options={"handshakes": "trusted", "max_connections": 128,
                                                  "lockstep": None}, extra=["--x"])
    assert argv[len(bare):] == ["--max-connections", "128", "--handshakes", "trusted", "--x"]
    with pytest.raises(ValueError, match="max_conections"):
        scale.simulate_argv(cell, 50, options={"max_conections": 1})

    seen: list[list[str]] = []

    def fake(argv: list[str], **_: object) -> dict[str, object]:
        seen.append(argv)
        return fake_run("swap89", 256, "partial", 0.0, 0, [0.5, 0.7]) | {
            "max_connections": 128, "descriptor_checks": "full", "lockstep": "off",
            "handshakes": "trusted", "eval_every": 5}

    monkeypatch.setattr(scale, "run_simulation", fake)
    path = tmp_path / "scale.json"
    assert scale.main(["--nodes", "256", "--schemes", "partial", "--churn", "0",
                       "--max-connections", "128", "--descriptor-checks", "full",
                       "--handshakes", "trusted", "--no-reference", "--json", str(path)]) == 0
    assert len(seen) == 1
    flags = seen[0]
    assert flags[flags.index("--max-connections") + 1] == "128"
    assert flags[flags.index("--descriptor-checks") + 1] == "full"
    assert flags[flags.index("--handshakes") + 1] == "trusted"
    assert "--lockstep" not in flags and "--eval-every" not in flags
    run = json.loads(path.read_text())["runs"]["swap89/n256/partial/churn0/seed0"]
    assert run["options"] == {"max_connections": 128, "descriptor_checks": "full",
                              "handshakes": "trusted"}
    assert run["argv"] == flags and run["max_connections"] == 128
    # a bad value is refused by the grid's own flags, before anything runs
    with pytest.raises(SystemExit):
        scale.main(["--descriptor-checks", "some", "--table-only"])
