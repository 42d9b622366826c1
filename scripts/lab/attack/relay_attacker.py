"""A member that sits between two nodes and claims to be one of them.

The attacker of issue 11 (item 1): it holds the swarm key and an identity of
its own, listens on an address a victim dials believing it reaches an honest
node (a poisoned descriptor, a hijacked address), and tries to read and
rewrite what passes. Two strategies, :attr:`RelayAttacker.mode`:

- ``"forward"``: it connects to the honest node and passes the handshake
  through untouched, so that the two honest ends authenticate each other;
  afterwards it tries to read each frame and flips a byte in the middle of
  every frame from the victim (a push's values), hoping the honest node
  merges the rewritten push as the victim's.
- ``"impersonate"``: it answers the victim's handshake itself, claiming the
  honest node's id, and forwards every request to the honest node on a
  session of its own claiming the victim's id, with the pushes' values
  rewritten (:meth:`RelayAttacker.inject` sends one such request directly).

The counters say what it achieved: :attr:`frames_opened` (frames it read in
clear: request or reply content), :attr:`sessions_claimed` (handshakes it
completed under a claimed id), :attr:`tampered_sent`. A session that only the
two ends can read leaves the first two at 0, and the honest node merges none
of the tampered pushes.

It is a :class:`~p2p.testing.memnet.MemoryTransport` whose accepted
connections go through :meth:`serve_stream`: register it on a
:class:`~p2p.testing.memnet.MemoryNetwork` with ``nursery.start(relay.serve, None)``.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import trio

from gossip import Push, decode, encode
from p2p.testing.memnet import MemoryNetwork, MemoryTransport
from p2p.wire import codec
from p2p.wire.codec import Message
from p2p.wire.framing import FrameDecoder, FramingError, encode_frame
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.transport import Handler, Transport, TransportError

__all__ = ["ClaimedIdentity", "RelayAttacker"]

logger = logging.getLogger(__name__)

_HANDSHAKE_FRAMES = {"to_server": 2, "to_client": 1}  # Noise XX: messages 1 and 3, and 2
_MAX_FRAME = 64 << 20


@dataclass(frozen=True, eq=False)
class ClaimedIdentity(Identity):
    """An identity that claims ``claimed`` as its node id but can only sign
    with its own private key (what a member without the victim's key has)."""

    claimed: bytes = b""

    @property
    def node_id(self) -> bytes:
        """The claimed id, not the key's own."""
        return self.claimed


class RelayAttacker(MemoryTransport):
    """A relaying member between a victim and ``target`` (see the module doc).

    ``victim_id`` and ``target_id`` are the ids it claims: the target's to the
    victim, the victim's to the target. ``own`` is the attacker's real key.
    """

    def __init__(self, network: MemoryNetwork, address: str, own: Identity, *,
                 target: str, target_id: bytes, victim_id: bytes,
                 swarm_key: bytes | None, mode: str = "forward") -> None:
        if mode not in ("forward", "impersonate"):
            raise ValueError(f"unknown relay mode {mode!r}; expected forward or impersonate")
        super().__init__(network, address, ClaimedIdentity(own.private_key, target_id),
                         swarm_key=swarm_key, connect_timeout=2.0, read_timeout=2.0)
        self.mode = mode
        self.target = target
        self.upstream = Transport(ClaimedIdentity(own.private_key, victim_id), "127.0.0.1", 0,
                                  swarm_key=swarm_key, connector=network.connect,
                                  connect_timeout=2.0, read_timeout=2.0)
        self.frames_opened = 0
        self.sessions_claimed = 0
        self.tampered_sent = 0
        self.upstream_refusals: list[str] = []

    async def serve_stream(self, stream: trio.abc.Stream, handler: Handler,
                           remote: str) -> None:
        """Relay one accepted connection by :attr:`mode`."""
        if self.mode == "impersonate":
            await super().serve_stream(stream, self._forward_request, remote)
            return
        try:
            upstream = await self.network.connect(self.target)
        except OSError:
            await stream.aclose()
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._pump, stream, upstream, "to_server", nursery.cancel_scope)
            nursery.start_soon(self._pump, upstream, stream, "to_client", nursery.cancel_scope)
        await stream.aclose()
        await upstream.aclose()

    async def inject(self, msg: Message) -> Message | None:
        """Send ``msg`` to the target claiming the victim's id (pushes rewritten);
        the reply, or None when the target refused the session."""
        if isinstance(msg, Push):
            msg = self._tamper(msg)
        try:
            reply = await self.upstream.request(self.target, msg)
        except TransportError as exc:
            self.upstream_refusals.append(str(exc))
            return None
        self.sessions_claimed += 1
        return reply

    async def _forward_request(self, peer: PeerInfo, msg: Message) -> Message | None:
        # reached only if the victim accepted this relay as the node it claims
        self.sessions_claimed += 1
        self.frames_opened += 1
        return await self.inject(msg)

    def _tamper(self, push: Push) -> Push:
        values = decode(push.values, push.values.length)
        self.tampered_sent += 1
        return dataclasses.replace(push, values=encode(-10.0 * values, push.values.encoding))

    async def _pump(self, source: trio.abc.Stream, sink: trio.abc.Stream, direction: str,
                    scope: trio.CancelScope) -> None:
        decoder = FrameDecoder(_MAX_FRAME)
        seen = 0
        try:
            while data := await source.receive_some(65536):
                for frame in decoder.feed(data):
                    payload = bytearray(frame)
                    if seen >= _HANDSHAKE_FRAMES[direction]:
                        self._try_to_read(bytes(payload))
                        if direction == "to_server" and len(payload) > 64:
                            payload[len(payload) // 2] ^= 0x01
                            self.tampered_sent += 1
                    seen += 1
                    await sink.send_all(encode_frame(payload))
        except (trio.BrokenResourceError, trio.ClosedResourceError, FramingError):
            pass
        scope.cancel()

    def _try_to_read(self, payload: bytes) -> None:
        try:
            codec.decode(payload)
        except codec.DecodeError:
            return  # sealed: nothing to read
        self.frames_opened += 1
