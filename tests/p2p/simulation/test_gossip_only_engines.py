"""The gossip-only mode's batched push-sum engine against the reference: every node's PushSum core."""

from __future__ import annotations

import numpy as np
import pytest

from gossip.pushsum import PushSum
from p2p.simulation.gossip_only import (
    GLOBAL_MODEL,
    BatchedPushPull,
    GossipScale,
    GossipScaleConfig,
    lookup_trials,
)


def _pair_runs(**options: object) -> tuple[GossipScale, GossipScale]:
    cfg = {"nodes": 80, "periods": 1, "seed": 5, "holders": 0, **options}
    cores = GossipScale(GossipScaleConfig(pushsum_engine="cores", **cfg))  # type: ignore[arg-type]
    batched = GossipScale(GossipScaleConfig(pushsum_engine="batched", **cfg))  # type: ignore[arg-type]
    return cores, batched


@pytest.mark.parametrize("crash", [0.0, 0.25])
def test_batched_rounds_match_the_pushsum_cores(crash: float) -> None:
    cores, batched = _pair_runs(crash=crash, crash_at=3)
    assert cores.engine == "cores" and batched.engine == "batched"
    for _ in range(10):
        row_c, row_b = cores.step(), batched.step()
        assert row_c["crashed"] == row_b["crashed"]
        # same exchanges: the pairs come from the same samplers and the same order
        assert (cores.pushes, cores.refused) == (batched.pushes, batched.refused)
        weights = np.array([core.weight for core in cores.cores])
        assert batched.batched is not None
        np.testing.assert_array_equal(batched.batched.w, weights)
        # a pair's later requests are deltas against its reference: a few ulps apart
        np.testing.assert_allclose(batched.estimates(), cores.estimates(), rtol=0, atol=1e-13)
    assert cores.pushes > 0 and (crash == 0.0 or cores.refused > 0)


def test_a_node_in_several_exchanges_sees_them_in_order() -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(1.0, 1.0, size=(4, 3))
    # node 0 starts one exchange and answers two; node 1 answers one and starts one
    pairs = [(0, 1), (2, 0), (1, 3), (3, 0), (2, 1)]
    batched = BatchedPushPull(vectors)
    batched.run(pairs)
    assert batched.layers == 3  # (0,1) | (2,0) (1,3) | (3,0) (2,1)
    cores = [PushSum(GLOBAL_MODEL, vectors[i], encoding="f64", delta_encoding="f64",
                     rng=np.random.default_rng(i)) for i in range(4)]
    ids = [bytes([i]) for i in range(4)]
    for i, j in pairs:
        [(_, push)] = cores[i].make_pushes([ids[j]], 0.0)
        cores[i].on_ack(ids[j], cores[j].on_push(ids[i], push, 0.0), 0.0)
    for i in range(4):  # first exchanges of each pair: absolute values, the same bits
        np.testing.assert_array_equal(batched.x[i], cores[i].estimate)
        assert batched.w[i] == cores[i].weight
    # mass is conserved
    np.testing.assert_allclose((batched.w[:, None] * batched.x).sum(axis=0), vectors.sum(axis=0))


def test_engine_choice_follows_what_batched_can_compute() -> None:
    assert GossipScaleConfig().engine == "batched"
    assert GossipScaleConfig(loss=0.1).engine == "cores"
    assert GossipScaleConfig(encoding="f32").engine == "cores"
    with pytest.raises(ValueError, match="pushsum_engine"):
        GossipScaleConfig(pushsum_engine="batched", delta_encoding="int8")
    with pytest.raises(ValueError, match="pushsum_engine"):
        GossipScaleConfig(pushsum_engine="sometimes")
    run = GossipScale(GossipScaleConfig(nodes=30, periods=1, holders=0))
    assert run.run()["pushsum_engine"] == "batched"


def test_lookup_trials_report_medians_over_seeds() -> None:
    trials = lookup_trials(GossipScaleConfig(nodes=60, periods=15, holders_at=2, seed=3), 2)
    assert trials["trials"] == 2 and trials["nodes"] == 60
    runs = trials["runs"]
    assert isinstance(runs, list) and [r["seed"] for r in runs] == [3, 4]
    every = trials["periods_until_every_holder_knows_all"]
    assert isinstance(every, dict) and len(every["values"]) == 2
    assert every["not_reached"] == sum(v is None for v in every["values"])
    with pytest.raises(ValueError, match="trials"):
        lookup_trials(GossipScaleConfig(nodes=10), 0)
