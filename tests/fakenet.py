"""An in-memory network for running real transports and nodes in one trio run.

Connections are ``trio.testing.memory_stream_pair`` streams: the full framing,
handshake, sealing and codec run, but no socket is opened. Faults are injected
per connection attempt (``unreachable`` addresses, random ``loss``) and per
message (``message_loss``: a write, and every later one on that connection, is
silently dropped, as when a link goes dark under an open TCP connection;
``max_delay``: each write waits a uniform random delay first).
"""

from __future__ import annotations

import random
from typing import Any

import trio
import trio.testing

from p2p.wire.identity import Identity
from p2p.wire.transport import Transport


class MemoryNetwork:
    """Registry of listening in-memory transports, by address."""

    def __init__(self, *, seed: int = 0, loss: float = 0.0, message_loss: float = 0.0,
                 max_delay: float = 0.0) -> None:
        self.servers: dict[str, tuple[Transport, Any, trio.Nursery]] = {}
        self.unreachable: set[str] = set()
        self.loss = loss
        self.message_loss = message_loss
        self.max_delay = max_delay
        self.rng = random.Random(seed)
        self.connections = 0
        self.messages_dropped = 0

    async def connect(self, address: str) -> trio.abc.Stream:
        entry = self.servers.get(address)
        if entry is None or address in self.unreachable or self.rng.random() < self.loss:
            raise OSError(f"connection to {address} refused (in-memory network)")
        server, handler, nursery = entry
        client_end, server_end = trio.testing.memory_stream_pair()
        self.connections += 1
        if self.message_loss or self.max_delay:
            client_end, server_end = FaultyStream(self, client_end), FaultyStream(self, server_end)
        nursery.start_soon(server.serve_stream, server_end, handler, f"mem-client-{self.connections}")
        return client_end

    def transport(self, identity: Identity, address: str, **kwargs: Any) -> MemoryTransport:
        return MemoryTransport(self, address, identity, **kwargs)


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
    """A :class:`Transport` that listens on a :class:`MemoryNetwork` address."""

    def __init__(self, network: MemoryNetwork, address: str, identity: Identity,
                 **kwargs: Any) -> None:
        host, port = address.rsplit(":", 1)
        super().__init__(identity, host, int(port), connector=network.connect,
                         advertise_address=address, **kwargs)
        self.network = network

    async def serve(self, handler: Any, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        address = self.listen_address
        async with trio.open_nursery() as nursery:
            self.network.servers[address] = (self, handler, nursery)
            try:
                task_status.started(address)
                await trio.sleep_forever()
            finally:
                self.network.servers.pop(address, None)


class Tap(trio.abc.Stream):
    """Wraps a stream and records every byte sent through it (an eavesdropper)."""

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
