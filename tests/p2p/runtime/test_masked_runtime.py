"""The node's masking-epoch glue (p2p/runtime/masking/driver.py) over fake offers.

Noise first, then data: ``prepare`` returns once every offer is answered; an
offer whose delivery is unsure is sent again with the same key and the
responder applies one side only; an unanswered partner is taken as lost and
our side removed; refusals and the join window; the status' warnings.
"""

from __future__ import annotations

import numpy as np
import pytest

from gossip import PushSum
from gossip.errors import InvalidValues, PushRefused, PushUndelivered
from gossip.masking.epochs import EpochSettings, PairAccept, PairOffer
from p2p.runtime.masking.driver import OFFER_ATTEMPTS, NodeMasking

FP = bytes(range(32))
DIM = 16
IDS = [bytes([i + 1]) * 8 for i in range(4)]
SETTINGS = EpochSettings(partners=3, mask_scale=10.0, mix_exchanges=8, clear_rounds=0,
                         join_window=2)


def _core(seed: int) -> PushSum:
    values = np.random.default_rng(seed).normal(0.0, 0.1, DIM)
    return PushSum(FP, values, privacy="masked", masked_pushes=0, exchange="push",
                   encoding="f64", unmask_after=SETTINGS.mix_exchanges)


class Net:
    """Every node's masking over one in-process 'network' with scripted failures."""

    def __init__(self, n: int = 4) -> None:
        self.cores = {i: {"global": _core(k)} for k, i in enumerate(IDS[:n])}
        self.masking: dict[bytes, NodeMasking] = {}
        self.unsure: dict[bytes, int] = {}  # peer -> sends whose answer is lost
        self.delivered: list[bytes] = []
        for me in IDS[:n]:
            others = [p for p in IDS[:n] if p != me]
            self.masking[me] = NodeMasking(
                me, SETTINGS, self.cores[me], lambda fp, k, o=others: o[:k],
                self._sender(me), lambda fp, o=others: len(o))

    def _sender(self, me: bytes):  # type: ignore[no-untyped-def]
        async def send(peer: bytes, offer: PairOffer) -> PairAccept:
            self.delivered.append(peer)
            try:
                accept = self.masking[peer].on_offer(me, offer)
            except InvalidValues as exc:
                raise PushRefused(str(exc)) from None
            if self.unsure.get(peer, 0) > 0:
                self.unsure[peer] -= 1
                raise PushUndelivered("answer lost", maybe_delivered=True)
            return accept
        return send

    def mass(self) -> np.ndarray:
        return sum((c["global"].mass for c in self.cores.values()), np.zeros(DIM))


async def test_prepare_agrees_every_pair_before_returning_and_the_sum_is_exact() -> None:
    net = Net()
    before = net.mass()
    a = IDS[0]
    await net.masking[a].prepare("global", net.cores[a]["global"])
    ep = net.masking[a].epochs("global")
    assert ep.phase.value == "mixing" and ep.live_pairs == 3 and not ep.pending_offers
    assert all(net.cores[i]["global"].noisy for i in IDS)
    np.testing.assert_allclose(net.mass(), before, rtol=0, atol=1e-12)


async def test_an_unsure_offer_is_sent_again_and_applied_once() -> None:
    net = Net()
    before = net.mass()
    a, b = IDS[0], IDS[1]
    net.unsure[b] = OFFER_ATTEMPTS - 1  # answers lost but the last
    await net.masking[a].prepare("global", net.cores[a]["global"])
    assert net.delivered.count(b) == OFFER_ATTEMPTS
    assert net.masking[b].epochs("global").live_pairs == 1  # one side, not three
    np.testing.assert_allclose(net.mass(), before, rtol=0, atol=1e-12)


async def test_a_partner_that_never_answers_is_lost_and_its_side_removed() -> None:
    net = Net()
    a, b = IDS[0], IDS[1]
    net.unsure[b] = OFFER_ATTEMPTS  # it applied its side, we never hear back
    await net.masking[a].prepare("global", net.cores[a]["global"])
    ep = net.masking[a].epochs("global")
    assert ep.pairs_with(b) == 0 and not ep.pending_offers and ep.live_pairs == 2
    # b crashed in the meantime (as a lost partner does): the survivors' sum is exact
    survivors = [i for i in IDS if i != b]
    mass = sum((net.cores[i]["global"].mass for i in survivors), np.zeros(DIM))
    clear = sum((_core(k).mass for k, i in enumerate(IDS) if i != b), np.zeros(DIM))
    np.testing.assert_allclose(mass, clear, rtol=0, atol=1e-12)


async def test_lost_partner_after_failed_pushes_is_removed_exactly() -> None:
    net = Net()
    a, b = IDS[0], IDS[1]
    await net.masking[a].prepare("global", net.cores[a]["global"])
    masking = net.masking[a]
    masking.unreachable(b, surely=False, failures=1)  # one unsure failure: not yet
    assert masking.epochs("global").pairs_with(b) == 1
    masking.unreachable(b, surely=True, failures=1)  # connection refused: lost
    assert masking.epochs("global").pairs_with(b) == 0
    survivors = [i for i in IDS if i != b]
    mass = sum((net.cores[i]["global"].mass for i in survivors), np.zeros(DIM))
    clear = sum((_core(k).mass for k, i in enumerate(IDS) if i != b), np.zeros(DIM))
    np.testing.assert_allclose(mass, clear, rtol=0, atol=1e-12)


async def test_old_noise_refuses_fresh_pairs_and_the_epoch_goes_on_with_the_rest() -> None:
    net = Net()
    a, b = IDS[0], IDS[1]
    busy = net.cores[b]["global"]
    busy.add_noise_mass(np.ones(DIM))
    for sender in IDS[2:4]:  # merges age b's noise past the window (2)
        busy.on_push(sender, net.cores[sender]["global"].make_pushes([b], 0.0)[0][1], 0.0)
    assert busy.noise_age >= SETTINGS.join_window
    await net.masking[a].prepare("global", net.cores[a]["global"])
    ep = net.masking[a].epochs("global")
    assert ep.pairs_with(b) == 0 and ep.live_pairs == 2
    assert net.masking[b].epochs("global").refused == 1
    with pytest.raises(InvalidValues, match="join window"):
        net.masking[b].on_offer(a, PairOffer(FP, 9, 1.0, bytes(range(1, 33))))


async def test_status_warns_when_too_few_holders_hide_a_push() -> None:
    two = Net(2)
    status = two.masking[IDS[0]].status()["global"]
    assert status["holders"] == 2 and "two nodes only" in str(status["warning"])
    four = Net(4)
    assert four.masking[IDS[0]].status()["global"]["warning"] is None


def test_p2p_status_renders_the_epoch_state_and_the_warning() -> None:
    from p2p.cli.render import fmt_masking

    status = Net(2).masking[IDS[0]].status()
    text = fmt_masking(status)
    assert text.startswith("global: clear, epoch 0, 0 pairs, 0 folds, 2 holders")
    assert "WARNING: model held by two nodes only" in text
    assert "WARNING" not in fmt_masking(Net(4).masking[IDS[0]].status())


async def test_a_peer_claiming_young_noise_cannot_hold_the_fold_back_for_good() -> None:
    # a liar's noisy pushes all claim noise_age 0: the receiver keeps the younger age,
    # so its own fold (mix_exchanges merges) never comes; max_noisy_rounds bounds it
    settings = EpochSettings(partners=3, mask_scale=10.0, mix_exchanges=8,
                             clear_rounds=10**6, join_window=2, max_noisy_rounds=5)
    core, liar = _core(0), _core(1)
    liar.add_noise_mass(np.full(DIM, 5.0))  # holds noise, receives nothing: age stays 0

    async def never(peer: bytes, offer: PairOffer) -> PairAccept:
        raise AssertionError("no epoch is due")

    masking = NodeMasking(IDS[0], settings, {"global": core}, lambda fp, k: [], never,
                          lambda fp: 3)
    rounds_noisy = 0
    for _ in range(20):
        [(_, push)] = liar.make_pushes([IDS[0]], 0.0)
        assert push.noisy and push.noise_age == 0
        liar.on_ack(IDS[0], core.on_push(IDS[1], push, 0.0), 0.0)
        mass = core.mass
        await masking.prepare("global", core)
        assert np.array_equal(core.mass, mass)  # a fold moves no mass
        if not core.noisy:
            break
        rounds_noisy += 1
        assert core.noise_age < settings.mix_exchanges  # the age rule alone never folds
    assert not core.noisy and rounds_noisy == settings.max_noisy_rounds - 1
    assert core.counters.unmasks == 1
    assert masking.status()["global"]["forced_folds"] == 1


async def test_a_fold_followed_by_fresh_noise_before_a_settle_still_closes_the_epoch() -> None:
    # A fold can happen at a merge (PushSum.boundary_fold_age) and fresh noise can
    # arrive before the driver's next settle: the glue reads the core's fold count,
    # so the folded pairs are over and the fresh pair is the only live one.
    net = Net()
    a = IDS[0]
    core = net.cores[a]["global"]
    await net.masking[a].prepare("global", core)
    ep = net.masking[a].epochs("global")
    assert ep.live_pairs == 3
    assert core.boundary_fold_age == SETTINGS.boundary_fold_age  # set by the glue
    assert core.fold_noise()  # folded between two settles
    # a pair offered by another holder arrives before the settle (fresh noise)
    other = NodeMasking(IDS[3], SETTINGS, {"global": _core(9)}, lambda fp, k: [a],
                        net._sender(IDS[3]), lambda fp: 3)
    net.masking[IDS[3]] = other
    await other.prepare("global", other._cores["global"])
    assert core.noisy
    net.masking[a].settle("global", core)
    assert ep.live_pairs == 1 and ep.phase.value == "clear" and ep.folds == 1
