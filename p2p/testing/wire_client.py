"""A client that speaks, or deliberately mangles, the wire protocol of a node.

For hostile-peer tests and benchmarks against a node listening on TCP:
raw bytes before any handshake, an authenticated session on which any payload
can be sent, and pushes encoded by hand so that values the codec would refuse
can still be sent.
"""

from __future__ import annotations

import msgpack
import numpy as np
import trio

from gossip import Push
from p2p.wire import codec
from p2p.wire.identity import Identity
from p2p.wire.transport import MessageStream, Transport, parse_address

__all__ = ["ask", "open_session", "push_payload", "raw_exchange", "valid_push"]

# Any value the msgpack encoder takes (a hand-built message field).
WireValue = None | bool | int | float | str | bytes | list[object] | dict[str, object]


async def raw_exchange(address: str, data: bytes, *, close_write: bool = False,
                       timeout: float = 5.0) -> bytes:
    """Connect, send ``data``, return what came back until the node closed the connection.

    ``close_write`` half-closes after sending (the node sees end of file).
    """
    stream = await trio.open_tcp_stream(*parse_address(address))
    received = bytearray()
    try:
        with trio.fail_after(timeout):
            try:
                await stream.send_all(data)
                if close_write:
                    await stream.send_eof()
                while chunk := await stream.receive_some(65536):
                    received += chunk
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass  # reset by the node: also a close
    finally:
        await trio.aclose_forcefully(stream)
    return bytes(received)


async def open_session(address: str, *, swarm_key: bytes | None = None,
                       identity: Identity | None = None,
                       max_frame_size: int = 64 << 20) -> tuple[MessageStream, Identity]:
    """An authenticated connection to ``address`` on which any payload can be sent.

    Returns the message stream (handshake done, sealed if the node seals) and
    the identity it authenticated with (a fresh one unless given).
    """
    identity = identity or Identity.generate()
    me = Transport(identity, "127.0.0.1", 0, swarm_key=swarm_key, max_frame_size=max_frame_size)
    ms = MessageStream(await trio.open_tcp_stream(*parse_address(address)),
                       max_frame_size=max_frame_size, write_timeout=5.0)
    # the transport's own handshake, so the session is exactly what a peer gets
    await me._handshake(ms, initiator=True, expected_node_id=None)
    return ms, identity


async def ask(ms: MessageStream, payload: bytes, timeout: float = 5.0) -> object:
    """Send one raw payload; return the decoded reply (raises ``ConnectionFailure`` when closed)."""
    await ms.send_payload(payload)
    return codec.decode(await ms.receive_payload(timeout, timeout))


def push_payload(model: bytes, values: np.ndarray, weight: WireValue, push_id: int = 1,
                 **fields: WireValue) -> bytes:
    """A push encoded by hand, bypassing the codec's checks.

    ``weight`` may be of any type (to send a wrong one); ``fields`` replace or
    add raw fields of the message.
    """
    raw: dict[str, object] = {
        "v": codec.PROTOCOL_VERSION, "t": "push", "model": model, "push_id": push_id,
        "values": {"dtype": values.dtype.str, "n": int(values.size), "data": values.tobytes()},
        "weight": weight, "masked": False, "noisy": False, "noise_age": 0,
    }
    raw.update(fields)
    packed: bytes = msgpack.packb(raw, use_bin_type=True)
    return packed


def valid_push(model: bytes, length: int, weight: float = 0.25, push_id: int = 1,
               seed: int = 0) -> Push:
    """A well-formed push for ``model``: ``length`` normal random values (seeded)."""
    values = np.random.default_rng(seed).normal(size=length)
    return Push(model, push_id, values, weight)
