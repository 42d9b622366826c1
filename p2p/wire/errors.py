"""What a transport's callers see go wrong: a peer unreachable, a peer's refusal, a
handler's refusal (:mod:`p2p.wire.transport`)."""

from __future__ import annotations

from p2p.wire.peer_text import printable

__all__ = ["PeerUnreachable", "Rejected", "RemoteError", "TransportError"]

# Characters kept of a peer's Error code.
_MAX_CODE = 40


class TransportError(Exception):
    """Base class of errors raised by :meth:`Transport.request`."""


class PeerUnreachable(TransportError):
    """The request could not be delivered or answered (connect, handshake, I/O, timeout).

    ``maybe_delivered`` is True when the failure came after the request started
    to go out (reply timed out, connection lost mid-exchange): the peer may
    have acted on it and only the reply was lost.
    """

    def __init__(self, address: str, reason: str, *, maybe_delivered: bool = False) -> None:
        super().__init__(f"peer {address} unreachable: {reason}")
        self.address = address
        self.reason = reason
        self.maybe_delivered = maybe_delivered


class RemoteError(TransportError):
    """The peer answered the request with an :class:`~p2p.wire.messages.Error`.

    ``code`` and ``reason`` are the peer's text, cut to one short printable line
    (:func:`~p2p.wire.peer_text.printable`): callers log them, often per request.
    """

    def __init__(self, address: str, code: str, reason: str) -> None:
        code, reason = printable(code, _MAX_CODE), printable(reason)
        super().__init__(f"peer {address} refused the request ({code}): {reason}")
        self.address = address
        self.code = code
        self.reason = reason


class Rejected(Exception):
    """Raised by a request handler to answer with ``Error(code, reason)``."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason
