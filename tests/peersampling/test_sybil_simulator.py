"""Fake identities in the simulator: the Sybil rules hold where plain Cyclon falls."""

from __future__ import annotations

from lab.sim.sybil_views import add_sybils

from peersampling import Simulator, SybilReport, SybilRules


def attacked(rules: SybilRules | None, seed: int = 3) -> SybilReport:
    # A small, fast form of the acceptance (200 honest / 50 fakes at
    # 12 % of the honest traffic, 60 periods): 60 honest / 15 fakes, 40 periods.
    sim = Simulator(seed=seed, sybil=rules) if rules else Simulator(seed=seed)
    sim.add_nodes(60)
    sim.fill_random_views()
    add_sybils(sim, 15, 0.12)
    sim.run(40)
    return sim.sybil_report()


def accepted(r: SybilReport) -> bool:
    return r.fake_share <= 0.30 and r.only_fakes == 0 and r.honest_connected


def test_sybil_rules_keep_fakes_at_their_share_of_identities() -> None:
    r = attacked(SybilRules())
    assert accepted(r), r
    # the view samples identities: 15 of 74 others are fakes (20 %)
    assert r.fake_share < 0.26
    assert r.without_honest == 0


def test_old_rules_fail_the_same_check() -> None:
    assert not accepted(attacked(None))


def test_the_simulator_says_how_it_treats_signatures() -> None:
    assert "stand-in" in Simulator(sybil=SybilRules()).signature_note
    assert "not used" in Simulator().signature_note


def test_sybil_rules_keep_the_overlay_healthy_without_an_attack() -> None:
    sim = Simulator(seed=5, sybil=SybilRules())
    sim.add_nodes(80)
    sim.fill_random_views()
    sim.run(20)
    sim.crash_fraction(0.5)
    sim.run(40)
    assert sim.dead_links() == 0
    assert sim.largest_component_fraction(strong=True) == 1.0
    assert min(len(s.view()) for s in sim.nodes.values()) >= 10


def holder_views(rules: SybilRules | None, seed: int = 4) -> tuple[int, int, float]:
    # 6 of 60 honest nodes hold a model; 40 fakes claim it too (more than a view holds)
    model = bytes(range(32))
    sim = Simulator(seed=seed, sybil=rules) if rules else Simulator(seed=seed)
    sim.add_nodes(54)
    sim.add_nodes(6, tags={model})
    sim.fill_random_views()
    add_sybils(sim, 40, 0.12, tags={model})
    sim.run(40)
    return sim.model_sybil_report(model)


def test_holder_views_keep_an_honest_holder_under_the_same_rules() -> None:
    holders, without, _ = holder_views(SybilRules())
    assert holders == 6 and without == 0
    # the same check fails under the old rules (this seed: every holder view all fakes)
    assert holder_views(None)[1] > 0
