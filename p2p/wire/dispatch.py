"""Route each request to the handler registered for its exact type.

Each subsystem registers handlers for its own request types; the node composes
them into one :class:`RequestDispatcher` and hands it to the transport, which
calls it for every request it does not answer itself (``Ping``). A request of a
type nobody registered goes to ``on_unknown``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from p2p.wire import codec
from p2p.wire.codec import Message
from p2p.wire.handshake import PeerInfo
from p2p.wire.messages import ERROR_BAD_REQUEST, MESSAGES, Error

__all__ = ["RequestDispatcher", "RequestHandler", "UnknownRequestHandler", "not_a_request"]

M = TypeVar("M", bound=Message)

#: Answers one request of type ``M`` from an authenticated peer with a reply message.
RequestHandler = Callable[[PeerInfo, M], Awaitable[Message]]
#: Answers a request whose type has no handler.
UnknownRequestHandler = Callable[[PeerInfo, Message], Awaitable[Message]]

# The transport answers or refuses these itself; a handler for them would never run.
_TRANSPORT_MESSAGES = frozenset(cls for cls, _ in MESSAGES)


async def not_a_request(peer: PeerInfo, msg: Message) -> Error:
    """Default ``on_unknown``: a ``bad_request`` error naming the message type."""
    return Error(ERROR_BAD_REQUEST, f"{type(msg).__name__} is not a request")


class RequestDispatcher:
    """A table ``request type -> handler``, callable as the transport's request handler."""

    def __init__(self, on_unknown: UnknownRequestHandler = not_a_request) -> None:
        self._handlers: dict[type, Callable[[PeerInfo, Message], Awaitable[Message]]] = {}
        self._on_unknown = on_unknown

    def add(self, request_type: type[M], handler: RequestHandler[M]) -> None:
        """Serve requests of exactly ``request_type`` (not subclasses) with ``handler``.

        Raises :class:`ValueError` if the type is not a registered wire message,
        is answered by the transport itself, or already has a handler.
        """
        label = getattr(request_type, "__name__", repr(request_type))
        if request_type in _TRANSPORT_MESSAGES:
            raise ValueError(f"{label} is answered by the transport itself, not by a handler")
        if not codec.is_registered(request_type):
            raise ValueError(f"{label} is not a registered wire message (register it first)")
        if request_type in self._handlers:
            raise ValueError(f"{label} already has a handler")

        async def serve(peer: PeerInfo, msg: Message) -> Message:
            # Routing is by exact type, so this holds; the check types ``msg`` as ``M``.
            if not isinstance(msg, request_type):
                raise TypeError(f"{type(msg).__name__} routed to the {label} handler")
            return await handler(peer, msg)

        self._handlers[request_type] = serve

    @property
    def request_types(self) -> frozenset[type]:
        """The request types that have a handler."""
        return frozenset(self._handlers)

    async def __call__(self, peer: PeerInfo, msg: Message) -> Message:
        handler = self._handlers.get(type(msg))
        if handler is None:
            return await self._on_unknown(peer, msg)
        return await handler(peer, msg)
