"""The steady-state cost a simulation reports: CPU per node-round after the start-up."""

from __future__ import annotations

from pathlib import Path

import pytest

from p2p.simulation import cli as simulate_cli


def test_steady_cost_is_the_cpu_per_node_round_inside_its_window(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from p2p.simulation.host import Simulation

    simulate = simulate_cli
    plan = simulate.plan_simulation(simulate.build_parser().parse_args(
        ["--nodes", "2", "--rounds", "30"]))
    sim = Simulation(plan.spec, tmp_path, plan.network, runner_for=plan.runner_for)
    assert sim.steady_cost() is None  # nothing sampled yet
    # 60 node-rounds in all: the window is 20..54 rounds done; the start-up (10 s of CPU
    # before round 20) and the points outside it do not count
    points = [(0, 0.0, 0.0), (10, 6.0, 1.0), (20, 10.0, 2.0), (40, 12.0, 3.0), (54, 13.4, 4.0),
              (60, 20.0, 5.0)]
    sim.series = [{"rounds_done": r, "cpu_seconds": c, "time": t} for r, c, t in points]
    cost = sim.steady_cost()
    assert cost == {"from_rounds_done": 20, "to_rounds_done": 54, "node_rounds": 34,
                    "cpu_seconds": pytest.approx(3.4), "simulated_seconds": 2.0,
                    "ms_per_node_round": pytest.approx(100.0)}
    sim.series = sim.series[:3]  # one point inside: no slope
    assert sim.steady_cost() is None


def test_the_series_reads_the_pushes_and_bytes_the_node_records_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from p2p.simulation.host import Simulation, _pushes_and_bytes_sent, _shared_counters

    simulate = simulate_cli
    plan = simulate.plan_simulation(simulate.build_parser().parse_args(["--nodes", "2"]))
    sim = Simulation(plan.spec, tmp_path, plan.network, runner_for=plan.runner_for)
    node, _ = sim._build(sim.slots[1])
    names = node.learning.layout.shared_models
    assert names
    for i, name in enumerate(names):  # a resumed node's counts start from its checkpoint's
        node.counter_base[name] = {"pushes_sent": 3 + i, "bytes_sent": 1000 * (i + 1),
                                   "pushes_received": 7}
    counters = _shared_counters(node)
    assert _pushes_and_bytes_sent(node) == (counters["pushes_sent"], counters["bytes_sent"])
    assert counters["pushes_sent"] > 0
