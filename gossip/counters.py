"""Counters of one push-sum instance (frozen snapshots for status displays)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PushSumCounters:
    """What one push-sum core has done since it was created."""

    pushes_sent: int = 0  # new pushes (retransmissions not included)
    pushes_received: int = 0  # merged pushes (duplicates not included)
    rejected: int = 0  # invalid pushes and invalid acks
    acks: int = 0  # accepted acknowledgements of our pushes
    failures: int = 0  # pushes given up (failure or final expiry), weight kept
    retransmissions: int = 0
    duplicates: int = 0  # retransmitted pushes recognised and re-acknowledged
    masked_sent: int = 0
    unmasks: int = 0  # times the held-apart noise was folded into the values
    bytes_sent: int = 0
    bytes_received: int = 0
