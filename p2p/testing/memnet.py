"""An in-memory network for running real transports and nodes in one trio run.

Connections are ``trio.testing.memory_stream_pair`` streams: the full framing,
handshake, sealing and codec run, but no socket is opened. Faults are injected
per connection attempt (``unreachable`` addresses, random ``loss``) and per
message (``message_loss``: a write, and every later one on that connection, is
silently dropped, as when a link goes dark under an open TCP connection;
``max_delay``: each write waits a uniform random delay first). The knobs are
plain attributes and may be changed while the network runs.
"""

from __future__ import annotations

import logging
import random
from typing import TypedDict, Unpack

import trio
import trio.testing

from p2p.wire.admission import AdmissionLimits
from p2p.wire.identity import Identity
from p2p.wire.transport import Handler, Transport

__all__ = [
    "FaultyStream", "MemoryNetwork", "MemoryTransport", "Tap", "TransportOptions", "TransportTuning",
]

logger = logging.getLogger(__name__)


class TransportTuning(TypedDict, total=False):
    """Limits and timeouts of :class:`~p2p.wire.transport.Transport` (all optional)."""

    max_connections: int
    connect_timeout: float
    read_timeout: float
    idle_timeout: float
    max_frame_size: int
    cipher: str
    max_messages_per_second: float | None
    admission: AdmissionLimits | None


class TransportOptions(TransportTuning, total=False):
    """Keyword options of :class:`~p2p.wire.transport.Transport` a memory transport accepts."""

    tags: frozenset[bytes]
    swarm_key: bytes | None


def _check_probability(name: str, value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return value


class MemoryNetwork:
    """Registry of listening in-memory transports, by address.

    ``seed`` seeds the one random generator behind every injected fault, so a
    run is reproducible as far as trio's scheduling is.
    """

    def __init__(self, *, seed: int = 0, loss: float = 0.0, message_loss: float = 0.0,
                 max_delay: float = 0.0) -> None:
        if max_delay < 0:
            raise ValueError(f"max_delay must be >= 0 seconds, got {max_delay!r}")
        self.servers: dict[str, tuple[Transport, Handler, trio.Nursery]] = {}
        self.unreachable: set[str] = set()  # connecting to these fails, as to a dead host
        self.loss = _check_probability("loss", loss)
        self.message_loss = _check_probability("message_loss", message_loss)
        self.max_delay = max_delay
        self.rng = random.Random(seed)
        self.connections = 0  # connections opened so far
        self.messages_dropped = 0  # writes lost to ``message_loss`` so far

    async def connect(self, address: str) -> trio.abc.Stream:
        """Open a connection to the transport listening on ``address`` (the client end).

        Raises ``OSError`` when nobody listens there, the address is
        ``unreachable``, or the attempt is lost (probability ``loss``).
        """
        entry = self.servers.get(address)
        if entry is None or address in self.unreachable or self.rng.random() < self.loss:
            raise OSError(f"connection to {address} refused (in-memory network)")
        server, handler, nursery = entry
        client_end: trio.abc.Stream
        server_end: trio.abc.Stream
        client_end, server_end = trio.testing.memory_stream_pair()
        self.connections += 1
        if self.message_loss or self.max_delay:
            client_end, server_end = FaultyStream(self, client_end), FaultyStream(self, server_end)
        nursery.start_soon(server.serve_stream, server_end, handler,
                           f"mem-client-{self.connections}")
        return client_end

    def transport(self, identity: Identity, address: str,
                  **options: Unpack[TransportOptions]) -> MemoryTransport:
        """A transport that will listen on ``address`` of this network once served."""
        return MemoryTransport(self, address, identity, **options)


class FaultyStream(trio.abc.Stream):
    """One end of a connection whose writes may be delayed or lost (see module doc)."""

    def __init__(self, network: MemoryNetwork, inner: trio.abc.Stream) -> None:
        self.network = network
        self.inner = inner
        self.dark = False  # once a write is lost, the link stays dark

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        net = self.network
        if net.max_delay:
            await trio.sleep(net.rng.uniform(0.0, net.max_delay))
        if not self.dark and net.rng.random() < net.message_loss:
            self.dark = True
            net.messages_dropped += 1
        if self.dark:
            await trio.lowlevel.checkpoint()
            return
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


class MemoryTransport(Transport):
    """A :class:`~p2p.wire.transport.Transport` listening on a :class:`MemoryNetwork` address.

    Everything but the listening socket is the real transport: dialling goes
    through :meth:`MemoryNetwork.connect`, accepted connections through
    :meth:`Transport.serve_stream`.
    """

    def __init__(self, network: MemoryNetwork, address: str, identity: Identity,
                 **options: Unpack[TransportOptions]) -> None:
        host, sep, port = address.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"in-memory address {address!r} is not of the form host:port")
        super().__init__(identity, host, int(port), connector=network.connect,
                         advertise_address=address, **options)
        self.network = network

    async def serve(self, handler: Handler,
                    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on the network until cancelled or :meth:`aclose`; like :meth:`Transport.serve`.

        ``task_status.started`` receives the address. While serving, the
        address is registered; connections already accepted end with it.
        """
        if self.closed:
            raise RuntimeError("transport is closed")
        self.handler = handler
        address = self.listen_address
        if address in self.network.servers:
            raise OSError(f"address {address} already in use (in-memory network)")
        with trio.CancelScope() as scope:
            self._serve_scope = scope  # so that aclose() stops serving, as for TCP
            async with trio.open_nursery() as nursery:
                self.network.servers[address] = (self, handler, nursery)
                try:
                    logger.debug("listening on %s (in memory)", address)
                    task_status.started(address)
                    await trio.sleep_forever()
                finally:
                    self.network.servers.pop(address, None)


class Tap(trio.abc.Stream):
    """Wraps a stream and records every byte sent or received through it (an eavesdropper)."""

    def __init__(self, inner: trio.abc.Stream, log: bytearray) -> None:
        self.inner = inner
        self.log = log

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.log += data
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.inner.receive_some(max_bytes)
        self.log += data
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()
