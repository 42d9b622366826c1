"""What the two sides of one push-sum core share (:mod:`gossip.incoming`, :mod:`gossip.outgoing`).

A :class:`~gossip.pushsum.PushSum` is a state (:class:`~gossip.estimate.Estimate`)
that two sides change: the incoming side merges what peers push and replies
to their requests; the outgoing side makes this node's pushes and takes the
acks and replies to them.  Both use the same encodings, references, pushes in
flight, merge checks, counters and log limiter: :class:`CoreParts` holds them.
"""

from __future__ import annotations

from dataclasses import dataclass

from gossip.estimate import Estimate
from gossip.in_flight import InFlight
from gossip.log_limit import LogLimiter
from gossip.merge_checks import MergeChecks
from gossip.references import PairReferences
from gossip.wire_format import WireFormat


@dataclass
class CoreParts:
    """The state and tools one core's incoming and outgoing sides share."""

    fingerprint: bytes
    est: Estimate
    wire: WireFormat
    references: PairReferences
    flight: InFlight
    checks: MergeChecks | None  # the merge defences (None: no guard)
    counters: dict[str, int]  # PushSumCounters' fields
    offences: LogLimiter  # lines a peer causes: one per sender and interval
    privacy: str
    exchange: str
    fanout: int
    # pushes this node made: the merge guard's clock (its own exchange rate,
    # which no sender sets), see gossip.drift_budget
    own_pushes: int = 0

    @property
    def available_weight(self) -> float:
        """The weight not promised to pushes awaiting acks: what new shares are cut from."""
        return self.est.w - self.flight.promised()


def offender(sender: object) -> str:
    """Whom a rate-limited line is counted against: the whole id, not its short form."""
    return bytes(sender).hex() if isinstance(sender, bytes | bytearray) else str(sender)
