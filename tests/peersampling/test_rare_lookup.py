"""Holders of a rare model keep looking for partners until they know a few (issue 17)."""

from __future__ import annotations

import hashlib
import random

import pytest

from peersampling import Descriptor, PeerSampler, ShuffleReply, Simulator

M = hashlib.sha256(b"rare-model").digest()


def desc(i: int, tags: frozenset[bytes] = frozenset()) -> Descriptor:
    return Descriptor(b"id-%d" % i, f"10.0.0.{i}:7400", 0, tags)


def holder_with_one_partner(**options: object) -> PeerSampler:
    s = PeerSampler(desc(0, frozenset({M})), c=20, l=5, rng=random.Random(1),
                    **options)  # type: ignore[arg-type]
    s.restore([desc(i) for i in range(1, 21)] + [desc(99, frozenset({M}))])
    assert len(s.model_view(M)) == 1
    return s


def lookups_per_period(s: PeerSampler, periods: int) -> list[int]:
    """Lookups sent each period (requests for the model's view to a non-holder); every
    request gets an empty answer, so the views keep their entries."""
    holders = {d.address for d in s.model_view(M)}
    counts = []
    for t in range(1, periods + 1):
        requests = s.start_shuffles(float(t))
        counts.append(sum(1 for a, r in requests if r.view == M and a not in holders))
        for a, r in requests:
            s.on_reply(a, r, ShuffleReply((), r.view), float(t))
    return counts


def test_a_small_holder_group_keeps_asking_every_period() -> None:
    s = holder_with_one_partner()
    # one partner known, fewer than l = 5: a rare model, fanout 3 every period
    # (before issue 17: one lookup every 4 periods once a partner was known)
    assert lookups_per_period(s, 4) == [3, 3, 3, 3]


def test_lookup_small_zero_is_the_previous_rule() -> None:
    s = holder_with_one_partner(lookup_small=0)
    assert sum(lookups_per_period(s, 8)) == 2
    with pytest.raises(ValueError, match="lookup_small"):
        PeerSampler(desc(0), rng=random.Random(0), lookup_small=-1)


def test_a_holder_group_of_l_or_more_asks_now_and_then() -> None:
    s = PeerSampler(desc(0, frozenset({M})), c=20, l=5, rng=random.Random(1))
    s.restore([desc(i) for i in range(1, 21)] + [desc(90 + i, frozenset({M})) for i in range(5)])
    assert len(s.model_view(M)) == 5
    assert len(s.model_view(M)) == 5
    assert sum(lookups_per_period(s, 8)) == 2


@pytest.mark.parametrize("seed", [1, 2])
def test_three_holders_among_400_find_each_other(seed: int) -> None:
    sim = Simulator(c=20, l=5, seed=seed)
    addresses = sim.add_nodes(400)
    sim.fill_random_views()
    sim.run(3)
    holders = [sim.nodes[a] for a in random.Random(seed).sample(addresses, 3)]
    for h in holders:
        h.set_tags({M})
    others = {h.node_id: {o.node_id for o in holders} - {h.node_id} for h in holders}
    for _ in range(15):
        sim.run_period()
        if all(others[h.node_id] <= {d.node_id for d in h.model_view(M)} for h in holders):
            break
    else:
        pytest.fail("the three holders did not all know each other within 15 periods")
