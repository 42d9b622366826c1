"""Daemons sign their descriptors and run peer sampling under the Sybil rules."""

from __future__ import annotations

from pathlib import Path

import trio

from gossip import Push, PushAck
from p2p.runtime.node import Node
from p2p.runtime.protocol import register_node_messages
from p2p.swarm import SwarmSpec
from p2p.testing import MemoryNetwork, memory_swarm, running, wait_until
from p2p.wire.codec import Message
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity, verify_signature
from peersampling import (
    Descriptor,
    ShuffleReply,
    ShuffleRequest,
    SignatureCheck,
    sign_descriptor,
)

ADDRESSES = ["127.0.0.1:7411", "127.0.0.1:7412", "127.0.0.1:7413"]


async def test_daemons_keep_only_signed_probed_peers(tmp_path: Path) -> None:
    spec = SwarmSpec(nodes=3, rounds=3, scheme="full", round_interval=0.0,
                     shuffle_period=0.05, eval_every=3)
    nodes = memory_swarm(tmp_path, MemoryNetwork(), spec, addresses=ADDRESSES)
    check = SignatureCheck(verify_signature)
    async with running(nodes):
        ids = {n.identity.node_id for n in nodes}
        await wait_until(lambda: all(
            {d.node_id for d in n.sampler.view()} == ids - {n.identity.node_id}
            for n in nodes))
        for n in nodes:
            s = n.sampler
            assert s.sybil_rules is not None
            me = s.self_descriptor
            assert me.node_id == n.identity.node_id and check(me) and me.epoch > 0
            entries = [e.descriptor for e in s.peer_entries()]
            assert entries and all(check(d) for d in entries)
            assert s.stats.signatures_rejected == 0


async def test_a_sink_holder_loses_its_place_and_honest_partners_stay_proven(
        tmp_path: Path) -> None:
    """A member that acks every push and gives nothing back is tried, struck and dropped."""
    register_node_messages()
    spec = SwarmSpec(nodes=3, rounds=400, scheme="full", round_interval=0.02,
                     shuffle_period=0.05, eval_every=400, steps_per_round=1)
    net = MemoryNetwork()
    nodes = memory_swarm(tmp_path, net, spec, addresses=ADDRESSES)
    fp = next(iter(nodes[0].by_fingerprint))
    sink_id = Identity.from_seed(b"\x07" * 32)
    sink_address = "127.0.0.1:7499"
    me = sign_descriptor(Descriptor(sink_id.node_id, sink_address, 0, frozenset({fp}), 1),
                         sink_id.sign)
    taken = 0

    async def sink(peer: PeerInfo, msg: Message) -> Message | None:
        nonlocal taken
        if isinstance(msg, ShuffleRequest):
            return ShuffleReply((me,), msg.view)
        if isinstance(msg, Push):
            taken += 1
            return PushAck(msg.model, msg.push_id)  # weight taken, none given back
        return None

    transport = net.transport(sink_id, sink_address, tags=frozenset({fp}))
    async with running(nodes), trio.open_nursery() as nursery:
        await nursery.start(transport.serve, sink)
        honest = {n.identity.node_id for n in nodes}
        # it announces itself to every honest node's model view (each probes it)
        for address in ADDRESSES:
            await transport.request(address, ShuffleRequest(me, (), fp), 5.0)
        def struck_and_proven(n: Node) -> bool:
            p = n.gossip.partners
            return (p is not None and p.counters["took"] >= 1
                    and all(p.is_proven(h) for h in honest - {n.identity.node_id}))

        await wait_until(lambda: all(struck_and_proven(n) for n in nodes), timeout=60)
        for n in nodes:
            partners = n.gossip.partners
            assert partners is not None
            assert partners.is_paused(sink_id.node_id, trio.current_time())
            # out of the views while paused, honest holders kept and proven
            held = {d.node_id for d in n.sampler.model_view(fp)}
            assert sink_id.node_id not in held
            assert held == honest - {n.identity.node_id}
            assert all(partners.is_proven(p) for p in held)
            assert n.sampler.stats.distrusted >= 1
        nursery.cancel_scope.cancel()
    assert taken <= 3 * 2  # each honest node tried it about once before the pause
