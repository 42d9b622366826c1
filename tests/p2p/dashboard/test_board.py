"""The dashboard's core: node states, aligned series and their mean, the peer graph of
the last minute, refusals summed, and the metrics URL's reading of a real exposition."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

from p2p.dashboard import Board, NodeAbsent, Snapshot, SocketSource
from p2p.dashboard.board import CONTACT_WINDOW
from p2p.dashboard.sources import READ_COMMANDS, snapshot_from_metrics
from p2p.metrics import Refusal, node_registry
from p2p.testing import MemoryNetwork, wait_until
from p2p.testing.nodes import fast_spec, memory_swarm, running


def _snap(node_id: str, accuracy: float | None = 0.5, *, isolated: bool = False,
          peers: list[dict[str, object]] | None = None, sent: int = 0) -> Snapshot:
    return Snapshot(status={"id": node_id, "name": node_id, "round": 3, "accuracy": accuracy,
                            "loss": 1.0, "isolated": isolated},
                    models=[{"name": "global", "weight": 1.0}, {"name": "local"}],
                    peers=peers or [], bytes_sent=sent,
                    refusals=[Refusal("push", "guard", "global", 2)],
                    offences={"transport": 1})


def _states(board: Board, now: float) -> dict[str, str]:
    return {row["key"]: row["state"] for row in board.view(now)["nodes"]}


def test_states_follow_what_the_polls_found() -> None:
    board = Board()
    board.watch([("a", "a"), ("b", "b"), ("c", "c")], 0.0)
    board.record("a", 1.0, _snap("A"))
    board.record("b", 1.0, absent="no admin socket")
    board.record("c", 1.0, _snap("C", isolated=True))
    assert _states(board, 1.0) == {"a": "alive", "b": "no-node", "c": "isolated"}
    board.record("a", 2.0, absent="connection refused")  # it answered before: dead
    board.record("c", 2.0, error="AdminSocketUntrusted: owned by another user")
    rows = {row["key"]: row for row in board.view(3.0)["nodes"]}
    assert _states(board, 3.0) == {"a": "dead", "b": "no-node", "c": "error"}
    assert rows["a"]["error"] == "connection refused" and rows["a"]["seen_ago"] == 2.0
    assert rows["a"]["round"] == 3  # the last values it reported stay visible
    assert rows["b"]["seen_ago"] is None and rows["b"]["round"] is None
    board.record("a", 4.0, _snap("A"))  # restarted
    assert _states(board, 4.0)["a"] == "alive"
    board.watch([("b", "b"), ("c", "c")], 5.0)  # a's data directory was removed
    rows = {row["key"]: row for row in board.view(5.0)["nodes"]}
    assert rows["a"]["state"] == "dead" and "no longer listed" in rows["a"]["error"]


def test_series_stay_aligned_and_the_mean_skips_unknowns() -> None:
    empty = Board()
    empty.tick(1.0)  # a glob that matches nothing yet: the page still gets aligned series
    assert empty.view(1.0)["series"]["accuracy_mean"] == [None]
    board = Board(max_points=3)
    board.watch([("a", "a")], 0.0)
    board.record("a", 1.0, _snap("A", 0.2, sent=0))
    board.tick(1.0)
    board.watch([("a", "a"), ("b", "b")], 2.0)  # a glob found a new node: its past is unknown
    board.record("a", 2.0, _snap("A", 0.4, sent=1000))
    board.record("b", 2.0, _snap("B", 0.8, sent=5))
    board.tick(2.0)
    board.record("a", 3.0, absent="gone")
    board.record("b", 3.0, _snap("B", 0.6, sent=505))
    board.tick(3.0)
    board.record("b", 4.0, _snap("B", 0.7, sent=505))
    board.tick(4.0)  # max_points: the first column drops
    s = board.view(4.0)["series"]
    assert s["t"] == [2.0, 3.0, 4.0]
    assert s["accuracy"] == {"a": [0.4, None, None], "b": [0.8, 0.6, 0.7]}
    assert s["accuracy_mean"] == pytest.approx([0.6, 0.6, 0.7])
    assert s["bytes_rate"] == {"a": [1000.0, None, None], "b": [None, 500.0, 0.0]}


def test_the_byte_rate_spans_the_readings_of_the_counters() -> None:
    """Polls that did not read the counters again hold the rate of the last two readings."""
    board = Board()
    board.watch([("a", "a")], 0.0)
    for now, sent, seq in ((1.0, 0, 1), (2.0, 0, 1), (3.0, 0, 1), (4.0, 900, 4), (5.0, 900, 4),
                           (6.0, 1500, 6)):
        board.record("a", now, dataclasses.replace(_snap("A", sent=sent), counters_seq=seq))
        board.tick(now)
    assert board.view(6.0)["series"]["bytes_rate"]["a"] == [None, None, None, 300.0, 300.0,
                                                            300.0]


async def test_the_socket_source_reads_slow_parts_every_few_polls(tmp_path: Path) -> None:
    nodes = memory_swarm(tmp_path, MemoryNetwork(seed=6), fast_spec(rounds=0))
    source = SocketSource(nodes[0].data_dir, slow_every=3)
    asked: list[tuple[str, ...]] = []
    read = source.read

    def recording(commands: Sequence[str]) -> list[dict[str, Any]]:
        asked.append(tuple(commands))
        if len(asked) == 5:
            raise NodeAbsent("connection refused")  # a restart, say
        return read(commands)

    source.read = recording  # type: ignore[method-assign]
    async with running(nodes):
        await wait_until(lambda: nodes[0].progress.round >= 1, timeout=60)
        snaps = [await trio.to_thread.run_sync(source.poll) for _ in range(4)]
        with pytest.raises(NodeAbsent):
            await trio.to_thread.run_sync(source.poll)
        await trio.to_thread.run_sync(source.poll)
    full, status = READ_COMMANDS, ("status",)
    assert asked == [full, status, status, full, status, full]  # in full after a failure
    assert [s.counters_seq for s in snaps] == [1, 1, 1, 4]
    assert snaps[1].models == snaps[0].models and snaps[1].status is not snaps[0].status
    assert snaps[3].models and snaps[3].bytes_sent is not None


def test_the_graph_links_recent_contacts_among_watched_nodes() -> None:
    board = Board()
    board.watch([("a", "a"), ("b", "b"), ("c", "c")], 0.0)
    board.record("a", 1.0, _snap("A", peers=[
        {"id": "B", "last_contact": 5.0, "models": ["global"]},
        {"id": "C", "last_contact": CONTACT_WINDOW + 1},  # too long ago
        {"id": "X", "last_contact": 1.0},  # not watched here
        {"id": "B", "last_contact": None, "relayed": True}]))  # never contacted: no edge
    board.record("b", 1.0, _snap("B", peers=[{"id": "A", "last_contact": 2.0, "via": "R"}]))
    board.record("c", 1.0, _snap("C", peers=[{"id": "A", "last_contact": 1.0}]))
    board.record("c", 2.0, absent="gone")  # a dead node's own reports are dropped
    graph = board.view(2.0)["graph"]
    assert graph["edges"] == [{"a": "a", "b": "b", "relayed": True, "models": ["global"]}]
    assert graph["outside_peers"] == 1


def test_refusals_and_offences_are_summed_over_the_nodes() -> None:
    board = Board()
    board.watch([("a", "a"), ("b", "b")], 0.0)
    board.record("a", 1.0, _snap("A"))
    board.record("b", 1.0, _snap("B"))
    view = board.view(1.0)
    assert view["refusals"] == [{"source": "push", "reason": "guard", "count": 4}]
    assert view["offences"] == {"transport": 2}


def test_a_data_dir_without_a_node_is_absent_and_only_reads_are_sent(tmp_path: Path) -> None:
    source = SocketSource(tmp_path)
    with pytest.raises(NodeAbsent, match="no admin socket"):
        source.poll()
    with pytest.raises(ValueError, match="only reads"):
        source.read(["status", "stop"])


async def test_a_metrics_url_reads_like_the_admin_socket(tmp_path: Path) -> None:
    nodes = memory_swarm(tmp_path, MemoryNetwork(seed=5), fast_spec(rounds=0))
    async with running(nodes):
        await wait_until(lambda: nodes[0].progress.round >= 2 and nodes[0].progress.accuracy
                         is not None, timeout=60)
        from prometheus_client import generate_latest
        from prometheus_client.parser import text_string_to_metric_families

        text = generate_latest(node_registry(nodes[0])).decode()
        round_now = nodes[0].progress.round
    snap = snapshot_from_metrics(text_string_to_metric_families(text))
    assert snap.status["id"] == nodes[0].identity.node_id.hex()
    assert snap.status["round"] >= min(round_now, 2) and 0 <= snap.status["accuracy"] <= 1
    assert [m["name"] for m in snap.models] == ["global"]
    assert {(r.source, r.reason) for r in snap.refusals} >= {("push", "guard"),
                                                             ("peer_sampling", "message")}
    assert set(snap.offences) == {"transport", "requests", "peer_sampling", "gossip"}
    assert snap.bytes_sent is not None
    with pytest.raises(ValueError, match="not a p2p node"):
        snapshot_from_metrics(text_string_to_metric_families("up 1\n"))
