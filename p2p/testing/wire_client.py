"""A client that speaks, or deliberately mangles, the wire protocol of a node.

For hostile-peer tests and benchmarks against a node listening on TCP:
raw bytes before any handshake, an authenticated session on which any payload
can be sent, and pushes encoded by hand so that values the codec would refuse
can still be sent (vectors as hand-built encoded-vector maps).
"""

from __future__ import annotations

import dataclasses

import msgpack
import numpy as np
import trio

from gossip import EncodedVector, Push, encode
from p2p.wire import codec
from p2p.wire.identity import Identity
from p2p.wire.transport import MessageStream, Transport, parse_address

__all__ = ["ask", "connect_from", "encoded_vector_fields", "open_session", "push_payload",
           "raw_exchange", "valid_push"]

# Any value the msgpack encoder takes (a hand-built message field).
WireValue = None | bool | int | float | str | bytes | list[object] | dict[str, object]


async def connect_from(address: str, source: str) -> trio.SocketStream:
    """A TCP connection to ``address`` from the loopback address ``source``.

    Each attacker identity gets its own source address (127.0.1.x), as
    distinct hosts would. Numeric addresses only: no resolver thread per
    connection (on one machine the attacker's CPU is the victim's too).
    """
    host, port = parse_address(address)
    sock = trio.socket.socket()
    try:
        await sock.bind((source, 0))
        await sock.connect((host, port))
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)


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


def encoded_vector_fields(values: np.ndarray, encoding: str = "f64", *,
                          length: WireValue = None, scales: np.ndarray | None = None,
                          ) -> dict[str, object]:
    """The wire map of an :class:`~gossip.EncodedVector` built by hand, unchecked.

    ``values`` is sent as ``data`` with its own dtype (``values.dtype.str``),
    whatever ``encoding`` says; ``length`` defaults to ``values.size`` and may
    be any value (to send a lie); ``scales`` defaults to none (float32).
    """
    scales = np.zeros(0, dtype=np.float32) if scales is None else scales
    return {
        "encoding": encoding,
        "length": int(values.size) if length is None else length,
        "data": _array_fields(values),
        "scales": _array_fields(scales),
    }


def _array_fields(a: np.ndarray) -> dict[str, object]:
    return {"dtype": a.dtype.str, "n": int(a.size), "data": a.tobytes()}


def push_payload(model: bytes, values: np.ndarray | EncodedVector | dict[str, object],
                 weight: WireValue,
                 push_id: int = 1, *, encoding: str = "f64", scales: np.ndarray | None = None,
                 **fields: WireValue) -> bytes:
    """A push encoded by hand, bypassing the codec's checks.

    ``values`` is an :class:`~gossip.EncodedVector` (sent as it is), a raw
    array sent as the ``data`` of an encoded vector declared as ``encoding``
    with ``scales`` (see :func:`encoded_vector_fields`: any dtype, any
    mismatch), or a hand-built map sent verbatim. ``weight`` may be of any type (to send a wrong one);
    ``fields`` replace or add raw fields of the message (the other fields take
    the defaults of :class:`~gossip.Push`).
    """
    vector: dict[str, object]
    if isinstance(values, dict):
        vector = values
    elif isinstance(values, EncodedVector):
        vector = encoded_vector_fields(values.data, values.encoding, length=values.length,
                                       scales=values.scales)
    else:
        vector = encoded_vector_fields(values, encoding, scales=scales)
    raw: dict[str, object] = {"v": codec.PROTOCOL_VERSION, "t": "push"}
    for f in dataclasses.fields(Push):
        if f.default is not dataclasses.MISSING:
            raw[f.name] = f.default
    raw.update(model=model, push_id=push_id, values=vector, weight=weight)
    raw.update(fields)
    packed: bytes = msgpack.packb(raw, use_bin_type=True)
    return packed


def valid_push(model: bytes, length: int, weight: float = 0.25, push_id: int = 1,
               seed: int = 0, encoding: str = "f32", near: np.ndarray | None = None) -> Push:
    """A well-formed push for ``model``: ``length`` normal random values (seeded), encoded.

    ``near``: the receiver's estimate; the push then carries it plus 1e-3 x the
    random values, a push its merge guard takes (random values alone are far
    from any trained model: the guard's clipping refuses them as one-way pushes).
    """
    values = np.random.default_rng(seed).normal(size=length)
    if near is not None:
        values = np.asarray(near, dtype=np.float64) + 1e-3 * values
    return Push(model, push_id, encode(values, encoding), weight)
