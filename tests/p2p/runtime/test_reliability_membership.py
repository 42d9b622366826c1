"""Swarm-key membership on running nodes, and the modes of the private files.

Two members share a swarm key; an outsider without it and one with a wrong key
bootstrap from a member. Over real loopback TCP the outsiders must never
complete a handshake (join), never have a push merged or a descriptor accepted
(inject), and, over an eavesdropped in-memory network running the same
transport, the members' model vectors never cross the wire in clear (read).
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import trio

from p2p.runtime.node import ADMIN_SOCKET
from p2p.testing import (
    MemoryNetwork,
    Tap,
    admin_request,
    fast_spec,
    memory_addresses,
    memory_node,
    tcp_node,
    valid_push,
    wait_until,
    write_swarm_key,
)
from p2p.wire.transport import PeerUnreachable

KEY = b"m" * 32
WRONG = b"x" * 32


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_outsiders_neither_join_nor_inject(tmp_path: Path, nursery: trio.Nursery) -> None:
    spec = fast_spec(nodes=4, rounds=4)
    key_file = write_swarm_key(tmp_path, KEY)
    (tmp_path / "w").mkdir()
    wrong_file = write_swarm_key(tmp_path / "w", WRONG)
    a = tcp_node(tmp_path / "a", spec, 0, swarm_key_file=key_file)
    a_address = await nursery.start(a.run)
    b = tcp_node(tmp_path / "b", spec, 1, swarm_key_file=key_file, bootstrap=[a_address])
    outsiders = [tcp_node(tmp_path / "o1", spec, 2, bootstrap=[a_address]),
                 tcp_node(tmp_path / "o2", spec, 3, swarm_key_file=wrong_file,
                          bootstrap=[a_address])]
    for node in (b, *outsiders):
        await nursery.start(node.run)
    members = (a, b)
    await wait_until(lambda: all(n.progress.finished for n in (*members, *outsiders)), 60)
    await wait_until(lambda: all(n.model_counters("global")["pushes_received"] > 0
                                 for n in members))
    outsider_ids = {o.identity.node_id for o in outsiders}
    for m in members:
        known = {d.node_id for d in m.sampler.snapshot()}
        assert not known & outsider_ids  # never in a member's views
        assert not set(m.cores["global"]._seen) & outsider_ids  # never merged a push of theirs
    for o in outsiders:
        assert o.sampler.is_isolated and o.sampler.view() == []
        c = o.model_counters("global")
        assert c["pushes_received"] == 0 and c["acks"] == 0
    # direct injection attempts are refused at the handshake, before any handler
    rejected = (a.counters["rejected_messages"], a.model_counters("global")["rejected"])
    for o in outsiders:  # neither is told which (a keyed node tells non-members nothing)
        push = valid_push(a.cores["global"].fingerprint, a.cores["global"].values.size)
        with pytest.raises(PeerUnreachable, match="the peer closed the handshake"):
            await o.transport.request(a_address, push)
    # nothing reached the node's handler: no refusal counted, no merge remembered
    assert (a.counters["rejected_messages"], a.model_counters("global")["rejected"]) == rejected
    assert not set(a.cores["global"]._seen) & outsider_ids
    for node in (*members, *outsiders):
        node.request_stop()


class TappedNetwork(MemoryNetwork):
    """A memory network that records every byte the clients send and receive."""

    def __init__(self) -> None:
        super().__init__()
        self.wire = bytearray()

    async def connect(self, address: str) -> trio.abc.Stream:
        return Tap(await super().connect(address), self.wire)


async def _eavesdrop(tmp_path: Path, key: bytes | None) -> tuple[bytes, list[bytes]]:
    spec = fast_spec(nodes=2, rounds=3)
    net = TappedNetwork()
    addresses = memory_addresses(2)  # in-memory names, no socket
    nodes, sent = [], []
    for i in range(2):
        node = memory_node(net, tmp_path / f"e{i}", spec, i, addresses[i],
                           bootstrap=addresses[:1] if i else (), swarm_key=key)
        transport = node.transport
        real_request = transport.request

        async def recording(address: str, msg: object, *args: object, _r=real_request,
                            **kwargs: object) -> object:
            reply = await _r(address, msg, *args, **kwargs)
            # recorded once answered: a push cancelled at shutdown never hit the wire
            values = getattr(msg, "values", None)  # an EncodedVector: its payload bytes
            if values is not None:
                sent.append(values.data.tobytes()[:64])
            return reply

        transport.request = recording  # type: ignore[method-assign]
        nodes.append(node)
    async with trio.open_nursery() as nursery:
        for node in nodes:
            await nursery.start(node.run)
        await wait_until(lambda: all(n.progress.finished for n in nodes)
                         and len(sent) >= 4, 60)
        for node in nodes:
            node.request_stop()
    return bytes(net.wire), sent


async def test_members_traffic_is_unreadable_without_the_key(tmp_path: Path) -> None:
    wire, sent = await _eavesdrop(tmp_path / "clear", None)
    assert sent and all(chunk in wire for chunk in sent)  # control: readable without a key
    wire, sent = await _eavesdrop(tmp_path / "sealed", KEY)
    assert sent and not any(chunk in wire for chunk in sent)


async def test_private_files_are_mode_0600(tmp_path: Path, nursery: trio.Nursery) -> None:
    node = tcp_node(tmp_path / "n", fast_spec())
    await nursery.start(node.run)
    await admin_request(node.data_dir, "checkpoint")
    assert mode(node.data_dir / ADMIN_SOCKET) == 0o600
    assert mode(node.data_dir / "identity.key") == 0o600
    assert mode(node.data_dir / "checkpoint.pt") == 0o600
    assert mode(node.data_dir) == 0o700
    node.request_stop()
