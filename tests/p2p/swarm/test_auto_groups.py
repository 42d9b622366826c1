"""``scripts/swarm.py --semi-local auto``: the spec and configs it makes, unequal groups
in ``--permuted``, and the groups in the swarm's JSON (scored against the permutations)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from p2p.swarm import (
    AUTO_PUBLIC_SIZE,
    AUTO_ROUNDS,
    SwarmError,
    SwarmSpec,
    grouping_summary,
    partition,
)
from p2p.swarm import cli as swarm_cli
from p2p.testing import swarm_node_configs

PERMS_12 = "id,8:9,7:8,7:8:9,7:9:8,7:9"


@pytest.fixture
def swarm_script(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return swarm_cli


def _spec(script: ModuleType, *argv: str) -> SwarmSpec:
    spec: SwarmSpec = script.spec_from_args(script.build_parser().parse_args(list(argv)))
    return spec


def test_semi_local_auto_turns_clustering_on_and_declares_only_the_global_model(
        swarm_script: ModuleType, tmp_path: Path) -> None:
    spec = _spec(swarm_script, "--nodes", "12", "--permuted", PERMS_12, "--semi-local", "auto",
                 "--pretrain-rounds", "15")
    assert (spec.semi_local, spec.grouping, spec.pretrain_rounds) == (True, "auto", 15)
    assert spec.rounds == AUTO_ROUNDS  # pre-training, then the groups' rounds
    assert _spec(swarm_script, "--semi-local", "auto", "--rounds", "70").rounds == 70
    assert _spec(swarm_script, "--semi-local").rounds == SwarmSpec().rounds
    for config in swarm_node_configs(spec, tmp_path):
        c = config.clustering
        assert (c.mode, c.share, c.expected_nodes, c.pretrain_rounds) == ("auto", 0.2, 12, 15)
        assert c.start == "average"  # the node's default unless --grouping-start
        (model,) = config.models
        assert (model.name, model.kind) == ("global", "global")
        # 80 % of each hidden layer is global: the 20 % the groups take stay local
        assert model.counts == (64, 38, 26, 10)
        assert c.semi_local_counts(config.layout()) == (0, 10, 6, 0)
        # digits carves no public split by default: the groups need one to project on
        assert config.data.public_size == AUTO_PUBLIC_SIZE
    given = _spec(swarm_script, "--semi-local", "auto", "--public-size", "120")
    assert {c.data.public_size for c in swarm_node_configs(given, tmp_path)} == {120}
    reinit = _spec(swarm_script, "--nodes", "2", "--semi-local", "auto", "--grouping-start", "reinit")
    (tmp_path / "reinit").mkdir()
    assert {c.clustering.start for c in swarm_node_configs(reinit, tmp_path / "reinit")} == {"reinit"}


def test_semi_local_alone_keeps_the_manual_groups(swarm_script: ModuleType,
                                                  tmp_path: Path) -> None:
    spec = _spec(swarm_script, "--nodes", "4", "--permuted", "id,8:9", "--semi-local")
    assert (spec.semi_local, spec.grouping) == (True, "manual")
    configs = swarm_node_configs(spec, tmp_path)
    assert {c.clustering.mode for c in configs} == {"off"}
    assert {c.data.public_size for c in configs} == {None}  # shards as before
    assert [[m.name for m in c.models] for c in configs] == [["global", "semi0"],
                                                             ["global", "semi1"]] * 2
    plain = _spec(swarm_script, "--nodes", "4")
    assert not plain.semi_local and {c.clustering.mode for c in swarm_node_configs(plain, tmp_path)} == {
        "off"}
    with pytest.raises(SwarmError, match="--pretrain-rounds goes with --semi-local auto"):
        _spec(swarm_script, "--semi-local", "--pretrain-rounds", "5")
    with pytest.raises(SwarmError, match="--grouping-start goes with --semi-local auto"):
        _spec(swarm_script, "--grouping-start", "reinit")
    with pytest.raises(SystemExit):
        swarm_script.build_parser().parse_args(["--semi-local", "automatic"])


def test_pretraining_that_leaves_no_round_is_refused_before_start(
        swarm_script: ModuleType) -> None:
    with pytest.raises(SwarmError, match="pretrain_rounds"):
        _spec(swarm_script, "--semi-local", "auto", "--rounds", "10", "--pretrain-rounds", "10")


def test_permuted_takes_runs_of_nodes_for_unequal_groups(swarm_script: ModuleType) -> None:
    perms = swarm_script.parse_permuted("id*4,8:9*4,7:8*2,7:9,7:8:9", 12)
    assert perms == (None,) * 4 + ("8:9",) * 4 + ("7:8",) * 2 + ("7:9", "7:8:9")
    spec = _spec(swarm_script, "--nodes", "12", "--permuted", "id*4,8:9*4,7:8*2,7:9,7:8:9")
    assert [len(g) for g in partition(spec.groups())] == [4, 4, 2, 1, 1]
    # without runs, the list still cycles over the nodes as before
    assert swarm_script.parse_permuted("id,8:9", 5) == (None, "8:9", None, "8:9", None)
    assert swarm_script.parse_permuted("8:9*2,id", 6) == ("8:9", "8:9", None) * 2
    for bad in ("8:9*0", "8:9*x", "id*"):
        with pytest.raises(SwarmError, match="SPEC\\*N"):
            swarm_script.parse_permuted(bad, 4)


IDS = [f"{i:02x}" * 32 for i in range(6)]


def _report(members: list[int] | None, fingerprint: str | None = "f1" * 32,
            phase: str = "agreed") -> dict[str, Any]:
    own = None if members is None else {"model": "semi-e1-g0" if len(members) > 1 else None,
                                        "members": [IDS[m] for m in members],
                                        "barycentre_distance": 0.1, "gain": 0.2}
    return {"phase": phase, "epoch": 1, "fingerprint": fingerprint, "own": own,
            "peers_agreeing": 5, "disagreements": 0}


def test_grouping_summary_scores_the_groups_against_the_permutations() -> None:
    truth = [0, 1, 2, 0, 1, 2]  # pairs {0,3} {1,4} {2,5}
    exact = grouping_summary(IDS, [_report(sorted({i, (i + 3) % 6})) for i in range(6)], truth)
    assert exact["found"] == [[0, 3], [1, 4], [2, 5]] and exact["truth"] == [[0, 3], [1, 4],
                                                                            [2, 5]]
    assert (exact["identification"], exact["differentiation"]) == (1.0, 1.0)
    assert exact["fingerprints_agree"] and exact["fingerprint"] == "f1" * 32
    assert exact["per_node"][4]["group"] == [1, 4]
    assert exact["per_node"][4]["model"] == "semi-e1-g0"
    # {1,4} and {2,5} merged: 3 true pairs found, 3 of the 12 differing pairs joined
    merged = [[0, 3], [1, 2, 4, 5], [1, 2, 4, 5], [0, 3], [1, 2, 4, 5], [1, 2, 4, 5]]
    out = grouping_summary(IDS, [_report(m) for m in merged], truth)
    assert out["found"] == [[0, 3], [1, 2, 4, 5]]
    assert out["identification"] == 1.0 and out["differentiation"] == pytest.approx(8 / 12)


def test_grouping_summary_flags_disagreement_and_nodes_without_groups() -> None:
    truth = [0, 1, 2, 0, 1, 2]
    reports: list[dict[str, Any] | None] = [_report(sorted({i, (i + 3) % 6})) for i in range(6)]
    reports[5] = _report([5], fingerprint="e2" * 32)  # disagrees: alone
    reports[1] = None  # did not answer
    out = grouping_summary(IDS, reports, truth)
    assert not out["fingerprints_agree"] and out["fingerprint"] is None
    assert out["agreed_nodes"] == 5
    assert out["per_node"][1]["group"] is None
    # node 2 still lists 5 as its partner (first view wins); node 1 answered nothing
    assert out["found"] == [[0, 3], [1], [2, 5], [4]]
    assert out["identification"] == pytest.approx(2 / 3)
    collecting = grouping_summary(IDS[:2], [_report(None, None, "collecting")] * 2, [0, 0])
    assert collecting["found"] == [[0], [1]] and collecting["identification"] == 0.0
    assert not collecting["fingerprints_agree"]


def test_groups_line_of_the_printed_table(swarm_script: ModuleType) -> None:
    truth = [0, 1, 2, 0, 1, 2]
    out = grouping_summary(IDS, [_report(sorted({i, (i + 3) % 6})) for i in range(6)], truth)
    line = swarm_script.groups_line(out)
    assert line.startswith("groups found: {0,3} {1,4} {2,5}; identification 1.00, "
                           "differentiation 1.00")
    assert "all 6 nodes report fingerprint f1f1f1f1f1f1" in line
    reports: list[dict[str, Any] | None] = [_report([i]) for i in range(6)]
    reports[0] = _report([0], fingerprint="e2" * 32)
    assert "fingerprints DIFFER: 2 distinct among the 6 of 6 nodes that agreed" in (
        swarm_script.groups_line(grouping_summary(IDS, reports, truth)))
    waiting = grouping_summary(IDS, [_report(None, None, "collecting")] * 5 + [None], truth)
    assert "NO node agreed on groups (phases: collecting 5, no answer 1)" in (
        swarm_script.groups_line(waiting))


def test_an_auto_swarm_is_finished_only_once_every_node_applied_its_groups(
        tmp_path: Path) -> None:
    from p2p.swarm import Daemon, Swarm

    spec = SwarmSpec(nodes=2, rounds=5, semi_local=True, grouping="auto")
    swarm = Swarm(spec, workdir=tmp_path)
    swarm.daemons = [Daemon(i, tmp_path, tmp_path / "c", tmp_path / "l") for i in range(2)]
    for d in swarm.daemons:
        d.status = {"round": 5, "accuracy": 0.9, "groups": {"phase": "collecting"}}
    assert not swarm.finished()  # trained, but the groups have not been applied
    for d in swarm.daemons:
        d.status["groups"] = {"phase": "agreed"}
    assert swarm.finished()
    manual = Swarm(SwarmSpec(nodes=2, rounds=5, semi_local=True), workdir=tmp_path)
    manual.daemons = swarm.daemons
    swarm.daemons[0].status["groups"] = None
    assert manual.finished()  # manual groups: rounds alone decide
