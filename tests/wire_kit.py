"""What the frame-budget attack tests share: a request message of any size, a
handler that answers every request, a squatting member's session and the honest
pushes that must get through."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import trio
import trio.testing

from p2p.wire import codec
from p2p.wire.codec import Message
from p2p.wire.handshake import PeerInfo
from p2p.wire.messages import Pong
from p2p.wire.transport import MessageStream, PeerUnreachable, Transport


@dataclass(frozen=True)
class Blob:
    """A request whose frame is as large as its ``data`` (an honest push's stand-in)."""

    data: bytes


codec.register(Blob, "attack_frame_budget_blob")


async def handler(peer: PeerInfo, msg: Message) -> Message:
    """Answers every request with ``Pong(0)``."""
    return Pong(0)


async def member_session(node: Transport, nursery: trio.Nursery, me: Transport,
                         remote: str) -> trio.abc.Stream:
    """A member's session to ``node`` from address ``remote``, handshake done: the
    client end of an in-memory stream ``node`` serves with :func:`handler` in
    ``nursery``. Raises ConnectionFailure when ``node`` refuses the handshake."""
    client, server = trio.testing.memory_stream_pair()
    nursery.start_soon(node.serve_stream, server, handler, remote)
    ms = MessageStream(client, write_timeout=5.0)
    await me._handshake(ms, initiator=True, expected_node_id=None)
    return client


async def honest_pushes(honest: Transport, to: str, count: int, size: int,
                        after_each: Callable[[], None] = lambda: None) -> tuple[int, int]:
    """``count`` requests of ``size`` bytes from ``honest`` to ``to``, one every 5 s
    (``after_each`` checks something after each wait): (served, refused)."""
    ok = refused = 0
    for _ in range(count):
        try:
            await honest.request(to, Blob(b"p" * size), timeout=10)
            ok += 1
        except PeerUnreachable:
            refused += 1
        await trio.sleep(5)
        after_each()
    return ok, refused
