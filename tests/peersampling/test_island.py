"""Two nodes that only know each other ask a bootstrap address and rejoin the overlay.

Seen in a 256-node simulation with churn: node 11 restarted while its bootstrap
(node 8) had every session slot taken and refused it; node 99, whose bootstrap
is node 11, restarted next and contacted it. From then on each held only the
other: the bootstrap is asked only while the view is empty, nobody else knew
them (their entries were dropped when they crashed), so they shuffled with each
other for the rest of the run and waited out the start-together peer wait.
"""

from __future__ import annotations

from peersampling import core
from peersampling.lean import LeanPeriods
from peersampling.simulator import Simulator


def island_beside_a_swarm() -> tuple[Simulator, str, str]:
    sim = Simulator(c=8, l=3, seed=5)
    members = sim.add_nodes(30)
    sim.fill_random_views()
    sim.run(5)
    a = sim.add_node(bootstrap=[members[0]])  # its bootstrap refused it (not modelled)
    b = sim.add_node(bootstrap=[a])  # the other one's bootstrap is the first
    sim.nodes[a].restore([sim.nodes[b].self_descriptor])
    sim.nodes[b].restore([sim.nodes[a].self_descriptor])
    return sim, a, b


def strangers(sim: Simulator, island: set[str]) -> int:
    """Swarm members whose view holds someone of the island."""
    return sum(bool(island & {d.address for d in s.view()})
               for address, s in sim.nodes.items() if address not in island)


def test_an_island_of_two_asks_the_bootstrap_and_joins_the_swarm() -> None:
    sim, a, b = island_beside_a_swarm()
    sim.run(3 * core.ISLAND_REJOIN_EVERY)
    assert len(sim.nodes[a].view()) == sim.c
    assert len(sim.nodes[b].view()) == sim.c
    assert strangers(sim, {a, b}) > 0
    assert sim.largest_component_fraction() == 1.0


def test_a_node_with_a_big_enough_view_asks_no_bootstrap() -> None:
    sim, a, _ = island_beside_a_swarm()
    sim.run(3 * core.ISLAND_REJOIN_EVERY)
    before = sim.nodes[a].stats.bootstrap_attempts
    sim.run(3 * core.ISLAND_REJOIN_EVERY)
    assert sim.nodes[a].stats.bootstrap_attempts == before


def test_the_lean_periods_heal_the_island_as_the_core_does() -> None:
    """The lean engine hands an island's due turn to the core: the same views."""
    core_sim, _, _ = island_beside_a_swarm()
    core_sim.run(3 * core.ISLAND_REJOIN_EVERY)
    lean_sim, _, _ = island_beside_a_swarm()
    engine = LeanPeriods(lean_sim)
    for _ in range(3 * core.ISLAND_REJOIN_EVERY):
        engine.run_period()
    assert lean_sim.largest_component_fraction() == 1.0
    assert lean_sim.graph() == core_sim.graph()
    assert ({a: s.stats for a, s in lean_sim.nodes.items()}
            == {a: s.stats for a, s in core_sim.nodes.items()})
