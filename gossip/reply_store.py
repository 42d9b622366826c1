"""The push-pull replies a core gave, kept for retransmitted requests.

A request whose ack was lost comes again with the same push id; the core
must answer it with the very reply it gave (merging it again would duplicate
mass, replying afresh would give the same share twice).  The store keeps the
latest replies, bounded by count and bytes (least recently used out first);
a retransmission whose reply was evicted is refused, never merged twice.
"""

from __future__ import annotations

from collections import OrderedDict

from gossip.messages import PushAck

#: Stored push-pull replies: at most this many ...
STORED_REPLIES = 256
#: ... and at most this many bytes by default (``reply_store_bytes``).
REPLY_STORE_BYTES = 64 * 2**20


class ReplyStore:
    """Acks carrying a reply, by (sender, push id)."""

    def __init__(self, max_bytes: int, max_count: int = STORED_REPLIES) -> None:
        self.max_bytes = int(max_bytes)
        self.max_count = int(max_count)
        self._acks: OrderedDict[tuple[bytes, int], PushAck] = OrderedDict()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._acks)

    def get(self, key: tuple[bytes, int]) -> PushAck | None:
        """The stored ack for ``key`` (None if not stored), its place unchanged."""
        return self._acks.get(key)

    def reuse(self, key: tuple[bytes, int]) -> PushAck | None:
        """The stored ack for ``key``, now the most recently used (None if not stored)."""
        ack = self._acks.get(key)
        if ack is not None:
            self._acks.move_to_end(key)
        return ack

    def put(self, key: tuple[bytes, int], ack: PushAck) -> None:
        """Keep ``ack``; evict the least recently used beyond the bounds."""
        self._acks[key] = ack
        self.nbytes += ack.nbytes
        while self._acks and (len(self._acks) > self.max_count
                              or self.nbytes > self.max_bytes):
            _, old = self._acks.popitem(last=False)
            self.nbytes -= old.nbytes
