"""The averaging benchmark end to end, and the trainer-less peer it runs.

``scripts/bench/averaging.py`` in its smallest configuration (3 peer
processes, 1,000 values, one run of each of two schedules) must find the
moment every peer is within the tolerance and report its figures;
:class:`AveragingPeer` instances over real TCP in one trio process must
average exactly (mass conserved) with each partner schedule, the matched one
with any number of members, and a member that stops answering must not stall
the others.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import trio
from lab.averaging.peers import AveragingPeer
from lab.averaging.schedule import matched_partner
from lab.bench import averaging as bench_averaging

from gossip import Push, PushSum
from p2p.testing import wait_until
from p2p.wire.codec import Message
from p2p.wire.handshake import PeerInfo

ROOT = Path(__file__).resolve().parents[2]
MODEL = hashlib.sha256(b"test_bench_averaging").digest()
TOLERANCE = 1e-4


@pytest.mark.e2e
def test_bench_smallest_configuration_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "lab.bench.averaging", "--peers", "3",
         "--length", "1000", "--runs", "1", "--timeout", "120", "--partners", "matched,random",
         "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert list(result["schedules"]) == ["matched", "random"]
    for name, schedule in result["schedules"].items():
        [run] = schedule["runs"]
        assert run["converged"]
        assert run["max_error"] <= TOLERANCE
        assert run["seconds"] > 0
        # every peer sent at least one encoded push: 1,000 values of at least 1 byte
        assert run["payload_MB_per_peer"] * 1e6 >= 1000
        assert run["socket_MB_per_peer"] > 0
        assert run["exchanges_per_peer"] >= 1
        assert schedule["median"]["seconds"] == run["seconds"]
        # one closing row per schedule: name, then its median seconds
        assert any(line.split()[:2] == [name, f"{run['seconds']:.3f}"]
                   for line in proc.stdout.splitlines()), proc.stdout
    assert "MB payload/peer" in proc.stdout and "median" in proc.stdout


def test_bench_rejects_unknown_schedules(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench(monkeypatch)
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--partners", "matched,nearest"])
    assert exit_info.value.code == 2
    assert "--partners" in capsys.readouterr().err


def _bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return bench_averaging


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


async def _started(nursery: trio.Nursery, peers: list[AveragingPeer]) -> list[trio.CancelScope]:
    """Serve every peer, let them discover each other (bootstrap from the first),
    warm their connections and stop shuffling; each peer's cancel scope, to stop it."""
    scopes = [trio.CancelScope() for _ in peers]

    async def serve(peer: AveragingPeer, scope: trio.CancelScope, *,
                    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        with scope:
            await peer.run(task_status=task_status)

    addresses = [await nursery.start(serve, p, scope) for p, scope in zip(peers, scopes,
                                                                            strict=True)]
    for i, p in enumerate(peers):
        p.join([] if i == 0 else [addresses[0]])
    with trio.fail_after(180):
        for p in peers:
            await p.wait_for_holders(len(peers) - 1)
        for p in peers:
            await p.warm_up()
    for p in peers:
        p.stop_discovery()
    return scopes


def _error(peer: AveragingPeer, mean: np.ndarray) -> float:
    return float(np.abs(peer.core.estimate - mean).max()) / float(np.abs(mean).max())


def _check_books(peers: list[AveragingPeer], vectors: list[np.ndarray]) -> None:
    """The peers' total weight and mass are still their initial ones."""
    assert sum(p.core.weight for p in peers) == pytest.approx(len(peers), rel=1e-12)
    total_mass = sum(p.core.mass for p in peers)
    np.testing.assert_allclose(total_mass, np.sum(vectors, axis=0), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(("partners", "count"), [
    ("matched", 3), ("matched", 4), ("matched", 5), ("random", 4), ("rotate", 4),
])
async def test_peers_average_over_tcp(partners: str, count: int) -> None:
    vectors = _vectors(count, 500)
    mean = np.mean(vectors, axis=0)
    peers = [AveragingPeer(v, MODEL, partners=partners, core_options={"exchange": "push-pull"})
             for v in vectors]
    async with trio.open_nursery() as nursery:
        await _started(nursery, peers)
        stop = trio.Event()
        async with trio.open_nursery() as mixing:
            for p in peers:
                mixing.start_soon(p.mix, stop)
            await wait_until(lambda: max(_error(p, mean) for p in peers) <= TOLERANCE,
                             timeout=180, what="all peers within tolerance")
            stop.set()
        # mix() has returned everywhere: the exchanges in progress have landed
        assert all(p.core.outstanding == 0 for p in peers)
        nursery.cancel_scope.cancel()
    _check_books(peers, vectors)
    assert all(p.socket.sent > 0 and p.socket.received > 0 for p in peers)
    if partners == "matched":
        # one exchange per round with a partner: each initiated round made
        # exactly one push, each waited round merged at least one
        for p in peers:
            assert p.members == sorted(q.identity.node_id for q in peers)
            assert p.skipped_rounds == 0
            assert p.rounds >= 2
            i = p.members.index(p.identity.node_id)
            partners_by_round = [matched_partner(i, count, k) for k in range(p.rounds)]
            initiated = sum(1 for j in partners_by_round if j is not None and i < j)
            waited = sum(1 for j in partners_by_round if j is not None and j < i)
            assert p.core.counters.pushes_sent == initiated
            assert p.core.counters.pushes_received >= waited
    else:
        assert all(p.rounds == 0 for p in peers)


class _SilentPeer(AveragingPeer):
    """A holder that takes pushes in and never answers them (hung, not gone)."""

    async def _serve_push(self, peer: PeerInfo, msg: Push) -> Message:
        await trio.sleep_forever()
        raise AssertionError("unreachable")


@pytest.mark.parametrize("failure", ["stopped", "silent"])
async def test_a_member_that_stops_answering_does_not_stall_the_others(failure: str) -> None:
    vectors = _vectors(4, 200)
    kinds = [_SilentPeer if failure == "silent" and i == 3 else AveragingPeer for i in range(4)]
    peers = [kind(v, MODEL, round_timeout=0.1) for kind, v in zip(kinds, vectors, strict=True)]
    survivors, lost = peers[:3], peers[3]
    # the lost member merges nothing: the survivors keep their own mass and
    # average it among themselves
    mean = np.mean(vectors[:3], axis=0)
    async with trio.open_nursery() as nursery:
        lost_scope = (await _started(nursery, peers))[3]
        if failure == "stopped":
            lost_scope.cancel()  # its transport closes: connections refused
        stop = trio.Event()
        async with trio.open_nursery() as mixing:
            for p in survivors:
                mixing.start_soon(p.mix, stop)
            await wait_until(lambda: max(_error(p, mean) for p in survivors) <= TOLERANCE,
                             timeout=180, what="the survivors within tolerance of their mean")
            await wait_until(lambda: min(p.rounds for p in survivors) >= 8, timeout=180,
                             what="8 rounds at every survivor")
            stop.set()
        nursery.cancel_scope.cancel()
    _check_books(survivors, vectors[:3])
    members = survivors[0].members
    lost_index = members.index(lost.identity.node_id)  # it was found, then lost
    meeting = 0
    for p in survivors:
        assert np.isfinite(p.core.estimate).all()
        i = members.index(p.identity.node_id)
        if any(matched_partner(i, 4, k) == lost_index for k in range(p.rounds)):
            meeting += 1
            assert p.skipped_rounds >= 1  # its rounds with the lost member ended at the deadline
    assert meeting == 2  # i XOR 1 and i XOR 2 of the lost member's index i


async def test_matched_needs_two_members_and_arguments_are_checked() -> None:
    peer = AveragingPeer(np.zeros(4), MODEL)
    assert peer.partners == "matched"  # the default
    await peer.wait_for_holders(0)  # not listening: it knows only itself
    with pytest.raises(ValueError, match="at least 2 holders"):
        await peer.mix(trio.Event())
    with pytest.raises(ValueError, match="partners"):
        AveragingPeer(np.zeros(4), MODEL, partners="nearest")
    with pytest.raises(ValueError, match="partners"):
        AveragingPeer(np.zeros(4), MODEL, partners="hypercube")  # the old name is gone
    for bad in (0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="round_timeout"):
            AveragingPeer(np.zeros(4), MODEL, round_timeout=bad)
