"""Exceptions raised by the push-sum core.

Every rejection carries a message naming the field that was wrong and the
expected form; raising one never changes the state of the core, except
:class:`RejectedReply` (the ack was applied, only its reply dropped).
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


class RejectedReply(RejectedAck):
    """An ack's push-pull reply was invalid: the ack was applied, the reply dropped.

    The ack says the responder merged our share, so the share was removed as
    for a plain ack; only the reply's share of the responder's mass was not
    merged.
    """


class InvalidValues(GossipError, ValueError):
    """Values given by the local side (constructor, set_values, restore) are invalid."""


class PushUndelivered(GossipError):
    """A push got no acknowledgement from its peer (raised by a push transport).

    ``maybe_delivered`` is True when the push may have reached the peer and
    been merged with only the reply lost (timeout or connection lost after
    sending); False when it surely was not merged (nothing was sent).
    """

    def __init__(self, reason: str, *, maybe_delivered: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.maybe_delivered = maybe_delivered


class PushRefused(PushUndelivered):
    """The peer answered a push without merging it (an error or a wrong reply)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, maybe_delivered=False)
