"""The graph strategy's wire messages: codec round trip and checks of what a peer sent."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from p2p.runtime.protocol import register_node_messages
from p2p.strategies.graph.messages import (
    GRAPH_MESSAGES,
    GraphAck,
    GraphMessageError,
    GraphPull,
    GraphReply,
    GraphWeight,
    graph_digest,
    peer_state_of,
    weight_of,
)
from p2p.wire import codec

DIGEST = graph_digest("64=10", np.zeros((3, 64), np.float32))


def _reply(**changes: object) -> GraphReply:
    base = GraphReply(DIGEST, 7, 0.5, 0.25, 3.0, 1.5, np.arange(5, dtype=np.float32))
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_messages_round_trip_through_the_codec() -> None:
    names = register_node_messages()
    assert {name for _, name in GRAPH_MESSAGES} <= set(names)
    for msg in (GraphPull(DIGEST), GraphWeight(DIGEST, 2.5), GraphAck(2.5)):
        assert codec.decode(codec.encode(msg)) == msg
    back = codec.decode(codec.encode(_reply()))
    assert isinstance(back, GraphReply)
    state = peer_state_of(back, DIGEST, 5)
    np.testing.assert_array_equal(state.model, np.arange(5, dtype=np.float32))
    state.model[0] = 1.0  # a writable copy, not the received bytes
    assert (state.round, state.loss, state.confidence, state.degree, state.weight_back) == (
        7, 0.5, 0.25, 3.0, 1.5)


def test_the_digest_separates_networks_and_public_splits() -> None:
    x = np.zeros((3, 64), np.float32)
    assert graph_digest("64=10", x) != graph_digest("64=32=10", x)
    assert graph_digest("64=10", x) != graph_digest("64=10", x + 1)


@pytest.mark.parametrize(("changes", "field"), [
    ({"model": np.arange(4, dtype=np.float32)}, "model holds 4"),
    ({"model": np.array([0.0, np.nan, 0, 0, 0], np.float32)}, "NaN"),
    ({"model": np.array([0.0, np.inf, 0, 0, 0], np.float32)}, "NaN or infinite"),
    ({"model": np.array([0.0, 2e6, 0, 0, 0], np.float32)}, "magnitude 2e\\+06"),
    ({"model": np.array([0.0, 0, -1.5e6, 0, 0], np.float32)}, "at most 1e\\+06"),
    ({"loss": float("nan")}, "loss"),
    ({"loss": -1.0}, "loss"),
    ({"confidence": 0.0}, "confidence"),
    ({"confidence": 1.5}, "confidence"),
    ({"degree": float("inf")}, "degree"),
    ({"weight_back": -0.1}, "weight_back"),
    ({"round": -1}, "round"),
    ({"digest": b"\x00" * 16}, "digest"),
])
def test_a_bad_reply_is_refused_naming_the_field(changes: dict[str, object], field: str) -> None:
    msg = codec.decode(codec.encode(_reply(**changes)))
    assert isinstance(msg, GraphReply)
    with pytest.raises(GraphMessageError, match=field):
        peer_state_of(msg, DIGEST, 5)


def test_a_bad_weight_is_refused() -> None:
    assert weight_of(GraphWeight(DIGEST, 1.25), DIGEST) == 1.25
    for bad in (float("nan"), -1.0, 1e9):
        with pytest.raises(GraphMessageError, match="weight"):
            weight_of(GraphWeight(DIGEST, bad), DIGEST)
    with pytest.raises(GraphMessageError, match="digest"):
        weight_of(GraphWeight(b"x" * 16, 1.0), DIGEST)


def test_a_reply_of_the_wrong_types_is_refused_by_the_codec() -> None:
    with pytest.raises(codec.EncodeError, match="model"):
        codec.encode(_reply(model=np.arange(5, dtype=np.float64)))
    with pytest.raises(codec.EncodeError, match="model"):
        codec.encode(_reply(model=np.zeros((2, 2), np.float32)))
