"""One seed, one run: a simulation repeats itself (docs/guide/simulation.md, "Reproducible runs")."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio

from p2p.runtime.entropy import Entropy, generator_for, random_for, seed_for
from p2p.simulation import cli as simulate_cli
from p2p.simulation.scheduling import seeded_scheduler


def _simulate(tmp_path: Path, name: str, seed: int, *flags: str) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    code = simulate_cli.main(["--nodes", "5", "--rounds", "4", "--eval-every", "2", "--quiet",
                              "--seed", str(seed), "--json", str(out), *flags])
    assert code == 0
    doc = json.loads(out.read_text())
    # what a run decides: per node, the network's counters, the time series (less CPU time)
    return {"nodes": doc["nodes"], "network": doc["network"],
            "series": [{k: v for k, v in p.items() if k != "cpu_seconds"}
                       for p in doc["series"]]}


@pytest.mark.parametrize("lockstep", ["off", "batched"])
def test_one_seed_gives_one_run_and_another_seed_another(tmp_path: Path, lockstep: str) -> None:
    # each node's accuracies, losses, pushes and bytes; before runs were seeded, two runs
    # differed from the first evaluation on (trio's order of the tasks of an instant,
    # push ids and partner choices from the OS)
    flags = ("--lockstep", lockstep)
    first = _simulate(tmp_path, "first", 3, *flags)
    again = _simulate(tmp_path, "again", 3, *flags)
    rows = first["nodes"]
    assert all(r["round"] == 4 and r["pushes_sent"] > 0 and r["history"] for r in rows)
    for row, same in zip(rows, again["nodes"], strict=True):
        assert row == same, f"node {row['node']} differs between two runs of seed 3"
    assert first == again
    other = _simulate(tmp_path, "other", 4, *flags)
    assert [r["accuracy"] for r in other["nodes"]] != [r["accuracy"] for r in rows]


def test_entropy_streams_are_named_independent_and_fresh_per_request() -> None:
    a, b = Entropy(1, "node", 0), Entropy(1, "node", 0)
    assert a.random("x").random() == b.random("x").random()
    assert a.random("x").random() != b.random("y").random()  # a second "x": a new stream
    assert Entropy(1, "node", 1).seed("x") != Entropy(1, "node", 0).seed("x")
    assert a.child("life", 1).seed("x") != a.child("life", 2).seed("x")
    assert isinstance(a.generator("g"), np.random.Generator)
    # None: what a daemon does (the OS's, or None for the callee to draw from the OS)
    assert isinstance(random_for(None, "x"), random.Random)
    assert generator_for(None, "x") is None and seed_for(None, "x") is None


def test_the_scheduler_is_seeded_inside_and_restored_after() -> None:
    from trio._core import _run

    def order(seed: int) -> list[int]:
        woke: list[int] = []

        async def main() -> None:
            with seeded_scheduler(seed) as seeded:
                assert seeded
                async with trio.open_nursery() as nursery:
                    for i in range(8):
                        nursery.start_soon(_append, woke, i)
        trio.run(main)
        return woke

    assert order(5) == order(5)
    before = (_run._ALLOW_DETERMINISTIC_SCHEDULING, _run._r.getstate())
    with seeded_scheduler(5):
        assert _run._ALLOW_DETERMINISTIC_SCHEDULING
        _run._r.random()
    assert (_run._ALLOW_DETERMINISTIC_SCHEDULING, _run._r.getstate()) == before


async def _append(out: list[int], i: int) -> None:
    await trio.sleep(0)
    out.append(i)


def test_a_trio_without_the_hook_is_named_in_one_line(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from trio._core import _run

    monkeypatch.delattr(_run, "_r")
    with seeded_scheduler(1) as seeded:
        assert not seeded
    [line] = caplog.messages
    assert "no seedable scheduler" in line
