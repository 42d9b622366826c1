"""The node's own request handlers (:class:`~p2p.runtime.serving.NodeServing`), reached
through ``Node.handle_request``: what a peer's bad request gets back, how it is counted,
logged and reported as the ``requests`` offences of ``p2p metrics``."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from gossip import EncodedVector, Push
from p2p.runtime.admin_commands import offence_counts
from p2p.runtime.node import Node
from p2p.testing import MemoryNetwork, fast_spec, memory_node
from p2p.wire.handshake import PeerInfo
from p2p.wire.messages import ERROR_BAD_REQUEST, ERROR_REJECTED, Error, Pong
from peersampling import Descriptor, ShuffleRequest

PEER = PeerInfo(b"\x07" * 32, "10.0.0.9:7000", frozenset())


def _node(tmp_path: Path) -> Node:
    return memory_node(MemoryNetwork(), tmp_path / "n", fast_spec(), 0, "10.0.0.1:7000")


def _push(model: bytes, length: int) -> Push:
    data = np.zeros(length, dtype="<f8")
    return Push(model, 1, EncodedVector("f64", data.size, data, np.zeros(0, np.float32)), 0.25)


async def test_bad_requests_are_refused_counted_and_logged_once_per_peer(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    node = _node(tmp_path)
    length = node.cores["global"].length
    caplog.set_level(logging.WARNING, logger="p2p.runtime.node")
    forged = ShuffleRequest(Descriptor(b"\x08" * 32, "10.0.0.8:7000"), ())
    replies = [await node.handle_request(PEER, forged),
               await node.handle_request(PEER, Pong(1)),
               await node.handle_request(PEER, _push(b"\x33" * 32, length))]
    assert replies == [Error(ERROR_BAD_REQUEST, "shuffle sender is not the peer"),
                       Error(ERROR_BAD_REQUEST, "Pong is not a request"),
                       Error(ERROR_REJECTED, "this node does not hold that model")]
    assert node.counters["rejected_messages"] == 3
    assert offence_counts(node)["requests"] == 3  # what `p2p metrics` shows
    # one line for the peer in this interval (the rest summed up later), under the node's name
    lines = [r for r in caplog.records if r.name == "p2p.runtime.node"]
    assert len(lines) == 1 and "claims to come from node 08080808" in lines[0].getMessage()


async def test_a_closing_node_refuses_pushes_without_counting_the_peer(tmp_path: Path) -> None:
    node = _node(tmp_path)
    before = node.cores["global"].values.copy()
    node._closing = True  # shutdown began: nothing may change the final snapshot
    push = _push(node.learning.fingerprints["global"], node.cores["global"].length)
    assert await node.handle_request(PEER, push) == Error(ERROR_REJECTED, "node is shutting down")
    assert node.counters["rejected_messages"] == 0 and offence_counts(node)["requests"] == 0
    assert np.array_equal(node.cores["global"].values, before)
