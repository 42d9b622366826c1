"""The averaging benchmark end to end, and the trainer-less peer it runs.

``scripts/bench_averaging.py`` in its smallest configuration (3 peer
processes, 1,000 values, one run) must find the moment every peer is within
the tolerance and report its figures; :class:`AveragingPeer` instances over
real TCP in one trio process must average exactly (mass conserved) with each
partner schedule.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import trio

from gossip import PushSum
from p2p.runtime.averaging import AveragingPeer
from p2p.testing import wait_until

ROOT = Path(__file__).resolve().parents[1]
MODEL = hashlib.sha256(b"test_bench_averaging").digest()
TOLERANCE = 1e-4


@pytest.mark.e2e
def test_bench_smallest_configuration_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_averaging.py"), "--peers", "3",
         "--length", "1000", "--runs", "1", "--timeout", "120", "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    [run] = result["runs"]
    assert run["converged"]
    assert run["max_error"] <= TOLERANCE
    assert run["seconds"] > 0
    # every peer sent at least one encoded push: 1,000 values of at least 1 byte
    assert run["payload_MB_per_peer"] * 1e6 >= 1000
    assert run["socket_MB_per_peer"] > 0
    assert run["exchanges_per_peer"] >= 1
    assert result["median"]["seconds"] == run["seconds"]
    assert "MB payload/peer" in proc.stdout and "median" in proc.stdout


def _bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # scripts are not a package: load the file itself (no sys.path edit); its
    # dataclasses look their module up while it loads
    path = ROOT / "scripts" / "bench_averaging.py"
    spec = importlib.util.spec_from_file_location("bench_averaging", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_command_line_options_reach_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench(monkeypatch)
    given = dict.fromkeys(bench.CORE_OPTIONS)
    given.update(delta_encoding="f16", max_in_flight=2)
    options = bench.core_options(argparse.Namespace(**given))
    assert options == {"delta_encoding": "f16", "max_in_flight": 2}  # the rest: core defaults
    core = PushSum(MODEL, np.zeros(4), **options)
    settings = bench.core_settings(core)
    assert settings["delta_encoding"] == "f16" and settings["max_in_flight"] == 2
    assert settings["encoding"] == PushSum(MODEL, np.zeros(4)).encoding


def _vectors(peers: int, length: int) -> list[np.ndarray]:
    return [np.random.default_rng([7, i]).standard_normal(length) for i in range(peers)]


@pytest.mark.parametrize("partners", ["random", "rotate", "hypercube"])
async def test_peers_average_over_tcp(partners: str) -> None:
    vectors = _vectors(4, 500)
    mean = np.mean(vectors, axis=0)
    scale = float(np.abs(mean).max())
    peers = [AveragingPeer(v, MODEL, partners=partners, core_options={"exchange": "push-pull"})
             for v in vectors]

    def errors() -> list[float]:
        return [float(np.abs(p.core.estimate - mean).max()) / scale for p in peers]

    async with trio.open_nursery() as nursery:
        addresses = [await nursery.start(p.run) for p in peers]
        for i, p in enumerate(peers):
            p.join([] if i == 0 else [addresses[0]])
        with trio.fail_after(60):
            for p in peers:
                await p.wait_for_holders(len(peers) - 1)
            for p in peers:
                await p.warm_up()
        stop = trio.Event()
        for p in peers:
            p.stop_discovery()
            nursery.start_soon(p.mix, stop)
        await wait_until(lambda: max(errors()) <= TOLERANCE, what="all peers within tolerance")
        stop.set()
        # wait for the exchanges in progress to land, then check the books
        await wait_until(lambda: all(p.core.outstanding == 0 for p in peers))
        nursery.cancel_scope.cancel()
    total_mass = sum(p.core.mass for p in peers)
    total_weight = sum(p.core.weight for p in peers)
    assert total_weight == pytest.approx(len(peers), rel=1e-12)
    np.testing.assert_allclose(total_mass, np.sum(vectors, axis=0), rtol=1e-9, atol=1e-9)
    assert all(p.socket.sent > 0 and p.socket.received > 0 for p in peers)
    if partners == "hypercube":
        # a perfect matching per round: each peer is in exactly one exchange per round
        for p in peers:
            c = p.core.counters
            assert p.rounds >= 2
            assert c.pushes_sent + c.pushes_received in (p.rounds, p.rounds + 1)


async def test_hypercube_needs_a_power_of_two() -> None:
    peer = AveragingPeer(np.zeros(4), MODEL, partners="hypercube")
    await peer.wait_for_holders(0)  # not listening: it knows only itself, 1 holder
    with pytest.raises(ValueError, match="power-of-two"):
        await peer.mix(trio.Event())
    with pytest.raises(ValueError, match="partners"):
        AveragingPeer(np.zeros(4), MODEL, partners="nearest")
