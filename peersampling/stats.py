"""The counters of one peer sampler (what ``p2p peers`` shows)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SamplerStats:
    """Counters for the admin ``peers`` command (monotonic since start)."""

    shuffles_sent: int = 0
    shuffles_received: int = 0
    shuffles_failed: int = 0
    replies_received: int = 0
    lookups_sent: int = 0
    bootstrap_attempts: int = 0
    messages_rejected: int = 0
    descriptors_rejected: int = 0
    signatures_rejected: int = 0  # also counted in descriptors/messages_rejected
    unsolicited_dropped: int = 0  # over the per-source / per-period caps
    probes_sent: int = 0
    probes_failed: int = 0  # answered with another id, or not at all
    distrusted: int = 0  # peers removed and refused for a while (see PeerSampler.distrust)
