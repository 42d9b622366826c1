"""Exceptions raised by the push-sum core.

Every rejection carries a message naming the field that was wrong and the
expected form; raising one never changes the state of the core.
"""

from __future__ import annotations


class GossipError(Exception):
    """Base class of the errors of the gossip package."""


class RejectedPush(GossipError):
    """A received push was invalid; it was not merged and nothing changed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RejectedAck(GossipError):
    """An acknowledgement was duplicate or unexpected; nothing changed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class InvalidValues(GossipError, ValueError):
    """Values given by the local side (constructor, set_values, restore) are invalid."""
