"""Counters of one push-sum instance (frozen snapshots for status displays)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PushSumCounters:
    """What one push-sum core has done since it was created.

    Byte counts are encoded message sizes (:attr:`Push.nbytes`, and
    :attr:`PushAck.nbytes` for acks carrying a push-pull reply; plain acks are
    not counted).
    """

    pushes_sent: int = 0  # new pushes (retransmissions not included)
    pushes_received: int = 0  # merged pushes (duplicates not included)
    rejected: int = 0  # invalid pushes and invalid acks (bad replies included)
    acks: int = 0  # accepted acknowledgements of our pushes
    failures: int = 0  # pushes given up (failure or final expiry), weight kept
    retransmissions: int = 0
    duplicates: int = 0  # retransmitted pushes recognised and re-acknowledged
    masked_sent: int = 0
    unmasks: int = 0  # times the held-apart noise was folded into the values
    bytes_sent: int = 0  # pushes (retransmissions included) and replies we sent
    bytes_received: int = 0  # merged pushes and merged replies
    replies_sent: int = 0  # push-pull requests answered with a share of our mass
    replies_received: int = 0  # push-pull replies merged
    bad_replies: int = 0  # replies dropped as invalid (the ack itself was applied)
    replies_evicted: int = 0  # retransmitted requests refused: their stored reply was gone
    delta_pushes_sent: int = 0  # new requests sent as a delta against a pair's reference
    references_missing: int = 0  # delta requests refused: the named reference was not held
    requests_widened: int = 0  # push-pull requests re-encoded wider: too coarse (see PushSum)
    guard_refused: int = 0  # pushes refused by a merge defence (gossip.merge_guard)
    clipped: int = 0  # push-pull requests merged clipped (the excess handed back)
    clipped_replies: int = 0  # replies merged clipped (the excess not merged)
    unreciprocated: int = 0  # push-pull requests acked without a reply: share kept (guard)
    guard_held: int = 0  # candidates skipped: we gave them balance_cap net (guard)
    rolled_back: int = 0  # rounds whose merges were rolled back (gossip.recovery)
