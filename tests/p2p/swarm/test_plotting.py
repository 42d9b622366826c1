"""``--plot`` figures name the run, keep node colours apart beyond 10 nodes, group
lines past 20, and say where the file went."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from p2p.swarm import SwarmSpec
from p2p.swarm.cli import plot
from p2p.swarm.plotting import node_colours, run_title


def test_the_title_names_task_network_scheme_and_nodes() -> None:
    spec = SwarmSpec(nodes=12, semi_local=True)
    assert run_title("swarm", spec) == (f"swarm: task digits, network "
                                        f"{spec.network().notation()}, scheme partial + "
                                        "semi-local, 12 nodes")


@pytest.mark.parametrize("count", [4, 12, 20])
def test_node_colours_stay_apart(count: int) -> None:
    colours = node_colours(count)
    assert len(set(colours)) == count
    closest = min(sum((a - b) ** 2 for a, b in zip(x, y, strict=True)) ** 0.5
                  for x, y in itertools.combinations(colours, 2))
    assert closest > 0.08


@pytest.mark.parametrize("count", [12, 25])
def test_the_swarm_plot_is_written_and_announced(count: int, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    rng = random.Random(count)
    nodes = [{"node": i, "permutation": "id" if i % 2 else "8:9",
              "history": [(k + rng.random() / 2, k, min(1.0, 0.1 + k / 30)) for k in range(20)]}
             for i in range(count)]
    path = tmp_path / "acc.png"
    plot({"nodes": nodes}, path, SwarmSpec(nodes=count))
    assert path.stat().st_size > 10_000
    assert capsys.readouterr().out == f"plot written to {path.resolve()}\n"
