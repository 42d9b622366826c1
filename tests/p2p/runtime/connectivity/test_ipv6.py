"""IPv6 works as IPv4 does: daemons over ``::1`` (their addresses, pushes, reachability
probes), a relayed circuit and a hole punch over ``::1``, and a dual-stack listener
(``[::]``) that reads an IPv4 peer as its IPv4 address."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio
from relay_kit import Echo, punch_pair

from common.address import parse_dial_address
from p2p.runtime.node import Node
from p2p.swarm import node_config
from p2p.testing import fast_spec, running, wait_until
from p2p.wire.identity import Identity
from p2p.wire.messages import Observe, Observed
from p2p.wire.transport import Transport


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback here")


async def test_daemons_over_ipv6_loopback_train_together(tmp_path: Path) -> None:
    spec = fast_spec(nodes=2, rounds=3)
    first = Node(node_config(spec, 0, tmp_path / "a", None).with_overrides(
        listen="[::1]:0", bootstrap=[]))
    async with running([first]) as (address,):
        assert address.startswith("[::1]:")
        second = Node(node_config(spec, 1, tmp_path / "b", None).with_overrides(
            listen="[::1]:0", bootstrap=[address]))
        async with running([second]):
            await wait_until(lambda: all(n.progress.finished for n in (first, second)))
            await wait_until(lambda: first.model_counter("global", "pushes_received") > 0
                             and second.model_counter("global", "pushes_received") > 0)
            assert second.sampler.self_descriptor.address.startswith("[::1]:")


async def test_a_circuit_and_a_hole_punch_over_ipv6_loopback() -> None:
    async with punch_pair(host="::1") as pair:
        assert str(parse_dial_address(pair.circuit)).startswith("[::1]:")
        assert await pair.peer.request(pair.circuit, Echo(b"v6")) == Echo(b"v6")
        await wait_until(lambda: pair.peer.path_to(pair.circuit) == "punched")
        assert await pair.peer.request(pair.circuit, Echo(b"direct")) == Echo(b"direct")
        assert pair.remotes[-1].startswith("[::1]:") and "/circuit/" not in pair.remotes[-1]


async def test_a_dual_stack_listener_reads_an_ipv4_peer_as_ipv4() -> None:
    server = Transport(Identity.generate(), "::", 0)
    client = Transport(Identity.generate(), "127.0.0.1", 0)
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(server.serve, lambda peer, msg: None)
        port = bound.rpartition(":")[2]
        seen = await client.request(f"127.0.0.1:{port}", Observe())
        assert isinstance(seen, Observed) and seen.address.startswith("127.0.0.1:")
        nursery.cancel_scope.cancel()
    await client.aclose()
    await server.aclose()
