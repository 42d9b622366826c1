"""The gossip-only mode (p2p.simulation.gossip_only) at a small N: figures and behaviour."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from p2p.simulation.gossip_only import (
    GossipScale,
    GossipScaleConfig,
    add_gossip_only_arguments,
    run_gossip_only,
)


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_gossip_only_arguments(p)
    return p.parse_args(list(argv))


@pytest.fixture(scope="module")
def doc() -> dict[str, object]:
    return run_gossip_only(parse("--nodes", "100", "--periods", "20", "--seed", "3",
                                 "--holders-at", "3", "--quiet"))


def test_top_level_figures_of_every_mode(doc: dict[str, object]) -> None:
    assert doc["nodes"] == 100
    assert doc["periods"] == 20
    assert doc["mean_accuracy"] is None and doc["worst_accuracy"] is None
    assert doc["simulated_seconds"] == 20.0
    assert isinstance(doc["wall_seconds"], float) and doc["wall_seconds"] > 0
    spread = doc["seconds_per_period"]
    assert isinstance(spread, dict) and spread["median"] <= spread["max"]


def test_pushsum_converges_to_the_true_average(doc: dict[str, object]) -> None:
    rows = doc["per_period"]
    assert isinstance(rows, list) and len(rows) == 20
    first, last = rows[0], rows[-1]
    assert first["pushsum_max_error"] > 0.1  # random N(1, 1) vectors: far apart at first
    assert last["pushsum_max_error"] < 1e-3
    assert last["pushsum_mean_error"] <= last["pushsum_max_error"]
    assert doc["periods_to_error_1e-2"] is not None


def test_view_statistics_every_period(doc: dict[str, object]) -> None:
    rows = doc["per_period"]
    assert isinstance(rows, list)
    for row in rows:
        assert row["in_degree_mean"] == pytest.approx(20.0)  # full views of c = 20
        assert row["in_degree_std"] >= 0
        assert row["view_age_mean"] > 0
        assert row["dead_entry_fraction"] == 0.0  # no crash in this run


def test_holder_lookup_finds_the_three_holders(doc: dict[str, object]) -> None:
    lookup = doc["holder_lookup"]
    assert isinstance(lookup, dict)
    assert lookup["holders"] == 3 and lookup["declared_at_period"] == 3
    each = lookup["periods_until_each_holder_has_a_holder"]
    assert isinstance(each, list) and len(each) == 3 and None not in each
    assert lookup["periods_until_every_holder_knows_all"] is not None
    assert lookup["periods_until_newcomer_has_a_holder"] is not None


def test_signature_mode_is_named_in_the_output(doc: dict[str, object]) -> None:
    assert doc["signatures"] == "shared-cache"
    assert "shared cache" in str(doc["signature_note"])
    off = GossipScale(GossipScaleConfig(nodes=10, periods=1, signatures="off", holders=0))
    assert "not used" in off.signature_note
    own = GossipScale(GossipScaleConfig(nodes=10, periods=1, signatures="per-node", holders=0))
    assert "own bounded cache" in own.signature_note


def test_crash_leaves_dead_entries_that_age_out() -> None:
    run = GossipScale(GossipScaleConfig(nodes=100, periods=1, crash=0.3, crash_at=2,
                                        holders=0, seed=1))
    run.step()
    row = run.step()
    assert row["crashed"] == 30
    dead = row["dead_entry_fraction"]
    assert isinstance(dead, float) and dead > 0.1
    for _ in range(15):
        row = run.step()
    after = row["dead_entry_fraction"]
    assert isinstance(after, float) and after < dead / 2
    # the survivors still average among themselves: every estimate is finite and close
    error = row["pushsum_max_error"]
    assert isinstance(error, float) and error < 1.0


def test_bad_flags_name_the_field() -> None:
    with pytest.raises(ValueError, match="signatures"):
        GossipScaleConfig(signatures="sometimes")
    with pytest.raises(ValueError, match="loss"):
        GossipScaleConfig(loss=1.5)


def test_gossip_only_imports_no_torch() -> None:
    code = "import sys, p2p.simulation.gossip_only; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_peer_sampling_only_reports_no_pushsum_errors() -> None:
    doc = run_gossip_only(parse("--nodes", "40", "--periods", "3", "--no-pushsum",
                                "--holders", "0", "--quiet"))
    assert doc["pushsum_max_error"] is None and doc["periods_to_error_1e-2"] is None
    assert doc["pushes"] == 0 and doc["holder_lookup"] is None
    rows = doc["per_period"]
    assert isinstance(rows, list) and rows[-1]["in_degree_mean"] == pytest.approx(20.0)
