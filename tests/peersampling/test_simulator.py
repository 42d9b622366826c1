"""The seeded simulator and the overlay metrics (small sizes, fast)."""

from __future__ import annotations

import hashlib

from peersampling import (
    Simulator,
    dead_links,
    in_degree_stats,
    largest_strong_component,
    largest_weak_component,
)

MODEL = hashlib.sha256(b"semi-local").digest()


def test_graph_metrics_on_a_known_graph() -> None:
    g = {"a": ["b"], "b": ["a", "x"], "c": ["d"], "d": [], "e": ["a"]}
    assert largest_weak_component(g) == 3  # a, b, e
    assert largest_strong_component(g) == 2  # a <-> b
    assert dead_links(g) == 1  # b -> x
    st = in_degree_stats(g)
    assert st.mean == 4 / 5 and st.min == 0 and st.max == 2


def test_same_seed_same_run_different_seed_different_run() -> None:
    def run(seed: int) -> dict[str, list[str]]:
        sim = Simulator(c=8, l=3, seed=seed, loss=0.05)
        sim.add_nodes(60)
        sim.fill_random_views()
        sim.run(10)
        return sim.graph()

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_overlay_stays_balanced_and_heals_after_crash() -> None:
    sim = Simulator(c=10, l=4, seed=1)
    sim.add_nodes(200)
    sim.fill_random_views()
    sim.run(30)
    st = sim.in_degree_stats()
    assert st.mean == 10.0  # every view full, and in-degrees sum to out-degrees
    assert st.std < 3.16  # tighter than the random graph we started from (binomial)
    sim.crash_fraction(0.5)
    dead0 = sim.dead_links()
    assert dead0 > 500
    sim.run(30)
    assert sim.dead_links() < dead0 / 10
    assert sim.largest_component_fraction() == 1.0


def test_join_through_a_single_seed_connects_everyone() -> None:
    sim = Simulator(c=8, l=3, seed=2)
    seed = sim.add_node()
    sim.add_nodes(150, bootstrap=[seed])
    sim.run(15)
    assert sim.largest_component_fraction(strong=True) == 1.0
    assert all(len(s.view()) == 8 for s in sim.nodes.values())
    assert sim.in_degree_stats().max < 40  # the seed is no longer a hub


def test_three_holders_among_many_find_each_other() -> None:
    sim = Simulator(c=8, l=3, seed=5)
    sim.add_nodes(200)
    holders = [sim.add_node(tags=[MODEL]) for _ in range(3)]
    sim.fill_random_views()
    sim.run(40)
    for h in holders:
        known = {d.address for d in sim.nodes[h].model_view(MODEL)}
        assert known == set(holders) - {h}
    for a, s in sim.nodes.items():
        if a not in holders:
            assert s.model_view(MODEL) == []  # only holders keep model views
    picks = {sim.nodes[holders[0]].sample(MODEL).address for _ in range(30)}  # type: ignore[union-attr]
    assert picks == set(holders[1:])


def test_crashed_holder_leaves_the_model_view() -> None:
    sim = Simulator(c=8, l=3, seed=6)
    sim.add_nodes(100)
    holders = [sim.add_node(tags=[MODEL]) for _ in range(4)]
    sim.fill_random_views()
    sim.run(30)
    sim.crash([holders[3]])
    sim.run(15)
    for h in holders[:3]:
        assert {d.address for d in sim.nodes[h].model_view(MODEL)} == set(holders[:3]) - {h}
