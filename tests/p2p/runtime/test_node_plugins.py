"""What plugs into a node from modules of its own: the masking host's ``PairOffer``
handler, reached through the node's request dispatcher, and the collaboration
watch's memory of the peers last seen."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from gossip import PairAccept, PairOffer
from p2p.runtime.collaboration import CollaborationState
from p2p.runtime.collaboration_watch import CollaborationWatch, WatchedNode
from p2p.runtime.node import Node
from p2p.testing import MemoryNetwork, fast_spec, memory_node
from p2p.wire.handshake import PeerInfo
from p2p.wire.messages import ERROR_REJECTED, Error
from peersampling import Descriptor

PEER = PeerInfo(b"\x07" * 32, "10.0.0.9:7000", frozenset())


def _public_key() -> bytes:
    return X25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def _node(tmp_path: Path, **spec: object) -> Node:
    return memory_node(MemoryNetwork(), tmp_path / "n", fast_spec(**spec), 0, "10.0.0.1:7000")


async def test_a_masked_node_applies_its_side_of_an_offered_pair(tmp_path: Path) -> None:
    node = _node(tmp_path, privacy="masked")
    fp = node.learning.fingerprints["global"]
    assert not node.gossip._wake.is_set()
    reply = await node.handle_request(PEER, PairOffer(fp, 1, 1.0, _public_key()))
    assert isinstance(reply, PairAccept) and reply.model == fp and reply.epoch == 1
    assert node.cores["global"].noisy  # our side of the pair is held apart
    assert node.gossip._wake.is_set()  # noise arrived: gossip starts mixing it now
    status = node.masking_status()
    assert status is not None and status["global"]["pairs"] == 1
    # a second pair from the same peer while the first is live is refused, with the reason
    again = await node.handle_request(PEER, PairOffer(fp, 2, 1.0, _public_key()))
    assert isinstance(again, Error) and again.code == ERROR_REJECTED
    assert "still live" in again.reason
    # an offer for a model this node does not hold
    other = await node.handle_request(PEER, PairOffer(b"\x33" * 32, 1, 1.0, _public_key()))
    assert isinstance(other, Error) and other.code == ERROR_REJECTED
    assert "does not hold that model" in other.reason


async def test_a_closing_masked_node_refuses_pair_offers(tmp_path: Path) -> None:
    node = _node(tmp_path, privacy="masked")
    node._closing = True  # shutdown began: nothing may change the final snapshot
    fp = node.learning.fingerprints["global"]
    reply = await node.handle_request(PEER, PairOffer(fp, 1, 1.0, _public_key()))
    assert isinstance(reply, Error) and reply.code == ERROR_REJECTED
    assert reply.reason == "this node runs no masking epochs"
    assert not node.cores["global"].noisy


async def test_a_node_without_masking_refuses_pair_offers(tmp_path: Path) -> None:
    node = _node(tmp_path)
    assert node.masking is None and node.masking_status() is None
    fp = node.learning.fingerprints["global"]
    reply = await node.handle_request(PEER, PairOffer(fp, 1, 1.0, _public_key()))
    assert isinstance(reply, Error) and reply.code == ERROR_REJECTED
    assert reply.reason == "this node runs no masking epochs"
    assert not node.cores["global"].noisy


@dataclass
class _Entry:
    descriptor: Descriptor


class _Sampler:
    """A sampler whose views the test sets."""

    def __init__(self) -> None:
        self.entries: list[_Entry] = []
        self.is_isolated = False

    def peer_entries(self) -> list[_Entry]:
        return list(self.entries)


def test_the_watch_remembers_the_peers_last_seen_while_all_are_out_of_the_views() -> None:
    model = b"\x11" * 32
    sampler = _Sampler()
    fake: Any = SimpleNamespace(
        config=SimpleNamespace(node=SimpleNamespace(bootstrap=[])),
        learning=SimpleNamespace(fingerprints={"global": model}),
        swarm_key=None, peers=SimpleNamespace(started=sampler))
    watch = CollaborationWatch(cast(WatchedNode, fake), clock=lambda: 10.0)
    holder = Descriptor(b"\x05" * 32, "10.0.0.5:7000", 0, frozenset({model}))
    sampler.entries = [_Entry(holder)]
    assert watch.status().state is CollaborationState.NO_EXCHANGE  # a holder, no exchange yet
    watch.exchanges.acked("global", 9.0)
    assert watch.status().state is CollaborationState.COLLABORATING
    # the only peer is out of the views for a shuffle: still the peer last seen
    sampler.entries = []
    status = watch.status()
    assert status.state is CollaborationState.COLLABORATING and status.holders == {"global": 1}
    # isolated: the memory is dropped, and the node says it waits for a peer
    sampler.is_isolated = True
    assert watch.status().state is CollaborationState.WAITING
    sampler.is_isolated = False
    assert watch.status().state is CollaborationState.JOINING  # nothing remembered now
