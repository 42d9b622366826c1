"""Which push ids of each sender a core has merged: a sliding window per sender.

A sender numbers its pushes of one model consecutively from a random 62-bit
start, so per (sender, model) the merged ids form a window below the highest
id seen.  The window keeps ``span`` ids (a bit each, and a second bit for "we
answered with a push-pull reply"); an id below the window cannot be told
apart from a replay and is refused (never merged twice), and an id more than
:data:`NEW_SEQUENCE` away from the highest is a new sequence (the sender
restarted and drew a new start).  Unlike a list of the last 64 ids, a
retransmission is recognised however many newer pushes came since, as long as
it is within ``span``.  The state is plain ints and exports for checkpoints.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

#: Ids this far or farther from a sender's highest start a new sequence.
NEW_SEQUENCE = 2**32
#: Default window: ids per sender (bits).
DUP_SPAN = 4096
#: Senders remembered (least recently heard from out first).
DUP_SENDERS = 4096


class Seen(Enum):
    """What the window knows about a push id."""

    NEW = "new"  # not merged: merge it
    MERGED = "merged"  # merged, answered with a plain ack
    REPLIED = "replied"  # merged, answered with a push-pull reply
    TOO_OLD = "too_old"  # below the window: maybe merged, refuse it


@dataclass
class _Window:
    high: int  # highest id seen
    merged: int  # bit i: id high - i was merged
    replied: int  # bit i: ... and answered with a reply


class DupWindow:
    """Sliding windows of merged push ids, one per sender."""

    def __init__(self, span: int = DUP_SPAN, senders: int = DUP_SENDERS) -> None:
        if span < 1 or senders < 1:
            raise ValueError(f"span and senders must be >= 1, got {span}, {senders}")
        self.span = span
        self.senders = senders
        self._w: OrderedDict[bytes, _Window] = OrderedDict()

    def __len__(self) -> int:
        return len(self._w)

    def __iter__(self) -> Iterator[bytes]:
        """The senders remembered (least recently heard from first)."""
        return iter(self._w)

    def __contains__(self, sender: object) -> bool:
        return sender in self._w

    def lookup(self, sender: bytes, push_id: int) -> Seen:
        """Whether ``push_id`` from ``sender`` was merged (no change)."""
        w = self._w.get(sender)
        if w is None:
            return Seen.NEW
        back = w.high - push_id
        if back < 0 or back >= NEW_SEQUENCE:
            return Seen.NEW
        if back >= self.span:
            return Seen.TOO_OLD
        if not (w.merged >> back) & 1:
            return Seen.NEW
        return Seen.REPLIED if (w.replied >> back) & 1 else Seen.MERGED

    def record(self, sender: bytes, push_id: int, replied: bool) -> None:
        """Remember that ``push_id`` was merged (``replied``: answered with a reply)."""
        w = self._w.get(sender)
        if w is None or abs(push_id - w.high) >= NEW_SEQUENCE:
            w = _Window(push_id, 0, 0)
            self._w[sender] = w
            self._w.move_to_end(sender)
            if len(self._w) > self.senders:
                self._w.popitem(last=False)
        else:
            self._w.move_to_end(sender)
        if push_id > w.high:
            shift = push_id - w.high
            mask = (1 << self.span) - 1
            w.merged = (w.merged << shift) & mask
            w.replied = (w.replied << shift) & mask
            w.high = push_id
        back = w.high - push_id
        if back < self.span:
            w.merged |= 1 << back
            if replied:
                w.replied |= 1 << back

    def export(self) -> list[tuple[bytes, int, int, int]]:
        """Plain data for a checkpoint: (sender, highest id, merged bits, replied bits)."""
        return [(s, w.high, w.merged, w.replied) for s, w in self._w.items()]

    def load(self, rows: list[tuple[bytes, int, int, int]]) -> None:
        """Replace the windows with exported rows (bits beyond ``span`` are dropped)."""
        mask = (1 << self.span) - 1
        self._w.clear()
        for sender, high, merged, replied in rows[-self.senders:]:
            if not isinstance(sender, bytes) or not all(
                    isinstance(v, int) and not isinstance(v, bool) and v >= 0
                    for v in (high, merged, replied)):
                raise ValueError("dup window: expected rows (bytes, int >= 0, int >= 0, int >= 0)")
            self._w[sender] = _Window(high, merged & mask, replied & merged & mask)
