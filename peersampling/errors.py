"""Exceptions raised by the peer sampling service."""

from __future__ import annotations


class PeerSamplingError(Exception):
    """Base class of every error raised by :mod:`peersampling`."""


class InvalidDescriptor(PeerSamplingError, ValueError):
    """A descriptor (or one of its fields) is malformed.

    ``field`` names the offending field (``node_id``, ``address``, ``age``,
    ``tags`` or ``descriptor`` for the object as a whole).
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"invalid descriptor field {field!r}: {problem}")
        self.field = field
        self.problem = problem


class InvalidMessage(PeerSamplingError, ValueError):
    """A shuffle request or reply is malformed as a whole (not just one entry)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"invalid shuffle message field {field!r}: {problem}")
        self.field = field
        self.problem = problem


class PeerUnreachable(PeerSamplingError, ConnectionError):
    """A transport could not deliver a shuffle to ``address`` (or got no reply)."""

    def __init__(self, address: str, reason: str = "unreachable") -> None:
        super().__init__(f"peer {address} {reason}")
        self.address = address
        self.reason = reason
