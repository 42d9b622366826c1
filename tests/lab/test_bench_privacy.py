"""scripts/bench/privacy.py --real: the observer over real nodes on a virtual clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab.bench import privacy as bench_privacy


def test_real_observer_sees_the_model_in_clear_and_noise_inside_epochs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = bench_privacy
    out = tmp_path / "real.json"
    assert bench.main(["--real", "--nodes", "4", "--rounds", "15", "--modes", "none,masked",
                       "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["run"]["nodes"] == 4 and figures["run"]["rounds"] == 15
    assert set(figures["modes"]) == {"none", "masked"}
    for mode in ("none", "masked"):
        r = figures["modes"][mode]
        for key in ("values_inside", "values_inside_hidden_case", "values_outside",
                    "updates_inside", "updates_outside"):
            assert {"count", "mean", "median", "max", "noise_mean", "noise_p99"} <= set(r[key]), key
        assert r["rounds_trained"] == [15] * 4  # every node trained its rounds
        assert r["pushes_observed"] > 0
    none = figures["modes"]["none"]
    # a clear push is the sender's model: its values, less the swarm's average, are the
    # sender's values less that average
    assert none["values_inside"]["count"] == 0
    assert none["values_outside"]["count"] >= 3
    masked = figures["modes"]["masked"]
    # a clear push is the sender's model: the observer reads at least one at |corr| near 1,
    # and the typical one above a masked push inside an epoch (a few clear pushes caught
    # mid-merge read lower: with 4-10 of them a median alone dipped to 0.83 once)
    assert none["values_outside"]["max"] > 0.9
    assert none["values_outside"]["median"] > masked["values_inside"]["mean"]
    # inside a masking epoch a push is not the sender's model (far from 1, the clear level)
    assert masked["values_inside"]["count"] > 0
    assert masked["values_inside"]["mean"] < 0.5
    # against the sender's own part, with its null and positive control: a leak of the
    # sender's values as small as the push's own deviation from the average reads high
    own = masked["own_part_inside"]
    assert {"count", "mean", "null_mean", "leak_mean", "deviation_rms", "own_rms"} <= set(own)
    # A leak that size reads about 0.7 x corr(values, own part), 0.46-0.6 in these runs,
    # and a push inside an epoch reads at the null (about 0.02): the bounds keep margins
    if own["count"]:
        assert own["mean"] < 0.1 < 0.3 < own["leak_mean"]
    if own["count"] and own["attributed_leak_mean"] == own["attributed_leak_mean"]:  # not NaN
        # with the other holders' clear training attributed to them the positive
        # control still reads the sender's values
        assert own["attributed_mean"] < 0.1 < 0.3 < own["attributed_leak_mean"]
    assert masked["replies_merged"] == 0  # masked cores make one-way pushes only
    assert {"outliers", "rest"} == set(masked["deviating_pushes"])
    assert {"merges", "let_through_bounded", "let_through_unbounded",
            "floor_over_radius_bounded"} <= set(masked["clip_floor"])


def test_the_observers_average_leaves_out_pushes_merged_but_not_yet_acknowledged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Between a one-way push's merge and its ack, the share is in both cores' mass:
    # counted twice, a noisy push's own noise entered the "average" the observer
    # compares with, and read as |corr| near 1 (the young-noise tail of issue 12).
    from types import SimpleNamespace

    import numpy as np

    from gossip.pushsum import PushSum

    bench = bench_privacy
    fp, dim = bytes(range(32)), 50
    rng = np.random.default_rng(3)
    cores = [PushSum(fp, rng.normal(0.0, 0.1, dim), privacy="masked", masked_pushes=0,
                     exchange="push", encoding="f64") for _ in range(3)]
    cores[0].add_noise_mass(rng.normal(0.0, 10.0, dim))
    cores[1].add_noise_mass(-cores[0].mass + cores[0].weight * cores[0].values)
    nodes = [SimpleNamespace(identity=SimpleNamespace(node_id=bytes([i + 1]) * 8),
                             cores={"m": c}) for i, c in enumerate(cores)]
    by_id = {n.identity.node_id: (n, None) for n in nodes}
    total = sum(c.mass for c in cores)
    weight = sum(c.weight for c in cores)
    [(_, push)] = cores[0].make_pushes([nodes[2].identity.node_id], 0.0)
    ack = cores[2].on_push(nodes[0].identity.node_id, push, 0.0)
    seen = sum(c.mass for c in cores)
    assert np.abs(seen - total).max() > 1.0  # the push's noisy share counted twice
    fix_mass, fix_weight = bench._in_flight(nodes, "m", by_id)
    assert np.allclose(seen - fix_mass, total, atol=1e-9)
    assert abs(sum(c.weight for c in cores) - fix_weight - weight) < 1e-12
    cores[0].on_ack(nodes[2].identity.node_id, ack, 0.0)
    fix_mass, fix_weight = bench._in_flight(nodes, "m", by_id)
    assert fix_weight == 0.0  # acknowledged: nothing counted twice any more
    assert np.allclose(sum(c.mass for c in cores), total, atol=1e-9)



def test_near_a_fold_the_observer_compares_with_the_average_of_the_epoch_being_mixed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The tail of issue 12 (pushes in the last merges before a fold read |corr| 0.18):
    # half the holders folded their epoch's training into their estimates, so the
    # push-sum average moved by it; a push from a holder still mixing carries none of
    # it, and "push - average" shares that shift with *every* holder's private part,
    # the sender's or not.  The observer leaves this epoch's folds out of the average.
    import numpy as np

    from gossip.pushsum import PushSum

    bench = bench_privacy
    fp, n, dim = bytes(range(32)), 8, 400
    rng = np.random.default_rng(12)
    mixed = rng.normal(0.0, 0.1, dim)  # what the epoch's estimates mixed to (public)
    cores = [PushSum(fp, mixed + rng.normal(0.0, 0.002, dim), privacy="masked",
                     masked_pushes=0, exchange="push") for _ in range(n)]
    ids = [bytes([i + 1]) * 8 for i in range(n)]
    training = rng.normal(0.0, 0.004, dim)  # an epoch of training, alike at every holder
    folds: dict = {}
    for i, c in enumerate(cores):
        # the epoch: noise (mixed away by now: a small residual), training held apart
        c.add_noise_mass(c.weight * (mixed - c.estimate + rng.normal(0.0, 0.001, dim)))
        c.set_values(c.values + training + rng.normal(0.0, 0.002, dim))
        if i >= n // 2:  # half the swarm has folded
            held = c.weight * (c.values - c.estimate)
            assert c.fold_noise()
            folds[(ids[i], "m")] = [(float(i), held)]  # one after the other
    sender = cores[0]
    assert sender.noisy
    q = sender.estimate  # its push: the estimate, none of its own training
    mass = sum(c.mass for c in cores)
    weight = sum(c.weight for c in cores)
    plain = mass / weight
    epoch = (mass - bench._wave_folds(folds, "m", ids[0])) / weight
    floor_mean, floor_p99 = bench.noise_level(dim)
    before = abs(bench._corr(q - plain, sender.values - plain))
    control = abs(bench._corr(q - plain, cores[1].values - plain))
    assert before > 3 * floor_p99 and control > 3 * floor_p99  # the shift, whoever sent
    assert abs(bench._corr(q - epoch, sender.values - epoch)) < floor_p99
    # a push that does carry the sender's values still reads them
    leaked = q + 0.5 * (sender.values - q)
    assert abs(bench._corr(leaked - epoch, sender.values - epoch)) > 0.5
    # a holder that folded is compared with an average holding its own fold and those
    # before it: only the folds made after its own are left out
    first = n // 2
    assert np.array_equal(bench._wave_folds(folds, "m", ids[first]),
                          sum(folds[(ids[i], "m")][0][1] for i in range(first + 1, n)))


def test_the_epochs_average_leaves_out_what_folded_holders_trained_in_clear(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The fold-front tail left after the fix above (ages 38-39 against the sender's own
    # part, only where some holders had folded): a holder training in clear (folded, or
    # not in the epoch yet) moves its estimate and the swarm's sum by each step, none
    # of which the sender's estimate holds.  Steps since the sender's noise began are
    # left out of the average; steps before it (or by the sender) are not.
    import numpy as np

    bench = bench_privacy
    a, b, s = b"a" * 8, b"b" * 8, b"s" * 8
    v = [np.full(3, float(10 ** k)) for k in range(6)]
    folds = {(a, "m"): [(1.0, v[0]), (5.0, v[1])], (b, "m"): [(7.0, v[2])],
             (s, "m"): [(6.0, v[5])]}
    c = b"c" * 8  # never folded
    trained = {(a, "m"): [(3.0, v[3]), (6.0, v[4])], (b, "m"): [(2.0, v[3])],
               (c, "m"): [(1.0, v[0]), (4.5, v[2])], (s, "m"): [(8.0, v[5])]}
    # sender's noise began at 4: a folded at 5 and trained at 6, b folded at 7, c
    # trained at 4.5; the steps at 1-3 were before (part of the epoch); the sender's
    # own never count
    assert np.array_equal(bench._wave_folds(folds, "m", s, 4.0, trained),
                          v[1] + v[4] + v[2] + v[2])
    assert np.array_equal(bench._wave_folds(folds, "m", s, 4.0), v[1] + v[2])


def test_a_push_merged_after_its_sender_folded_is_compared_without_that_fold(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 12's deviating pushes: a push made at noise age 39, merged after its
    # sender folded (its epoch's training joined the sum after the push left).  The
    # mass the sender folded or trained in clear after it made the push is left out
    # of the average; what it logged before the push is not.
    import numpy as np

    bench = bench_privacy
    s, a = b"s" * 8, b"a" * 8
    v = [np.full(2, float(10 ** k)) for k in range(4)]
    folds = {(s, "m"): [(1.0, v[0]), (5.0, v[1])], (a, "m"): [(6.0, v[3])]}
    trained = {(s, "m"): [(2.0, v[0]), (6.0, v[2]), (7.0, None)]}
    # one fold and one clear training of the sender were logged when it made the push
    assert np.array_equal(bench._own_after(folds, trained, s, "m", (1, 1)), v[1] + v[2])
    assert bench._own_after(folds, trained, s, "m", (2, 3)) == 0.0  # nothing since
    assert bench._own_after(folds, trained, a, "m", (1, 0)) == 0.0  # another holder's


def test_the_deviation_is_attributed_to_the_other_holders_it_came_from(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A deviation made of other holders' clear training is explained by it (r2 near 1,
    # the sender's own sources add nothing) and its residual is what is left; a
    # deviation carrying the sender's own part is not explained by the others' and
    # the projection keeps it (the positive control reads through).
    import numpy as np

    bench = bench_privacy
    rng = np.random.default_rng(0)
    parts = [rng.normal(size=500) for _ in range(3)]
    own = rng.normal(size=500)
    rounding = 1e-3 * rng.normal(size=500)
    others = bench._attribute(0.4 * parts[1] + rounding, parts, [own])
    assert others["r2_others"] > 0.99 and others["r2_all"] - others["r2_others"] < 1e-3
    assert abs(others["coef_others"][1] - 0.4) < 1e-2
    assert abs(bench._corr(others["residual"], own)) < 0.2
    leak = bench._attribute(0.4 * parts[1] + 0.05 * own, parts, [own])
    assert leak["r2_others"] < 0.99 and leak["r2_all"] > 0.999
    assert abs(bench._corr(leak["residual"], own)) > 0.9
    assert abs(bench._corr(bench._project_out(0.05 * own, parts), own)) > 0.99
    assert np.array_equal(bench._project_out(own, []), own)
    assert np.array_equal(bench._wave_parts({(b"a", "m"): [(1.0, parts[0])]},
                                            "m", b"s", 0.5,
                                            {(b"a", "m"): [(2.0, parts[1])],
                                             (b"s", "m"): [(2.0, own)]})[b"a"],
                          parts[0] + parts[1])
