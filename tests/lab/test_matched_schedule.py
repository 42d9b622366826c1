"""The matched partner schedule and the waiting side's ledger (sans-IO).

Every round must be a matching (so push-pull exchanges stay doubly
stochastic), the rounds together must connect every member, a power of two
must average exactly in ``ceil(log2 n)`` rounds, and the ledger's counting
must neither deadlock after a skipped meeting nor count one push twice.
"""

from __future__ import annotations

import numpy as np
import pytest
from lab.averaging.schedule import MeetingLedger, matched_partner, schedule_dimensions

P = b"p" * 32


def _round(members: int, k: int) -> list[int | None]:
    return [matched_partner(i, members, k) for i in range(members)]


@pytest.mark.parametrize("members", [2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 17])
def test_every_round_is_a_matching_and_the_rounds_connect_everyone(members: int) -> None:
    dims = schedule_dimensions(members)
    assert 2 ** (dims - 1) < members <= 2**dims
    linked = {0}
    for k in range(2 * dims):
        partners = _round(members, k)
        for i, j in enumerate(partners):
            if j is None:
                assert i ^ (1 << (k % dims)) >= members  # sits out only without a partner
                continue
            assert j != i and partners[j] == i  # symmetric: one exchange per member
        assert _round(members, k + dims) == partners  # the schedule repeats every d rounds
        for _ in range(members):  # spread reachability along this round's pairs
            linked |= {j for i, j in enumerate(partners) if i in linked and j is not None}
    assert linked == set(range(members))
    if members == 2**dims:
        assert all(j is not None for k in range(dims) for j in _round(members, k))


def _pairwise_averaging(members: int, rounds: int) -> float:
    x = np.random.default_rng(members).standard_normal((members, 3))
    mean = x.mean(axis=0)
    for k in range(rounds):
        partners = _round(members, k)
        for i, j in enumerate(partners):
            if j is not None and i < j:
                x[i] = x[j] = (x[i] + x[j]) / 2
    return float(np.abs(x - mean).max())


def test_a_power_of_two_averages_exactly_in_one_sweep_others_converge() -> None:
    for members in (2, 4, 8, 16):
        assert _pairwise_averaging(members, schedule_dimensions(members)) < 1e-12
    for members in (3, 5, 6):
        d = schedule_dimensions(members)
        assert _pairwise_averaging(members, d) > 1e-3  # not exact after one sweep
        assert _pairwise_averaging(members, 40 * d) < 1e-9  # but converging


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="members"):
        matched_partner(0, 1, 0)
    with pytest.raises(ValueError, match="index"):
        matched_partner(3, 3, 0)
    with pytest.raises(ValueError, match="round_index"):
        matched_partner(0, 3, -1)


def test_ledger_credits_early_pushes() -> None:
    book = MeetingLedger()
    book.merged(P)  # the partner ran ahead: its push came before the meeting
    book.enter(P)
    assert book.satisfied(P)
    book.enter(P)
    assert not book.satisfied(P)
    book.merged(P)
    assert book.satisfied(P) and book.credit(P) == 0


def test_ledger_forgives_a_push_that_never_comes() -> None:
    book = MeetingLedger()
    book.enter(P)
    assert not book.satisfied(P)
    book.forgive(P)  # the meeting expired; the partner gave its push up
    book.enter(P)  # the next meeting needs the next push, not the lost one too
    assert not book.satisfied(P)
    book.merged(P)
    assert book.satisfied(P)
    for _ in range(3):  # and so on: no debt accumulates
        book.enter(P)
        book.merged(P)
        assert book.satisfied(P)


def test_ledger_counts_a_late_push_for_one_meeting_only() -> None:
    book = MeetingLedger()
    book.enter(P)
    book.forgive(P)
    book.merged(P)  # the expired meeting's push arrives late: merged, credit
    assert book.credit(P) == 1
    book.enter(P)
    assert book.satisfied(P)  # it ends the next meeting ...
    book.enter(P)
    assert not book.satisfied(P)  # ... and no other
    book.merged(P)
    assert book.satisfied(P)
