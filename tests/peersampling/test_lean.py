"""LeanPeriods (peersampling/lean.py) against Simulator.run_period: the very same runs.

Each scenario is run twice from the same seed, once with the simulator's own
loop (every exchange through the cores' message handlers) and once with
:class:`~peersampling.lean.LeanPeriods`; everything observable must be equal:
every node's main and model views in order (ids, addresses, ages, tags,
epochs, signatures), its counters, failed-peer memory and random generator
state, and the simulator's counters and generator.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import asdict

import pytest
from lab.sim.sybil_views import add_sybils

from p2p.simulation.gossip_only import GossipScale, GossipScaleConfig
from peersampling import Descriptor, PeerSampler, Simulator, SybilRules
from peersampling.lean import LeanPeriods, sample_address

MODEL = hashlib.sha256(b"lean-model").digest()


def _state(sim: Simulator) -> list[object]:
    """Everything a later period or a reader could see (not hashed: diffs are readable)."""
    def row(d: Descriptor) -> tuple[object, ...]:
        return d.node_id, d.address, d.age, sorted(d.tags), d.epoch, d.signature

    out: list[object] = []
    for address, s in sim.nodes.items():
        out.append((address, [row(d) for d in s.view()],
                    [(m, [row(d) for d in s.model_view(m)]) for m in sorted(s.models)],
                    sorted(asdict(s.stats).items()), sorted(s._failed.items()), s.period,
                    s.rng.getstate()))
    out.append((sim.period, sim.messages, sim.failures, sim.rng.getstate()))
    return out


Scenario = Callable[[Simulator, Callable[[], None]], None]


def _crash_loss_signatures(sim: Simulator, period: Callable[[], None]) -> None:
    sim.add_nodes(150)
    sim.fill_random_views()
    for p in range(16):
        if p == 6:
            sim.crash_fraction(0.3)
        period()


def _holders_joins_and_tag_changes(sim: Simulator, period: Callable[[], None]) -> None:
    addresses = sim.add_nodes(120)
    sim.fill_random_views()
    for p in range(18):
        if p == 3:
            for a in addresses[:3]:
                sim.nodes[a].set_tags({MODEL})
        if p == 7:
            sim.crash([addresses[5], addresses[9]])
            sim.add_nodes(6, bootstrap=[addresses[20]])
        if p == 11:
            sim.nodes[addresses[0]].set_tags(set())
            sim.nodes[addresses[30]].distrust(sim.nodes[addresses[31]].node_id, 3)
        period()


def _sparse_views_and_empty_ones(sim: Simulator, period: Callable[[], None]) -> None:
    sim.add_nodes(40)
    sim.fill_random_views()
    for p in range(14):
        if p == 2:
            sim.crash_fraction(0.6)  # some views empty: those turns fall back to the cores
        period()


def _sybil_adversary(sim: Simulator, period: Callable[[], None]) -> None:
    sim.add_nodes(50)
    sim.fill_random_views()
    add_sybils(sim, 8, 0.1)
    for _ in range(6):
        period()


def _reissued_before_the_engine(sim: Simulator, period: Callable[[], None]) -> None:
    # the last node reissues its descriptor (tags on, then off) after the views were
    # filled: only nodes read before it hold the stale copy, which the cores replace
    addresses = sim.add_nodes(60)
    sim.fill_random_views()
    last = sim.nodes[addresses[-1]]
    last.set_tags({MODEL})
    last.set_tags(set())
    for _ in range(12):
        period()


SCENARIOS: dict[str, tuple[Scenario, dict[str, object]]] = {
    "reissued-before-the-engine": (
        _reissued_before_the_engine, {"c": 8, "l": 4, "seed": 27, "signatures": True}),
    "crash-loss-shared-signatures": (
        _crash_loss_signatures, {"c": 12, "l": 4, "seed": 21, "loss": 0.05, "signatures": True}),
    "crash-per-node-signatures-full-checks": (
        _crash_loss_signatures, {"c": 20, "l": 5, "seed": 22, "signatures": True,
                                 "shared_signature_cache": False, "in_process": False}),
    "holders-joins-tag-changes-distrust": (
        _holders_joins_and_tag_changes, {"c": 10, "l": 4, "seed": 23, "loss": 0.03,
                                         "signatures": True, "in_process": True}),
    "holders-unsigned-no-retries": (
        _holders_joins_and_tag_changes, {"c": 8, "l": 3, "seed": 24, "retries": 0}),
    "sparse-views": (_sparse_views_and_empty_ones, {"c": 4, "l": 2, "seed": 25, "loss": 0.1}),
    "sybil-adversary": (_sybil_adversary, {"c": 8, "l": 3, "seed": 26, "sybil": SybilRules()}),
}


def _run(name: str, lean: bool) -> tuple[list[object], LeanPeriods | None]:
    scenario, options = SCENARIOS[name]
    sim = Simulator(**options)  # type: ignore[arg-type]
    engine: LeanPeriods | None = None

    def period() -> None:
        nonlocal engine
        if not lean:
            sim.run_period()
            return
        if engine is None:  # created once the population is built, as gossip_scale does
            engine = LeanPeriods(sim)
        engine.run_period()

    scenario(sim, period)
    return _state(sim), engine


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_lean_periods_equal_the_simulators(name: str) -> None:
    reference, _ = _run(name, lean=False)
    lean, engine = _run(name, lean=True)
    assert engine is not None
    assert lean == reference
    if name != "sybil-adversary":
        assert engine.lean_turns > engine.core_turns  # the lean path did the work
    if name.startswith("holders"):
        assert engine.handed_over > 0  # exchanges that met a holder went to the cores


def test_a_lean_turn_is_not_a_no_op() -> None:
    """The comparison above can fail: one period less on either side differs."""
    a = Simulator(c=6, l=3, seed=5)
    a.add_nodes(30)
    a.fill_random_views()
    before = _state(a)
    LeanPeriods(a).run_period()
    assert _state(a) != before


def test_sample_address_is_the_cores_sample() -> None:
    sim = Simulator(c=6, l=3, seed=7)
    sim.add_nodes(20)
    sim.fill_random_views()
    twin = Simulator(c=6, l=3, seed=7)
    twin.add_nodes(20)
    twin.fill_random_views()
    for a in sim.nodes:
        for _ in range(5):
            d = twin.nodes[a].sample()
            assert sample_address(sim.nodes[a]) == (d.address if d is not None else None)
    lone = PeerSampler(Descriptor(b"me", "me:1"), c=4, l=2, rng=random.Random(0))
    assert sample_address(lone) is None


def _gossip_doc(engine: str, **extra: object) -> tuple[dict[str, object], GossipScale]:
    cfg = GossipScaleConfig(nodes=120, periods=10, seed=4, holders=3, holders_at=2, crash=0.2,
                            crash_at=5, peer_sampling_engine=engine, **extra)  # type: ignore[arg-type]
    run = GossipScale(cfg)
    return run.run(), run


def test_gossip_only_engines_give_the_same_run() -> None:
    figures = ("in_degree_std", "view_age_mean", "dead_entry_fraction", "pushsum_max_error")
    docs = {}
    for engine in ("cores", "lean"):
        doc, run = _gossip_doc(engine)
        rows = doc["per_period"]
        assert isinstance(rows, list)
        docs[engine] = ([[r[k] for k in figures] for r in rows], doc["holder_lookup"],
                        _state(run.sim), run.estimates().tolist())
        assert doc["peer_sampling_engine"] == engine
        assert isinstance(doc["peer_sampling_engine_note"], str)
    assert docs["lean"] == docs["cores"]


def test_gossip_only_auto_engine() -> None:
    assert GossipScaleConfig().sampling_engine == "lean"
    assert GossipScaleConfig(signatures="per-node").sampling_engine == "cores"
    # the lean path skips field checks: "full" checks keep the cores
    assert GossipScaleConfig(descriptor_checks="full").sampling_engine == "cores"
    with pytest.raises(ValueError, match="peer_sampling_engine"):
        GossipScaleConfig(peer_sampling_engine="numpy")
    doc, _ = _gossip_doc("auto")
    turns = doc["peer_sampling_turns"]
    assert isinstance(turns, dict) and turns["lean"] > 0 and turns["lean_handed_over"] > 0
