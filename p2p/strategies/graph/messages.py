"""Wire messages of the collaboration-graph strategy (paper 003).

A node that wakes up pulls from each sampled peer and each heavy neighbour
(:class:`GraphPull` -> :class:`GraphReply`): the peer's last *released* model
(noisy when the peer runs with an epsilon; serving it again costs no privacy),
its loss, confidence and degree, and the weight it holds on the edge back to the
requester. After its graph step the node tells each sampled peer the new weight
of their shared edge (:class:`GraphWeight` -> :class:`GraphAck`); the graph is
undirected and whoever updated an edge last sets it at both ends.

Pulls and replies carry a digest of the network notation and the public inputs,
so that nodes never compare outputs of different architectures or samples.
:func:`peer_state_of` and :func:`weight_of` check what a peer sent before it is
used (:class:`GraphMessageError` names the field that was wrong).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from gossip.validation import MAX_ABS_VALUE
from p2p.strategies.public_split import DIGEST_BYTES, public_digest

__all__ = [
    "DIGEST_BYTES",
    "GRAPH_MESSAGES",
    "MAX_WEIGHT",
    "GraphAck",
    "GraphMessageError",
    "GraphPull",
    "GraphReply",
    "GraphWeight",
    "PeerState",
    "graph_digest",
    "peer_state_of",
    "weight_of",
]

#: The largest edge weight or degree a node accepts from a peer (the objective's
#: weights stay far below: about 4 / (distance to the nearest peer)).
MAX_WEIGHT = 1e6
#: The largest local loss a node accepts from a peer.
MAX_LOSS = 1e4


class GraphMessageError(ValueError):
    """A graph message that cannot be used (the message says what was wrong)."""


def graph_digest(notation: str, public_x: np.ndarray) -> bytes:
    """A digest of the network notation and the public inputs: equal on two nodes exactly
    when their models and output distances are comparable."""
    return public_digest(public_x, context=notation)


@dataclass(frozen=True)
class GraphPull:
    """A request for the peer's released model and graph state."""

    digest: bytes


@dataclass(frozen=True)
class GraphReply:
    """The peer's last released model (after ``round`` training rounds), its training loss,
    confidence ``c_j``, degree ``d_j`` and the weight it holds on the edge to the requester."""

    digest: bytes
    round: int
    loss: float
    confidence: float
    degree: float
    weight_back: float
    model: NDArray[np.float32]


@dataclass(frozen=True)
class GraphWeight:
    """The new weight of the edge between the sender and the receiver."""

    digest: bytes
    weight: float


@dataclass(frozen=True)
class GraphAck:
    """The receiver took the weight (echoed)."""

    weight: float


@dataclass(frozen=True)
class PeerState:
    """A checked :class:`GraphReply`: the model as a writable float32 vector."""

    round: int
    loss: float
    confidence: float
    degree: float
    weight_back: float
    model: np.ndarray


def _number(value: float, field: str, low: float, high: float, *, open_low: bool = False) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise GraphMessageError(f"graph reply: {field} is {value!r}, expected a finite number")
    if value < low or value > high or (open_low and value == low):
        bound = f"in ({low}, {high}]" if open_low else f"in [{low}, {high}]"
        raise GraphMessageError(f"graph reply: {field} is {value!r}, expected a number {bound}")
    return value


def peer_state_of(reply: GraphReply, digest: bytes, size: int) -> PeerState:
    """The checked state in `reply`: same digest, a finite model of `size` values of
    magnitude at most :data:`~gossip.validation.MAX_ABS_VALUE`,
    loss, confidence, degree and weight in range. Raises :class:`GraphMessageError`."""
    if reply.digest != digest:
        raise GraphMessageError("graph reply: digest differs from this node's (another "
                                "network, data.task, data.seed or data.public_size)")
    if reply.round < 0:
        raise GraphMessageError(f"graph reply: round is {reply.round}, expected >= 0")
    model = np.asarray(reply.model)
    if model.ndim != 1 or model.size != size:
        raise GraphMessageError(f"graph reply: model holds {model.size} values (shape "
                                f"{model.shape}), expected {size}")
    if not np.all(np.isfinite(model)):
        raise GraphMessageError("graph reply: model contains NaN or infinite values")
    if model.size and float(np.max(np.abs(model))) > MAX_ABS_VALUE:
        raise GraphMessageError(f"graph reply: model holds a value of magnitude "
                                f"{float(np.max(np.abs(model))):.3g}, expected at most "
                                f"{MAX_ABS_VALUE:g}")
    return PeerState(
        round=reply.round,
        loss=_number(reply.loss, "loss", 0.0, MAX_LOSS),
        confidence=_number(reply.confidence, "confidence", 0.0, 1.0, open_low=True),
        degree=_number(reply.degree, "degree", 0.0, MAX_WEIGHT),
        weight_back=_number(reply.weight_back, "weight_back", 0.0, MAX_WEIGHT),
        model=model.astype(np.float32, copy=True),
    )


def weight_of(msg: GraphWeight, digest: bytes) -> float:
    """The checked weight of `msg`. Raises :class:`GraphMessageError`."""
    if msg.digest != digest:
        raise GraphMessageError("graph weight: digest differs from this node's")
    return _number(msg.weight, "weight", 0.0, MAX_WEIGHT)


#: The wire surface of the graph strategy, declared by its plug-in (a node registers
#: every strategy's).
GRAPH_MESSAGES: tuple[tuple[type, str], ...] = (
    (GraphPull, "graph.pull"),
    (GraphReply, "graph.reply"),
    (GraphWeight, "graph.weight"),
    (GraphAck, "graph.ack"),
)
