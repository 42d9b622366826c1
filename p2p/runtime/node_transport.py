"""What the node runtime needs from a transport.

The node and its adapters for peer sampling and gossip are typed against these
protocols, not against a concrete class: the TCP
:class:`~p2p.wire.transport.Transport` satisfies them, and so does the
in-memory :class:`~p2p.testing.memnet.MemoryTransport` that tests inject.
"""

from __future__ import annotations

from typing import Protocol

import trio

from p2p.wire.codec import Message
from p2p.wire.transport import Handler

__all__ = ["NodeTransport", "Requester"]


class Requester(Protocol):
    """Sends one request to a peer and returns its reply."""

    async def request(self, address: str, msg: Message, timeout: float | None = None, *,
                      node_id: bytes | None = None) -> Message:
        """The peer's reply to ``msg``.

        Raises :class:`~p2p.wire.transport.PeerUnreachable` when the request
        may not have been delivered and :class:`~p2p.wire.transport.RemoteError`
        when the peer answered with an error. ``node_id``, if given, is the
        identity the peer must prove.
        """
        ...


class NodeTransport(Requester, Protocol):
    """A transport a node can serve on, send requests over and close."""

    @property
    def listen_address(self) -> str:
        """The address peers should dial (known once serving)."""
        ...

    async def serve(self, handler: Handler,
                    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Answer requests with ``handler`` until cancelled; ``task_status`` gets the address."""
        ...

    async def aclose(self) -> None:
        """Stop serving and close every connection."""
        ...
