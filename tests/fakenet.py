"""An in-memory network for running real transports and nodes in one trio run.

Connections are ``trio.testing.memory_stream_pair`` streams: the full framing,
handshake, sealing and codec run, but no socket is opened. Faults are injected
per connection attempt (``unreachable`` addresses, random ``loss``).
"""

from __future__ import annotations

import random
from typing import Any

import trio
import trio.testing

from p2p.identity import Identity
from p2p.transport import Transport


class MemoryNetwork:
    """Registry of listening in-memory transports, by address."""

    def __init__(self, *, seed: int = 0, loss: float = 0.0) -> None:
        self.servers: dict[str, tuple[Transport, Any, trio.Nursery]] = {}
        self.unreachable: set[str] = set()
        self.loss = loss
        self.rng = random.Random(seed)
        self.connections = 0

    async def connect(self, address: str) -> trio.abc.Stream:
        entry = self.servers.get(address)
        if entry is None or address in self.unreachable or self.rng.random() < self.loss:
            raise OSError(f"connection to {address} refused (in-memory network)")
        server, handler, nursery = entry
        client_end, server_end = trio.testing.memory_stream_pair()
        self.connections += 1
        nursery.start_soon(server.serve_stream, server_end, handler, f"mem-client-{self.connections}")
        return client_end

    def transport(self, identity: Identity, address: str, **kwargs: Any) -> MemoryTransport:
        return MemoryTransport(self, address, identity, **kwargs)


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
