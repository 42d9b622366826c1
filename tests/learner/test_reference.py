"""Tests for the synchronous reference (thesis Algorithm 2) and the scheme builders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from lab.paper import reproduce as paper_reproduce

from learner.data import DataSpec, load_node_data
from learner.layout import ModelLayout
from learner.network import PartialMLP
from learner.reference import (
    NodeSetup,
    ReferenceSetupError,
    average_shared_models,
    run_reference,
)
from learner.schemes import (
    SEMI_LOCAL_LOCAL_SCHEMES,
    SEMI_LOCAL_SCHEMES,
    averaging_level,
    semi_local_local_scheme,
    semi_local_scheme,
)
from learner.spec import NetworkSpec, SpecError
from learner.trainer import TrainConfig, Trainer

NET = NetworkSpec.parse("64=24=16=10")


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """Tiny models: extra intra-op threads only spin on a busy 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _nodes(models_of, num_nodes: int = 4, perms=None, seed: int = 0) -> list[NodeSetup]:
    perms = perms or [None] * num_nodes
    return [
        NodeSetup(NET, tuple(models_of(i)),
                  load_node_data(DataSpec(node_index=i, num_nodes=num_nodes, seed=seed,
                                          permutation=perms[i])),
                  seed=100 + i)
        for i in range(num_nodes)
    ]


# ------------------------------------------------------------------ schemes


def test_averaging_levels() -> None:
    assert averaging_level(NET, 0) == []
    (full,) = averaging_level(NET, 100)
    assert full.counts == NET.sizes
    (part,) = averaging_level(NET, 50)
    assert part.counts == (64, 12, 8, 10)
    with pytest.raises(SpecError, match="percentage"):
        averaging_level(NET, 120)


def test_semi_local_schemes() -> None:
    assert semi_local_scheme(NET, "none", 0) == []
    assert semi_local_scheme(NET, "full", 3)[0].name == "global"
    assert semi_local_scheme(NET, "group", 3)[0].name == "group3"
    glob, semi = semi_local_scheme(NET, "global80+semi20", 2)
    assert glob.counts == (64, 19, 13, 10)
    assert semi.counts == (0, 5, 3, 0) and semi.depends_on == ("global",)
    assert semi_local_scheme(NET, "global80+semi20-nodep", 2)[1].depends_on == ()
    for scheme in SEMI_LOCAL_SCHEMES:  # every scheme yields a valid layout
        ModelLayout(NET, semi_local_scheme(NET, scheme, 1))
    with pytest.raises(SpecError, match="unknown"):
        semi_local_scheme(NET, "half", 0)


def test_semi_local_local_schemes() -> None:
    net = NetworkSpec.parse("64=40=20=10")
    for node in range(4):
        assert semi_local_local_scheme(net, "none", node) == []
        assert semi_local_local_scheme(net, "group", node)[0].name == f"group{node // 2}"
    glob, semi0 = semi_local_local_scheme(net, "global70+semi", 0)
    assert glob.counts == (64, 28, 14, 10)
    # the identical pair shares every remaining hidden neuron, the other pair half of it
    assert semi0.name == "semi0" and semi0.counts == (0, 12, 6, 0)
    assert semi0.depends_on == ("global",)
    _, semi1 = semi_local_local_scheme(net, "global70+semi-nodep", 3)
    assert semi1.name == "semi1" and semi1.counts == (0, 6, 3, 0) and semi1.depends_on == ()
    layout = ModelLayout(net, semi_local_local_scheme(net, "global70+semi", 2))
    assert layout.owned_parameter_count("local") > 0  # the differing pair keeps a local part
    cnn = NetworkSpec.parse("1x8x8=c10k3=pool2=20=10")
    for scheme in SEMI_LOCAL_LOCAL_SCHEMES:  # every scheme yields a valid layout, CNN too
        for node in range(4):
            ModelLayout(net, semi_local_local_scheme(net, scheme, node))
            ModelLayout(cnn, semi_local_local_scheme(cnn, scheme, node))
    assert semi_local_local_scheme(cnn, "global70+semi", 0)[0].counts == (1, 7, 14, 10)
    with pytest.raises(SpecError, match="unknown"):
        semi_local_local_scheme(net, "global80+semi20", 0)
    with pytest.raises(SpecError, match="node must be 0..3"):
        semi_local_local_scheme(net, "none", 4)


# ---------------------------------------------------------------- averaging


def test_full_averaging_makes_shared_vectors_identical_after_a_round() -> None:
    nodes = _nodes(lambda i: averaging_level(NET, 100), perms=[None, "8:9", None, "(7 8 9)"])
    layouts = [ModelLayout(n.network, list(n.models)) for n in nodes]
    nets = [PartialMLP(layout, n.seed) for layout, n in zip(layouts, nodes, strict=True)]
    start = nets[0].extract("global")
    assert all(np.array_equal(start, m.extract("global")) for m in nets)  # identical init
    for net, node in zip(nets, nodes, strict=True):
        Trainer(net, node.data.train_x, node.data.train_y,
                TrainConfig(seed=node.seed)).train_round()
    trained = [m.extract("global") for m in nets]
    assert not np.array_equal(trained[0], trained[1])  # nodes diverged while training
    counts = average_shared_models(nets, layouts)
    assert counts == {"global": 4}
    after = [m.extract("global") for m in nets]
    for vector in after:
        np.testing.assert_array_equal(vector, after[0])
    np.testing.assert_allclose(after[0], np.mean(trained, axis=0), rtol=1e-6, atol=1e-7)


def test_semi_local_models_average_only_within_their_group() -> None:
    groups = [0, 0, 1, 1]
    nodes = _nodes(lambda i: semi_local_scheme(NET, "global80+semi20", groups[i]))
    layouts = [ModelLayout(n.network, list(n.models)) for n in nodes]
    nets = [PartialMLP(layout, n.seed) for layout, n in zip(layouts, nodes, strict=True)]
    for net, node in zip(nets, nodes, strict=True):
        Trainer(net, node.data.train_x, node.data.train_y, TrainConfig(seed=node.seed)).train_round()
    counts = average_shared_models(nets, layouts)
    assert counts == {"global": 4, "semi0": 2, "semi1": 2}
    np.testing.assert_array_equal(nets[0].extract("semi0"), nets[1].extract("semi0"))
    np.testing.assert_array_equal(nets[2].extract("semi1"), nets[3].extract("semi1"))
    np.testing.assert_array_equal(nets[0].extract("global"), nets[3].extract("global"))


def test_level_zero_shares_nothing() -> None:
    nodes = _nodes(lambda i: [], num_nodes=2)
    layouts = [ModelLayout(n.network, []) for n in nodes]
    nets = [PartialMLP(layout, n.seed) for layout, n in zip(layouts, nodes, strict=True)]
    assert average_shared_models(nets, layouts) == {}


# ------------------------------------------------------------ run_reference


def test_reference_is_deterministic_and_learns() -> None:
    def run():
        nodes = _nodes(lambda i: averaging_level(NET, 80), perms=[None, "8:9", None, "8:9"])
        return run_reference(nodes, 12, TrainConfig(batch_size=16, seed=3), eval_every=4)

    first, second = run(), run()
    assert first.eval_rounds == (4, 8, 12)
    assert first.accuracy == second.accuracy and first.loss == second.loss
    assert len(first.final_accuracy) == 4
    assert first.mean_final_accuracy > 0.3  # chance is 0.1
    assert first.mean_accuracy[-1] > first.mean_accuracy[0]


def test_batched_reference_matches_the_plain_loop() -> None:
    """Batching the nodes' rounds changes the arithmetic's grouping, not the run."""
    def run(batched: bool):
        nodes = _nodes(lambda i: averaging_level(NET, 80), perms=[None, "8:9", None, "8:9"])
        return run_reference(nodes, 6, TrainConfig(batch_size=16, seed=3), eval_every=3,
                             batched=batched)

    plain, batched = run(False), run(True)
    assert batched.eval_rounds == plain.eval_rounds
    np.testing.assert_allclose(batched.loss, plain.loss, rtol=1e-4, atol=1e-5)
    # a rounding difference may flip a test sample whose two top scores tie closely
    np.testing.assert_allclose(batched.accuracy, plain.accuracy, atol=0.02)


def test_batched_reference_refuses_dp() -> None:
    from learner.dp.config import DPConfig

    nodes = _nodes(lambda i: [], num_nodes=2)
    with pytest.raises(ReferenceSetupError, match="batched=True cannot train DP-SGD"):
        run_reference(nodes, 1, TrainConfig(), batched=True, dp=DPConfig())


def test_reference_setup_errors() -> None:
    nodes = _nodes(lambda i: [], num_nodes=1)
    wrong = NodeSetup(NetworkSpec.parse("32=8=10"), (), nodes[0].data, seed=0)
    with pytest.raises(ReferenceSetupError, match="64 features but the network 32=8=10"):
        run_reference([wrong], 1, TrainConfig())
    with pytest.raises(ReferenceSetupError, match="rounds"):
        run_reference(nodes, 0, TrainConfig())
    with pytest.raises(ReferenceSetupError, match="no nodes"):
        run_reference([], 1, TrainConfig())


def test_reproduce_script_tiny_run(tmp_path: Path, capsys,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    reproduce_paper = paper_reproduce
    out = tmp_path / "r.json"
    code = reproduce_paper.main(["semi-local", "--seeds", "2", "--rounds", "2", "--batch-sizes",
                                 "8", "--variants", "none,global80+semi20", "--workers", "1",
                                 "--network", "64=12=8=10", "--json", str(out)])
    assert code == 0
    payload = json.loads(out.read_text())
    assert [r["variant"] for r in payload["results"]] == ["none", "global80+semi20"]
    for entry in payload["results"]:
        assert len(entry["per_seed"]) == 2
        assert entry["p40"] <= entry["median"] <= entry["p60"]
    assert "80 global + 20 semi-local" in capsys.readouterr().out


def _reproduce_module(monkeypatch: pytest.MonkeyPatch):
    return paper_reproduce


def test_reproduce_script_cnn_json_to_stdout(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    reproduce_paper = _reproduce_module(monkeypatch)
    code = reproduce_paper.main(["semi-local-local", "--network", "1x8x8=c6k3=pool2=12=10",
                                 "--seeds", "2", "--rounds", "3", "--batch-sizes", "8",
                                 "--variants", "none,global70+semi", "--workers", "1",
                                 "--eval-every", "1", "--json"])
    assert code == 0
    captured = capsys.readouterr()
    payload = json.loads(captured.out)  # stdout holds the JSON alone; tables on stderr
    assert "70 global + 30/15 semi-local per pair" in captured.err
    assert payload["settings"]["network"] == "1x8x8=c6k3=pool2=12=10"
    assert payload["settings"]["task"] == "digits"
    for entry in payload["results"]:
        assert len(entry["per_seed"]) == 2
        assert entry["curve_rounds"] == [1, 2, 3] and len(entry["curve_median"]) == 3
        assert "rounds_to_target" in entry
    assert payload["checks"] == []  # only averaging-level checks level 80


def test_reproduce_script_quick_levels_and_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    reproduce_paper = _reproduce_module(monkeypatch)
    args = reproduce_paper.parse_args(["averaging-level", "--quick", "--task", "mnist5k",
                                       "--network", "cnn"])
    settings = reproduce_paper.settings_from(args)
    assert settings.variants == ("0", "80", "100")
    assert settings.network == "1x28x28=c16k5=pool2=c32k5=pool2=100=10"
    assert len(settings.seeds) == 3 and settings.public_size == 0
    with pytest.raises(SystemExit, match="--network"):
        reproduce_paper.settings_from(reproduce_paper.parse_args(
            ["averaging-level", "--network", "1x8x8=c4k3=bn=10"]))
    settings = reproduce_paper.settings_from(reproduce_paper.parse_args(
        ["averaging-level", "--seeds", "2", "--batch-sizes", "8", "--variants", "0,80,100"]))
    outcome = reproduce_paper.Outcome
    values = {(v, 8): {0: outcome(a, [], [], []), 1: outcome(b, [], [], [])}
              for v, a, b in (("0", 0.80, 0.82), ("80", 0.90, 0.91), ("100", 0.89, 0.93))}
    (check,) = reproduce_paper.checks(settings, values)
    assert check["vs_0"]["above"] and check["vs_0"]["beyond_spread"]
    assert check["vs_0"]["margin"] == pytest.approx(0.905 - 0.81)
    assert not check["vs_100"]["above"]  # medians 0.905 against 0.91
    assert check["vs_100"]["paired"] == {"median": pytest.approx(-0.005), "wins": 1, "runs": 2}
