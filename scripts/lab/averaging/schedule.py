"""The matched partner schedule of the averaging peer, and the book of its waiting side.

Sans-IO: no clock, no sockets. :class:`~lab.averaging.peers.AveragingPeer`
drives it.

Schedule: the ``n`` members (sorted node ids) are numbered ``0..n-1``; with
``d = ceil(log2 n)``, in round ``k`` member ``i`` exchanges with member
``i XOR 2**(k mod d)``, the lower index initiating; a member whose partner
index is ``>= n`` sits that round out. Each round is a matching (every member
in at most one exchange), and a push-pull exchange between two members is a
doubly stochastic step, so push-sum stays exact and the rounds together
connect every member (a member ``>= 2**(d-1)`` meets ``i - 2**(d-1)`` in the
top dimension; the members below ``2**(d-1)`` form a full hypercube). For a
power of two ``n`` the ``d`` rounds are the butterfly of an all-reduce: exact
after ``d`` rounds (up to encoding). For other ``n``, members that sit out
mix less per round and averaging is no longer exact after ``d`` rounds: it
converges geometrically, as gossip does.
"""

from __future__ import annotations

__all__ = ["MeetingLedger", "matched_partner", "schedule_dimensions"]


def schedule_dimensions(members: int) -> int:
    """``ceil(log2 members)``: the rounds of one sweep of the matched schedule."""
    if members < 2:
        raise ValueError(f"members: the matched schedule needs at least 2, got {members}")
    return (members - 1).bit_length()


def matched_partner(index: int, members: int, round_index: int) -> int | None:
    """Member ``index``'s partner in round ``round_index``, or None if it sits the round out."""
    dims = schedule_dimensions(members)
    if not 0 <= index < members:
        raise ValueError(f"index: expected 0 <= index < {members}, got {index}")
    if round_index < 0:
        raise ValueError(f"round_index: expected >= 0, got {round_index}")
    partner = index ^ (1 << (round_index % dims))
    return partner if partner < members else None


class MeetingLedger:
    """Per partner: pushes merged from it, and pushes this peer waits for from it.

    The waiting side of a meeting (a round whose partner initiates) is done
    once the partner's merged pushes reach the pushes owed: one more per
    meeting entered (:meth:`enter`). Pushes carry no round number, so the
    counts are cumulative: a push that arrives before its meeting (the
    partner runs ahead; initiators never wait for the waiting side) is credit
    for that meeting. Duplicates (retransmissions re-acknowledged without a
    merge) must not be counted: the owner counts only real merges.

    A meeting that expires without its push is *forgiven* (:meth:`forgive`):
    the debt drops to what was merged, so a push the partner gave up on (never
    delivered) cannot hold every later meeting with it to the deadline. If
    that push does arrive late it is still merged (mass stays exact) and
    counts as credit for the next meeting, which then ends without waiting: no
    push is ever counted for two meetings, and the partner's later pushes are
    merged whenever they come.
    """

    def __init__(self) -> None:
        self._merged: dict[bytes, int] = {}
        self._owed: dict[bytes, int] = {}

    def merged(self, partner: bytes) -> None:
        """A push from ``partner`` was merged (a new one, not a duplicate)."""
        self._merged[partner] = self._merged.get(partner, 0) + 1

    def enter(self, partner: bytes) -> None:
        """A meeting in which ``partner`` initiates begins: one more push is owed."""
        self._owed[partner] = self._owed.get(partner, 0) + 1

    def satisfied(self, partner: bytes) -> bool:
        """True once every push owed by ``partner`` has been merged."""
        return self._merged.get(partner, 0) >= self._owed.get(partner, 0)

    def forgive(self, partner: bytes) -> None:
        """The current meeting with ``partner`` expired: stop owing its push."""
        self._owed[partner] = min(self._owed.get(partner, 0), self._merged.get(partner, 0))

    def credit(self, partner: bytes) -> int:
        """Pushes merged from ``partner`` beyond those owed (early or late arrivals)."""
        return max(0, self._merged.get(partner, 0) - self._owed.get(partner, 0))
