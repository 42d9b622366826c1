"""The pushes of one push-sum core that await their acks (see :mod:`gossip.pushsum`).

A push leaves the sender's weight untouched until its ack arrives; meanwhile
its share is promised and new shares are cut from what is left.  This table
holds the exact payload each push carried (what the receiver merges, and the
ack removes), retransmits what expired, gives up after ``give_up_after``
sends, and applies the one rule for pushes reported undelivered (forgotten
only when surely not merged).  Sans-IO, like the core.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from enum import Enum

import numpy as np

from gossip.errors import RejectedAck
from gossip.messages import Push, PushAck

# the core's logger: every line a push-sum core writes comes under one name
log = logging.getLogger("gossip.pushsum")

#: Push ids of recent acks, to tell a duplicate ack from an unexpected one.
RECENT_ACKS = 256


class UndeliveredOutcome(Enum):
    """What :meth:`PushSum.on_undelivered` did with a push reported undelivered."""

    FORGOTTEN = "forgotten"  # surely not merged: dropped, the weight stays here
    OUTSTANDING = "outstanding"  # maybe merged: kept, expire() retransmits it (same id)
    UNKNOWN = "unknown"  # not an outstanding push of this core: nothing changed


@dataclass
class Outstanding:
    """One push awaiting its ack."""

    peer: bytes
    push: Push
    sent: np.ndarray  # the decoded payload q (mask included): exactly what the peer merges
    masked: bool
    last_sent: float
    attempts: int
    unresolved: bool = False  # past max_attempts: no longer blocks new pushes
    weight_at_push: float = 1.0  # the sender's weight when the push was made


def short(b: bytes) -> str:
    """The first 4 bytes of an id, in hex (log lines)."""
    return bytes(b)[:4].hex()


class InFlight:
    """Pushes awaiting acks, by push id."""

    def __init__(self, fingerprint: bytes, max_attempts: int, give_up_after: int) -> None:
        self.fingerprint = fingerprint
        self.max_attempts = max_attempts
        self.give_up_after = give_up_after
        self.pushes: dict[int, Outstanding] = {}
        self._recent_acks: OrderedDict[int, None] = OrderedDict()

    def promised(self) -> float:
        """The shares of every push awaiting its ack."""
        return sum(o.push.weight for o in self.pushes.values())

    def reserved(self) -> float:
        """The shares of unresolved pushes (maybe merged, ack lost)."""
        return sum(o.push.weight for o in self.pushes.values() if o.unresolved)

    def blocking(self) -> list[Outstanding]:
        """The pushes that still block new ones (not unresolved)."""
        return [o for o in self.pushes.values() if not o.unresolved]

    def fraction(self, push_id: int) -> float | None:
        """The share of push ``push_id`` over the sender's weight when it was made: the
        fraction of its mass the push takes once acknowledged (None: not awaited)."""
        o = self.pushes.get(push_id)
        if o is None or o.weight_at_push <= 0.0:
            return None
        return min(o.push.weight / o.weight_at_push, 1.0 - 1e-12)

    def any_masked(self) -> bool:
        """Whether a masked push's compensation is pending."""
        return any(o.masked for o in self.pushes.values())

    def expire(self, now: float, timeout: float) -> tuple[list[tuple[bytes, Push]], int, int]:
        """Retransmit or give up what is unacknowledged for ``timeout`` (see
        :meth:`PushSum.expire`): (retransmissions, their count, pushes given up)."""
        resend: list[tuple[bytes, Push]] = []
        given_up = 0
        for push_id, o in list(self.pushes.items()):
            if now - o.last_sent < timeout:
                continue
            if o.attempts >= self.max_attempts:
                o.unresolved = True
            if o.attempts < self.give_up_after:
                o.attempts += 1
                o.last_sent = now
                resend.append((o.peer, o.push))
            else:
                del self.pushes[push_id]
                given_up += 1
                log.debug(  # the driver's "failed (N in a row)" line is the operator's
                    "push %d of model %s to %s unacknowledged after %d attempts; weight kept",
                    push_id, short(self.fingerprint), short(o.peer), o.attempts,
                )
        return resend, len(resend), given_up

    def undelivered(self, push_id: int, maybe_delivered: bool
                    ) -> tuple[UndeliveredOutcome, Outstanding | None]:
        """The one rule for a send reported unacknowledged (see :meth:`PushSum.on_undelivered`)."""
        o = self.pushes.get(push_id)
        if o is None:
            log.warning("undelivered push %r of model %s is not outstanding",
                        push_id, short(self.fingerprint))
            return UndeliveredOutcome.UNKNOWN, None
        if maybe_delivered or o.attempts > 1:
            return UndeliveredOutcome.OUTSTANDING, o
        del self.pushes[push_id]
        return UndeliveredOutcome.FORGOTTEN, o

    def awaiting(self, sender: bytes, ack: PushAck) -> Outstanding:
        """The push ``ack`` answers, or RejectedAck (duplicate, unexpected, wrong sender)."""
        o = self.pushes.get(ack.push_id)
        if o is None:
            kind = "duplicate" if ack.push_id in self._recent_acks else "unexpected"
            raise RejectedAck(f"{kind} ack for push {ack.push_id!r}")
        if sender != o.peer:
            raise RejectedAck(
                f"ack for push {ack.push_id} came from {short(sender)}, "
                f"but it was sent to {short(o.peer)}"
            )
        return o

    def acked(self, push_id: int) -> None:
        """Push ``push_id`` was acknowledged: no longer awaited."""
        del self.pushes[push_id]
        self._recent_acks[push_id] = None
        if len(self._recent_acks) > RECENT_ACKS:
            self._recent_acks.popitem(last=False)
