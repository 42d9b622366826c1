"""Messages and their encoded bytes per direction and message type, for the metrics.

The transport counts each request and reply it sends or receives (the encoded
payload: no frame header, no AEAD tag); handshakes are not messages of the
codec and are left out. Message types come from the codec's registry, so the
key set is bounded whatever peers send.
"""

from __future__ import annotations

__all__ = ["DIRECTIONS", "Traffic"]

DIRECTIONS = ("sent", "received")


class Traffic:
    """(direction, message type name) -> [messages, bytes], summed since start."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], list[int]] = {}

    def add(self, direction: str, kind: str, nbytes: int) -> None:
        entry = self._counts.get((direction, kind))
        if entry is None:
            entry = self._counts[(direction, kind)] = [0, 0]
        entry[0] += 1
        entry[1] += nbytes

    def snapshot(self) -> dict[tuple[str, str], tuple[int, int]]:
        """A copy: (direction, type) -> (messages, bytes)."""
        return {key: (c[0], c[1]) for key, c in self._counts.items()}
