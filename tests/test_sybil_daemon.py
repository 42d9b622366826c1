"""Daemons sign their descriptors and run peer sampling under the Sybil rules."""

from __future__ import annotations

from pathlib import Path

from p2p.swarm import SwarmSpec
from p2p.testing import MemoryNetwork, memory_swarm, running, wait_until
from p2p.wire.identity import verify_signature
from peersampling import SignatureCheck

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
