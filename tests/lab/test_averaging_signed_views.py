"""AveragingPeer samples peers as the node does: signed descriptors and the Sybil rules."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np
import trio
from lab.averaging.peers import AveragingPeer

from p2p.wire.identity import Identity, verify_signature
from peersampling import Descriptor, ShuffleRequest, sign_descriptor, signing_payload

MODEL = hashlib.sha256(b"test_averaging_signed_views").digest()


async def test_averaging_peers_discover_each_other_through_signed_descriptors() -> None:
    peers = [AveragingPeer(np.full(4, float(i)), MODEL) for i in range(3)]
    async with trio.open_nursery() as nursery:
        addresses = [await nursery.start(p.run) for p in peers]
        for i, p in enumerate(peers):
            p.join([] if i == 0 else [addresses[0]])
        with trio.fail_after(60):
            for p in peers:
                await p.wait_for_holders(len(peers) - 1)
        for p, address in zip(peers, addresses, strict=True):
            assert p.sampler.sybil_rules is not None
            me = p.sampler.self_descriptor
            assert me.address == address and me.epoch > 0
            assert verify_signature(me.node_id, me.signature, signing_payload(me))
            holders = p.known_holders()
            assert {d.node_id for d in holders} == (
                {q.identity.node_id for q in peers} - {p.identity.node_id})
            for d in holders:  # every entry is signed by the id it names
                assert verify_signature(d.node_id, d.signature, signing_payload(d))
        nursery.cancel_scope.cancel()


async def test_an_averaging_peer_drops_unsigned_and_forged_descriptors() -> None:
    peer = AveragingPeer(np.zeros(4), MODEL)
    outsider = Identity.generate()
    unsigned = Descriptor(outsider.node_id, "127.0.0.1:1", 0, frozenset({MODEL}), 1)
    forged = replace(sign_descriptor(unsigned, outsider.sign), address="127.0.0.1:2")
    async with trio.open_nursery() as nursery:
        await nursery.start(peer.run)
        s = peer.sampler
        for d in (unsigned, forged):
            reply = s.on_request(ShuffleRequest(d, (), MODEL), trio.current_time())
            assert reply.entries == ()  # a sender that does not verify gets nothing
        assert s.stats.signatures_rejected == 2
        assert s.model_view(MODEL) == [] and s.view() == []
        nursery.cancel_scope.cancel()
