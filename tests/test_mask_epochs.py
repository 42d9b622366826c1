"""Masking epochs (gossip/mask_epochs.py) driving real push-sum cores.

Exact sums once pair exchanges complete, exact removal of a lost partner's
pair before its noise mixed, determinism of the pair noise, the noise bound
the receivers' magnitude bound follows from, and the setup gate.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gossip.compression import decode
from gossip.errors import InvalidValues
from gossip.mask_epochs import (
    EpochSettings,
    MaskEpochs,
    PairOffer,
    Phase,
    hiding_warning,
    magnitude_bound,
    noise_bound,
    pair_noise,
    pair_seed,
    session_secret,
)
from gossip.pushsum import PushSum
from gossip.validation import MAX_ABS_VALUE

FP = bytes(range(32))
DIM = 40
SETTINGS = EpochSettings(partners=3, mask_scale=10.0, mix_exchanges=30)


def _ids(n: int) -> list[bytes]:
    return [bytes([i + 1]) * 8 for i in range(n)]


def _secret(a: bytes, b: bytes) -> bytes:
    # stands in for session_secret over the pair's session keys
    low, high = sorted((a, b))
    return session_secret(low * 4, high * 4)


class Swarm:
    """N cores and their epochs, messages delivered at once (a test network)."""

    def __init__(self, n: int, seed: int, privacy: str = "masked",
                 settings: EpochSettings = SETTINGS) -> None:
        self.rng = np.random.default_rng(seed)
        self.ids = _ids(n)
        self.initial = {i: self.rng.normal(1.0, 1.0, DIM) for i in self.ids}
        self.cores = {
            i: PushSum(FP, self.initial[i], privacy=privacy, masked_pushes=0, exchange="push",
                       encoding="f64", unmask_after=settings.mix_exchanges,
                       rng=np.random.default_rng(seed + k))
            for k, i in enumerate(self.ids)
        }
        self.epochs = {i: MaskEpochs(i, FP, DIM, settings) for i in self.ids}
        self.alive = set(self.ids)

    def total_mass(self) -> np.ndarray:
        return sum((self.cores[i].mass for i in self.alive), np.zeros(DIM))

    def setup(self, nodes: list[bytes] | None = None) -> None:
        """Every node offers pairs to random others; offers and accepts delivered."""
        for i in nodes or sorted(self.alive):
            others = [p for p in sorted(self.alive) if p != i]
            order = self.rng.permutation(len(others))
            offers = self.epochs[i].start([others[k] for k in order], self.cores[i].weight)
            for peer, offer in offers:
                accept, side = self.epochs[peer].on_offer(i, offer, _secret(i, peer),
                                                          self.cores[peer].weight)
                assert side is not None
                self.cores[peer].add_noise_mass(side)
                mine = self.epochs[i].on_accept(peer, accept, _secret(i, peer))
                self.cores[i].add_noise_mass(mine)
            assert self.epochs[i].phase is Phase.MIXING

    def push(self, src: bytes, dst: bytes) -> None:
        core = self.cores[src]
        assert self.epochs[src].may_push
        weight = core.weight
        for peer, push in core.make_pushes([dst], 0.0):
            ack = self.cores[peer].on_push(src, push, 0.0)
            core.on_ack(peer, ack, 0.0)
            self.epochs[src].note_pushed(peer, push.weight / weight)
        if not core.noisy:
            self.epochs[src].on_folded()

    def mix(self, rounds: int) -> None:
        alive = sorted(self.alive)
        for _ in range(rounds):
            for src in alive:
                dst = alive[int(self.rng.integers(len(alive) - 1))]
                dst = dst if dst != src else alive[-1]
                self.push(src, dst)

    def crash(self, node: bytes, remove: bool = True) -> None:
        self.alive.discard(node)
        if not remove:
            return
        for i in self.alive:
            back = self.epochs[i].partner_lost(node)
            if back is not None:
                self.cores[i].add_noise_mass(back, fresh=False)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


# ------------------------------------------------------------------ seeds
def test_session_secret_is_the_same_at_both_ends_and_pair_seeds_are_separated() -> None:
    k1, k2 = bytes(range(32)), bytes(range(32, 64))
    assert session_secret(k1, k2) == session_secret(k2, k1)
    s = session_secret(k1, k2)
    a, b = b"a" * 8, b"b" * 8
    base = pair_seed(s, FP, 1, a, b)
    assert base == pair_seed(s, FP, 1, a, b)  # deterministic
    others = {
        pair_seed(s, FP, 2, a, b),  # another epoch
        pair_seed(s, bytes(32), 1, a, b),  # another model
        pair_seed(s, FP, 1, b, a),  # the other end initiated
        pair_seed(session_secret(k1, bytes(32)), FP, 1, a, b),  # another session
    }
    assert base not in others and len(others) == 4
    with pytest.raises(InvalidValues, match="distinct"):
        pair_seed(s, FP, 1, a, a)


def test_pair_sides_cancel_exactly_and_are_reproducible() -> None:
    a, b = _ids(2)
    ea, eb = MaskEpochs(a, FP, DIM, SETTINGS), MaskEpochs(b, FP, DIM, SETTINGS)
    [(peer, offer)] = ea.start([b], weight=0.5)
    accept, side_b = eb.on_offer(a, offer, _secret(a, b), weight=2.0)
    side_a = ea.on_accept(b, accept, _secret(a, b))
    assert side_b is not None
    assert np.array_equal(side_a, -side_b)  # bit-exact: the sum of mass does not move
    # amplitude: mask_scale times the smaller weight
    unit = pair_noise(pair_seed(_secret(a, b), FP, 1, a, b), DIM)
    assert np.array_equal(side_a, 10.0 * 0.5 * unit)
    # a retransmitted offer is answered again without a second side
    again, none = eb.on_offer(a, offer, _secret(a, b), weight=2.0)
    assert again == accept and none is None


# ------------------------------------------------------------- exact sums
def test_sum_is_exact_after_setup_and_the_average_is_reached_after_the_fold() -> None:
    swarm = Swarm(8, seed=1)
    before = swarm.total_mass()
    swarm.setup()
    assert all(swarm.cores[i].noisy for i in swarm.ids)
    assert _rel(swarm.total_mass(), before) < 1e-12
    # the pushes carry obfuscated values: far from the trained ones
    assert max(float(np.abs(swarm.cores[i].estimate - swarm.cores[i].values).max())
               for i in swarm.ids) > 1.0
    swarm.mix(400)
    assert not any(swarm.cores[i].noisy for i in swarm.ids)  # every epoch folded
    assert all(swarm.epochs[i].phase is Phase.CLEAR for i in swarm.ids)
    mean = before / len(swarm.ids)
    for i in swarm.ids:
        assert _rel(swarm.cores[i].values, mean) < 1e-9


def test_lost_partner_removed_before_mixing_leaves_no_residual() -> None:
    swarm = Swarm(8, seed=2)
    crashed = swarm.ids[3]
    swarm.setup()
    pairs = sum(swarm.epochs[i].pairs_with(crashed) for i in swarm.ids)
    assert pairs >= SETTINGS.partners  # its own offers, and those it accepted
    survivors_before = sum((swarm.initial[i] for i in swarm.ids if i != crashed), np.zeros(DIM))
    swarm.crash(crashed)
    assert sum(swarm.epochs[i].removed_exact for i in swarm.alive) == pairs
    assert _rel(swarm.total_mass(), survivors_before) < 1e-12
    swarm.mix(400)
    mean = survivors_before / 7
    for i in swarm.alive:
        assert _rel(swarm.cores[i].values, mean) < 1e-9


def test_without_the_removal_the_crash_shifts_the_survivors() -> None:
    # the control for the test above: the removal is what makes it exact
    swarm = Swarm(8, seed=2)
    crashed = swarm.ids[3]
    swarm.setup()
    survivors_before = sum((swarm.initial[i] for i in swarm.ids if i != crashed), np.zeros(DIM))
    swarm.crash(crashed, remove=False)
    assert _rel(swarm.total_mass(), survivors_before) > 0.1


def test_pushes_between_the_pair_only_keep_the_removal_exact() -> None:
    # the survivor pushed to its partner before the crash: the share it pushed
    # left with the partner, and it removes exactly the part of its side it kept
    masked, clear = Swarm(4, seed=3), Swarm(4, seed=3, privacy="none")
    a, b = masked.ids[0], masked.ids[1]
    ea, eb = masked.epochs[a], masked.epochs[b]
    [(_, offer)] = ea.start([b], masked.cores[a].weight)
    accept, side = eb.on_offer(a, offer, _secret(a, b), masked.cores[b].weight)
    assert side is not None
    masked.cores[b].add_noise_mass(side)
    masked.cores[a].add_noise_mass(ea.on_accept(b, accept, _secret(a, b)))
    for swarm in (masked, clear):
        swarm.push(a, b)
        swarm.push(a, b)
        swarm.crash(b)
    assert ea.removed_exact == 1 and ea.removed_mixing == 0
    assert _rel(masked.total_mass(), clear.total_mass()) < 1e-12


def test_pushing_elsewhere_marks_the_pair_as_mixing() -> None:
    swarm = Swarm(4, seed=4)
    swarm.setup()
    a = swarm.ids[0]
    partner = swarm.epochs[a].partners_of_epoch()[0]
    elsewhere = next(i for i in swarm.ids if i not in (a, partner))
    swarm.push(a, elsewhere)
    swarm.crash(partner)
    assert swarm.epochs[a].removed_mixing >= 1


# ---------------------------------------------------------------- bounds
def test_honest_estimates_stay_within_the_noise_bound_with_uneven_weights() -> None:
    # uneven weights: a pair's amplitude follows the smaller weight, so the
    # noise in a light node's estimate does not grow as 1 / w
    swarm = Swarm(10, seed=5)
    for k, i in enumerate(swarm.ids):
        w = 0.01 if k % 3 == 0 else 1.0
        swarm.cores[i] = PushSum(FP, swarm.initial[i], weight=w, privacy="masked",
                                 masked_pushes=0, exchange="push", encoding="f64",
                                 unmask_after=SETTINGS.mix_exchanges)
    swarm.setup()
    bound = noise_bound(SETTINGS)
    value_bound = max(float(np.abs(v).max()) for v in swarm.initial.values())
    worst = 0.0
    for _ in range(60):
        swarm.mix(1)
        for i in swarm.ids:
            worst = max(worst, float(np.abs(swarm.cores[i].estimate).max()))
    assert worst <= value_bound + bound
    assert magnitude_bound(SETTINGS, value_bound) < MAX_ABS_VALUE


def test_the_magnitude_bound_still_rejects_the_poisoner() -> None:
    # gossip/attacks.py's Poisoner pushes 1e5 x N(0, 1): its largest value in a
    # vector of a few hundred exceeds the bound that follows from the masks
    poison = 1e5 * np.random.default_rng(0).standard_normal(500)
    assert float(np.abs(poison).max()) > magnitude_bound(SETTINGS, value_bound=100.0)


# ------------------------------------------------------------ the protocol
def test_no_data_push_before_every_offer_is_answered() -> None:
    a, b, c = _ids(3)
    ea = MaskEpochs(a, FP, DIM, EpochSettings(partners=2))
    assert ea.due and ea.may_push
    offers = ea.start([b, c, a], weight=1.0)
    assert [p for p, _ in offers] == [b, c]
    assert not ea.may_push
    _, eb = offers[0][1], MaskEpochs(b, FP, DIM)
    accept, _ = eb.on_offer(a, offers[0][1], _secret(a, b), 1.0)
    ea.on_accept(b, accept, _secret(a, b))
    assert not ea.may_push
    ea.offer_failed(c)
    assert ea.may_push and ea.phase is Phase.MIXING and ea.live_pairs == 1
    with pytest.raises(InvalidValues, match="no such offer"):
        ea.on_accept(b, accept, _secret(a, b))


def test_epochs_recur_after_clear_rounds() -> None:
    a, b = _ids(2)
    ea = MaskEpochs(a, FP, DIM, EpochSettings(partners=1, clear_rounds=2))
    offers = ea.start([b], 1.0)
    accept, _ = MaskEpochs(b, FP, DIM).on_offer(a, offers[0][1], _secret(a, b), 1.0)
    ea.on_accept(b, accept, _secret(a, b))
    ea.on_folded()
    assert not ea.due
    ea.on_round()
    ea.on_round()
    assert ea.due
    assert ea.start([b], 1.0)[0][1].epoch == 2


def test_offers_beyond_max_accepted_are_refused() -> None:
    ids = _ids(4)
    eb = MaskEpochs(ids[0], FP, DIM, EpochSettings(max_accepted=2))
    for peer in ids[1:3]:
        eb.on_offer(peer, PairOffer(FP, 1, 1.0), _secret(ids[0], peer), 1.0)
    with pytest.raises(InvalidValues, match="already 2"):
        eb.on_offer(ids[3], PairOffer(FP, 1, 1.0), _secret(ids[0], ids[3]), 1.0)


def test_hiding_warning_for_models_with_few_holders() -> None:
    warning = hiding_warning(2)
    assert warning is not None and "two nodes only" in warning
    assert hiding_warning(3) is not None
    assert hiding_warning(4) is None


def test_noise_mass_needs_the_masked_mode() -> None:
    core = PushSum(FP, np.zeros(DIM))
    with pytest.raises(InvalidValues, match="masked"):
        core.add_noise_mass(np.ones(DIM))


_OPS = st.lists(
    st.tuples(st.sampled_from(["push", "train", "crash"]), st.integers(0, 5),
              st.integers(0, 5)),
    min_size=1, max_size=60,
)


@settings(max_examples=25, deadline=None)
@given(ops=_OPS, seed=st.integers(0, 2**16), light=st.integers(0, 5))
def test_property_no_honest_push_exceeds_the_bound_from_the_mask_scale(
        ops: list[tuple[str, int, int]], seed: int, light: int) -> None:
    swarm = Swarm(6, seed=seed)
    # one light node: its weight is where a 1 / w blow-up would show
    ids = swarm.ids
    swarm.cores[ids[light]] = PushSum(FP, swarm.initial[ids[light]], weight=0.003,
                                      privacy="masked", masked_pushes=0, exchange="push",
                                      encoding="f64", unmask_after=SETTINGS.mix_exchanges)
    swarm.setup()
    step = 0.01
    value_bound = max(float(np.abs(v).max()) for v in swarm.initial.values()) + step * len(ops)
    bound = magnitude_bound(SETTINGS, value_bound)
    for op, i, j in ops:
        alive = sorted(swarm.alive)
        src, dst = alive[i % len(alive)], alive[j % len(alive)]
        if op == "push" and src != dst:
            for peer, push in swarm.cores[src].make_pushes([dst], 0.0):
                assert float(np.abs(decode(push.values, DIM)).max()) <= bound
                swarm.cores[src].on_ack(peer, swarm.cores[peer].on_push(src, push, 0.0), 0.0)
        elif op == "train":
            core = swarm.cores[src]
            core.set_values(core.values + step * np.sign(np.sin(np.arange(DIM) + j)))
        elif op == "crash" and len(alive) > 3:
            swarm.crash(src)
    assert all(swarm.cores[i].counters.rejected == 0 for i in swarm.alive)


def test_a_second_epoch_draws_new_pairs_and_keeps_the_sum_exact() -> None:
    swarm = Swarm(6, seed=6)
    before = swarm.total_mass()
    swarm.setup()
    first = {i: swarm.cores[i].estimate - swarm.cores[i].values for i in swarm.ids}
    swarm.mix(120)
    assert all(swarm.epochs[i].due for i in swarm.ids)
    swarm.setup()
    assert all(swarm.epochs[i].epoch == 2 for i in swarm.ids)
    assert _rel(swarm.total_mass(), before) < 1e-12
    second = {i: swarm.cores[i].estimate - swarm.cores[i].values for i in swarm.ids}
    assert all(not np.allclose(first[i], second[i]) for i in swarm.ids)
    swarm.mix(200)
    for i in swarm.ids:
        assert _rel(swarm.cores[i].values, before / 6) < 1e-9


def _partner_view(swarm: Swarm, src: bytes, dst: bytes) -> float:
    """|corr| between src's trained values and its push once dst projects its known pairs out."""
    [(_, push)] = swarm.cores[src].make_pushes([dst], 0.0)
    sent = decode(push.values, DIM)
    basis = np.stack(swarm.epochs[dst].sides_with(src), axis=1)
    coef, *_ = np.linalg.lstsq(basis, sent, rcond=None)
    seen = sent - basis @ coef
    z = swarm.cores[src].values
    return abs(float(np.corrcoef(seen, z)[0, 1]))


def test_two_holders_cannot_hide_from_each_other_but_more_can() -> None:
    # what hiding_warning says: the only partner knows every pair of the sender
    pair = Swarm(2, seed=7)
    pair.setup()
    assert _partner_view(pair, pair.ids[0], pair.ids[1]) > 0.9
    crowd = Swarm(8, seed=7)
    crowd.setup()
    src = crowd.ids[0]
    dst = crowd.epochs[src].partners_of_epoch()[0]
    assert _partner_view(crowd, src, dst) < 0.5
