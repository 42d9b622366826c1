"""The thesis' associative network (learner/associative.py) and its experiment script.

The Hebbian rule is checked on a hand-computed example; every parameter stays
in [-1, 1]; each partial model moves in and out by the same indices as the
MLP's; and averaging a partial model through the daemon's push-sum cores and
``ModelSync`` averages the shared neurons while leaving the local ones alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from lab.paper import associative as paper_associative
from lab.sim.pushsum import ModelSpec, Simulation

from gossip.model_sync import ModelSync, VectorModel
from learner.associative import AssociativeNetwork, AssociativeSettings, associative_network_spec
from learner.layout import ModelLayout
from learner.spec import NetworkSpec, PartialModelSpec


def _layout(visible: int, hidden: int, *models: PartialModelSpec) -> ModelLayout:
    return ModelLayout(associative_network_spec(visible, hidden), list(models))


def test_learning_rule_on_a_hand_checked_example() -> None:
    net = AssociativeNetwork(_layout(3, 2), seed=0, settings=AssociativeSettings(0.1, 0.5))
    net.hidden_weight[...] = [[0.4, 0.0, 0.2],   # drive 0.6 >= 0.5: fires
                              [0.1, 0.9, 0.3]]   # drive 0.4 < 0.5: silent
    net.visible_weight[...] = [[0.0, 0.7], [0.5, 0.7], [-1.0, 0.7]]
    v = np.array([1.0, 0.0, 1.0])
    np.testing.assert_array_equal(net.hidden(v), [[1.0, 0.0]])
    # Algorithm 4: visible i fires when visible_weight[i] . hidden >= 0.5
    np.testing.assert_array_equal(net.complete(v), [[0.0, 1.0, 0.0]])

    net.learn(v[None, :])
    # hidden weights from active visible neurons (0 and 2): up by (1 - w) / 2 * 0.1 for the
    # firing hidden neuron, down by (1 + w) / 2 * 0.1 for the silent one; column 1 untouched
    np.testing.assert_allclose(net.hidden_weight, [[0.43, 0.0, 0.24],
                                                   [0.045, 0.9, 0.235]])
    # visible weights from the firing hidden neuron (column 0): up where the visible
    # neuron is on (0, 2), down where it is off (1); the silent neuron's column untouched
    np.testing.assert_allclose(net.visible_weight, [[0.05, 0.7], [0.425, 0.7], [-0.9, 0.7]])
    np.testing.assert_array_equal(net.hidden_threshold, [0.5, 0.5])
    np.testing.assert_array_equal(net.visible_threshold, [0.5, 0.5, 0.5])


def test_parameters_stay_in_bounds_and_thresholds_fixed() -> None:
    layout = _layout(20, 30, PartialModelSpec("G", (20, 20, 20)))
    net = AssociativeNetwork(layout, seed=3, settings=AssociativeSettings(2.0, -0.25))
    rng = np.random.default_rng(1)
    for _ in range(50):
        net.learn((rng.random((4, 20)) < 0.3).astype(float))
        assert net.flat.min() >= -1.0 and net.flat.max() <= 1.0
    # the largest rate drives weights onto the bounds themselves
    assert np.isin(net.hidden_weight, (-1.0, 1.0)).any()
    np.testing.assert_array_equal(net.hidden_threshold, -0.25)
    np.testing.assert_array_equal(net.visible_threshold, -0.25)
    # an averaged vector a rounding step outside [-1, 1] is clipped back in
    vec = net.extract("G")
    vec[0], vec[1] = 1.0 + 1e-12, -3.0
    net.assign("G", vec)
    got = net.extract("G")
    assert got[0] == 1.0 and got[1] == -1.0


def test_bad_settings_layout_and_vectors_are_refused() -> None:
    with pytest.raises(ValueError, match="learning_rate"):
        AssociativeSettings(learning_rate=0.0)
    with pytest.raises(ValueError, match="threshold"):
        AssociativeSettings(threshold=1.5)
    with pytest.raises(ValueError, match="visible=hidden=visible"):
        AssociativeNetwork(ModelLayout(NetworkSpec((4, 3, 2)), []), 0)
    net = AssociativeNetwork(_layout(4, 6, PartialModelSpec("G", (4, 3, 4))), seed=0)
    before = net.flat.copy()
    with pytest.raises(ValueError, match="'G'.*shape"):
        net.assign("G", np.zeros(5))
    bad = net.extract("G")
    bad[2] = np.nan
    with pytest.raises(ValueError, match="index 2"):
        net.assign("G", bad)
    with pytest.raises(KeyError, match="not a shared model"):
        net.extract("local")
    with pytest.raises(ValueError, match="0 or 1"):
        net.learn(np.full((1, 4), 0.5))
    np.testing.assert_array_equal(net.flat, before)


def test_extract_assign_round_trip_per_model_matches_the_mlp() -> None:
    layout = _layout(6, 10, PartialModelSpec("G", (6, 4, 6)),
                     PartialModelSpec("A", (0, 3, 0), ("G",)))
    assert layout.shared_models == ("G", "A")
    net = AssociativeNetwork(layout, seed=5)
    # the shared models start from their fingerprints: another node's copy agrees
    other = AssociativeNetwork(layout, seed=6)
    rng = np.random.default_rng(0)
    for name in layout.shared_models:
        np.testing.assert_array_equal(net.extract(name), other.extract(name))
        vec = rng.uniform(-1.0, 1.0, layout.vector_length(name))
        untouched = np.delete(net.flat, layout.owned_indices(name))
        net.assign(name, vec)
        np.testing.assert_array_equal(net.extract(name), vec)
        np.testing.assert_array_equal(np.delete(net.flat, layout.owned_indices(name)), untouched)
        out = np.empty_like(vec)
        assert net.extract(name, out=out) is out
        np.testing.assert_array_equal(out, vec)

    # the canonical vectors are the MLP's for the same parameters: one layout, one wire format
    torch = pytest.importorskip("torch")
    from learner.network import PartialNetwork

    mlp = PartialNetwork(layout, seed=0)
    with torch.no_grad():
        mlp.flat.copy_(torch.from_numpy(net.flat.astype(np.float32)))
    for name in layout.shared_models:
        np.testing.assert_allclose(mlp.extract(name), net.extract(name), atol=1e-7)


def test_push_sum_averages_shared_neurons_and_leaves_local_ones() -> None:
    layout = _layout(8, 12, PartialModelSpec("G", (8, 9, 8)))
    nets = [AssociativeNetwork(layout, seed=s) for s in range(4)]
    local = layout.owned_indices("local")
    assert local.size > 0
    sim = Simulation([ModelSpec("G", (0, 1, 2, 3), np.array([n.extract("G") for n in nets]))],
                     seed=2)
    models: list[VectorModel] = list(nets)
    syncs = [ModelSync(m, {"G": sim.cores[(i, "G")]}) for i, m in enumerate(models)]
    rng = np.random.default_rng(4)
    for net in nets:  # each node learns its own vectors
        net.learn((rng.random((3, 8)) < 0.4).astype(float))
    trained = np.array([n.extract("G") for n in nets])
    assert np.ptp(trained, axis=0).max() > 0.01  # the nodes differ before averaging
    local_before = [n.flat[local].copy() for n in nets]
    for s in syncs:
        s.sync()
    sim.run(40)
    sim.drain()
    for s in syncs:
        s.sync()
    mean = trained.mean(axis=0)
    for net, before in zip(nets, local_before, strict=True):
        # shared neurons: the holders' average (the wire's f32/int8 encodings round a little)
        np.testing.assert_allclose(net.extract("G"), mean, atol=1e-3)
        np.testing.assert_array_equal(net.flat[local], before)
        assert net.flat.min() >= -1.0 and net.flat.max() <= 1.0


def test_paper_script_runs_and_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    script = paper_associative
    task = script.ThesisTask()
    given, full = task.vectors(1, modified=False)
    _, changed = task.vectors(1, modified=True)
    # input 1s at 24..31, completion at 32..39 (modified: 40..47); noise flips bits 0 and 25
    assert set(np.flatnonzero(given)) == set(range(24, 32)) - {25} | {0}
    assert set(np.flatnonzero(full)) == set(range(24, 40)) - {25} | {0}
    assert set(np.flatnonzero(changed)) == (set(range(24, 32)) | set(range(40, 48))) - {25} | {0}
    out = tmp_path / "a.json"
    assert script.main(["--seeds", "1", "--levels", "300", "--checkpoints", "1", "--rounds", "1",
                        "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["table"]) == {"none", "300", "full"}
    assert set(report["paired"]) == {"300-none", "300-full"}
    assert report["paired"]["300-none"]["1"]["runs"] == 1
    assert "paired difference" in capsys.readouterr().out


def test_paper_task_open_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    """m = 4 fits the generator in 50 bits; clean expected outputs drop only the noise."""
    script = paper_associative
    # m = 8: the third pattern (k mod 3 = 2) starts at 48 and wraps round to 0..5
    given, _ = script.ThesisTask().clean_vectors(2, modified=False)
    assert set(np.flatnonzero(given)) == {48, 49, 0, 1, 2, 3, 4, 5}
    # ... or, left out past bit 50, keeps 48 and 49 and nothing to complete
    given, full = script.ThesisTask(overflow="drop").clean_vectors(2, modified=False)
    assert set(np.flatnonzero(given)) == set(np.flatnonzero(full)) == {48, 49}
    # m = 4: patterns at 0, 12 and 24, all inside 50 bits; k mod 3 = 1 is the modified one
    small = script.ThesisTask(m=4)
    given, full = small.clean_vectors(2, modified=True)
    assert set(np.flatnonzero(given)) == set(range(24, 28))
    assert set(np.flatnonzero(full)) == set(range(24, 32))
    _, changed = small.clean_vectors(1, modified=True)
    assert set(np.flatnonzero(changed)) == set(range(12, 16)) | set(range(20, 24))
    noisy = script.ThesisTask().peer(modified=False)
    clean = script.ThesisTask(noisy_expected=False).peer(modified=False)
    np.testing.assert_array_equal(noisy.train, clean.train)
    np.testing.assert_array_equal(noisy.test_input, clean.test_input)
    # the expected outputs differ exactly in the z = 2 noise bits of each test vector
    assert (np.abs(noisy.test_expected - clean.test_expected).sum(axis=1) == 2).all()
    with pytest.raises(ValueError, match="m=30"):
        script.ThesisTask(m=30)
    with pytest.raises(ValueError, match="overflow"):
        script.ThesisTask(overflow="clip")
    with pytest.raises(ValueError, match="modified_residue"):
        script.ThesisTask(modified_residue=3)
