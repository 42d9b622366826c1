"""Personalised models with a learned collaboration graph (Bellet et al., paper 003): the maths.

Each node ``i`` keeps its own model ``theta_i`` and non-negative weights ``w_ij``
on the edges to peers it met, for the paper's joint objective, with ``Z_ij`` the
distance between the two nodes' outputs on the public split
(:func:`output_distance`) rather than between parameter vectors. Alternating
updates: one projected gradient step on the sampled edges with a backtracking
step size (:meth:`CollabGraph.update`), then the models' convex mix with the
neighbours (:func:`mix_models`). :class:`PrivacyLedger` counts the Laplace
releases' epsilon (nominal for networks trained by SGD).

Plain numpy and seeded (the RNG is passed in); peers are any hashable ids.
How it works: docs/design/strategies.md ("Collaboration graph").
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np

__all__ = [
    "CollabGraph",
    "GraphError",
    "GraphParams",
    "PeerView",
    "PrivacyLedger",
    "block_objective",
    "confidence",
    "edge_gradient",
    "graph_objective",
    "laplace_scale",
    "mix_models",
    "mixing_rate",
    "output_distance",
    "release_noise",
    "softmax",
]


#: A peer's id: an int in a simulation, a node id on the wire.
K = TypeVar("K", bound=Hashable)


class GraphError(ValueError):
    """Bad input to the collaboration-graph maths (the message names what was wrong)."""


@dataclass(frozen=True)
class GraphParams:
    """The objective's constants and the update's knobs.

    ``mu`` trades the local losses against smoothness (the slides set the graph
    term's ``lambda = mu``); ``beta`` is the L2 penalty on the weights (smaller:
    sparser graph, larger degrees); ``delta`` the log barrier's offset; ``kappa``
    the peers sampled per wake-up; ``local_lipschitz`` the local loss's smoothness
    constant ``L_loc`` (sets the mixing rate; 0 mixes fully at every wake-up);
    ``max_neighbours`` how many of the heaviest neighbours a node mixes with;
    ``max_edges`` how many edges a node keeps (the lightest is dropped beyond).
    """

    mu: float = 1.0
    beta: float = 0.002
    delta: float = 0.1
    kappa: int = 3
    local_lipschitz: float = 100.0
    max_neighbours: int = 4
    max_edges: int = 64

    def __post_init__(self) -> None:
        for name in ("mu", "beta", "delta"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise GraphError(f"graph {name}: expected a finite number > 0, got {value!r}")
        if not (math.isfinite(self.local_lipschitz) and self.local_lipschitz >= 0):
            raise GraphError("graph local_lipschitz: expected a finite number >= 0, got "
                             f"{self.local_lipschitz!r}")
        if self.kappa < 1:
            raise GraphError(f"graph kappa: expected an integer >= 1, got {self.kappa!r}")
        if self.max_neighbours < 1:
            raise GraphError(f"graph max_neighbours: expected an integer >= 1, got "
                             f"{self.max_neighbours!r}")
        if self.max_edges < self.max_neighbours:
            raise GraphError(f"graph max_edges: expected an integer >= max_neighbours "
                             f"({self.max_neighbours}), got {self.max_edges!r}")

    @property
    def max_edge_weight(self) -> float:
        """``w* + 1 / (2 sqrt(beta))``: no edge weight the update produces exceeds this
        (``w*`` solves ``beta w (w + delta) = 1``).

        Both degrees of an edge are at least its weight ``w``, so its gradient is at
        least ``mu (2 beta w - 2 / (w + delta))``: from ``w >= w*`` a step never raises
        it. From below, the step ``-g / L`` with the block constant ``L >= mu (2 beta +
        a^2 + b^2)`` (``a, b`` the two inverse offset degrees, ``g >= -mu (a + b)``)
        raises it by at most ``max_s s / (s^2 / 2 + 2 beta) = 1 / (2 sqrt(beta))``. A
        weight a peer claims above this is clamped.
        """
        b, d = self.beta, self.delta
        w_star = (math.sqrt((b * d) ** 2 + 4 * b) - b * d) / (2 * b)
        return w_star + 1.0 / (2.0 * math.sqrt(b))

    @property
    def worst_lipschitz(self) -> float:
        """The slides' block constant ``L_kappa = 2 mu ((kappa+1)/delta^2 + beta)``."""
        return 2.0 * self.mu * ((self.kappa + 1) / self.delta**2 + self.beta)


def _finite(value: float, what: str, *, minimum: float | None = None) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise GraphError(f"{what}: expected a finite number, got {value!r}")
    if minimum is not None and value < minimum:
        raise GraphError(f"{what}: expected a number >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True)
class PeerView:
    """What a node learnt of one peer in a pull.

    ``distance``: ``Z_ij`` (output distance on the public split); ``loss``: the
    peer's local loss ``L_j``; ``confidence``: ``c_j``; ``degree``: the peer's degree
    ``d_j`` as it reported it; ``weight_back``: the weight the peer holds on the edge
    to this node (its part of ``d_j``).
    """

    distance: float
    loss: float
    confidence: float
    degree: float
    weight_back: float = 0.0

    def __post_init__(self) -> None:
        _finite(self.distance, "peer distance", minimum=0.0)
        _finite(self.loss, "peer loss", minimum=0.0)
        c = _finite(self.confidence, "peer confidence")
        if not 0.0 < c <= 1.0:
            raise GraphError(f"peer confidence: expected a number in (0, 1], got {c!r}")
        _finite(self.degree, "peer degree", minimum=0.0)
        _finite(self.weight_back, "peer weight_back", minimum=0.0)

    @property
    def other_degree(self) -> float:
        """The peer's degree without the edge to this node."""
        return max(0.0, self.degree - self.weight_back)


# ------------------------------------------------------------------ distances
def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of a (samples, classes) array (float64)."""
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    out: np.ndarray = e / e.sum(axis=1, keepdims=True)
    return out


def output_distance(a: np.ndarray, b: np.ndarray) -> float:
    """``Z_ij``: mean over samples of the squared L2 distance between two nodes'
    softmax outputs (each a (samples, classes) array of probabilities) on the
    same public inputs. In [0, 2]."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape or a.shape[0] == 0:
        raise GraphError(f"output_distance: expected two equal non-empty (samples, classes) "
                         f"arrays, got shapes {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise GraphError("output_distance: outputs hold NaN or infinite values")
    return float(np.mean(np.sum((a - b) ** 2, axis=1)))


def confidence(samples: int, reference: int) -> float:
    """``c_i`` in (0, 1], proportional to the shard size up to ``reference`` samples."""
    if samples < 1 or reference < 1:
        raise GraphError(f"confidence: expected samples >= 1 and reference >= 1, got "
                         f"{samples} and {reference}")
    return min(1.0, samples / reference)


# ------------------------------------------------------------------ the objective
def graph_objective(weights: np.ndarray, distances: np.ndarray, losses: Sequence[float],
                    confidences: Sequence[float], params: GraphParams) -> float:
    """``f(w)`` for fixed models, evaluated directly on a whole graph.

    ``weights`` and ``distances`` are symmetric (n, n) arrays (diagonal ignored);
    each edge ``i<j`` counts once.
    """
    w = np.asarray(weights, dtype=np.float64)
    z = np.asarray(distances, dtype=np.float64)
    n = w.shape[0]
    if w.shape != (n, n) or z.shape != (n, n) or len(losses) != n or len(confidences) != n:
        raise GraphError(f"graph_objective: expected (n, n) weights and distances and n "
                         f"losses and confidences, got {w.shape}, {z.shape}, {len(losses)}, "
                         f"{len(confidences)}")
    w = w.copy()
    np.fill_diagonal(w, 0.0)
    upper = np.triu(np.ones((n, n), dtype=bool), 1)
    cl = np.asarray(confidences, dtype=np.float64) * np.asarray(losses, dtype=np.float64)
    degrees = w.sum(axis=1)
    value = float(np.sum(degrees * cl))
    value += params.mu / 2 * float(np.sum(w[upper] * z[upper]))
    value += params.mu * (params.beta * float(np.sum(w[upper] ** 2))
                          - float(np.sum(np.log(degrees + params.delta))))
    return value


def _block_terms(own_loss: float, own_confidence: float, peers: Sequence[PeerView],
                 params: GraphParams) -> tuple[np.ndarray, np.ndarray]:
    """Per-edge linear coefficients and the peers' degrees outside the block."""
    linear = np.array([own_confidence * own_loss + p.confidence * p.loss
                       + params.mu / 2 * p.distance for p in peers])
    others = np.array([p.other_degree for p in peers])
    return linear, others


def block_objective(block: np.ndarray, other_degree: float, own_loss: float,
                    own_confidence: float, peers: Sequence[PeerView],
                    params: GraphParams) -> float:
    """The terms of ``f`` that depend on node ``i``'s weights ``block`` to ``peers``
    (``other_degree``: ``d_i`` without these edges). ``f`` minus this is constant
    in ``block``."""
    linear, others = _block_terms(own_loss, own_confidence, peers, params)
    w = np.asarray(block, dtype=np.float64)
    return float(np.dot(w, linear) + params.mu * params.beta * np.sum(w**2)
                 - params.mu * math.log(other_degree + w.sum() + params.delta)
                 - params.mu * np.sum(np.log(others + w + params.delta)))


def edge_gradient(block: np.ndarray, other_degree: float, own_loss: float,
                  own_confidence: float, peers: Sequence[PeerView],
                  params: GraphParams) -> np.ndarray:
    """``[grad f(w)]_{i,K}``: ``c_i L_i + c_j L_j + mu Z_ij / 2
    + mu (2 beta w_ij - 1/(d_i + delta) - 1/(d_j + delta))`` per sampled peer ``j``."""
    linear, others = _block_terms(own_loss, own_confidence, peers, params)
    w = np.asarray(block, dtype=np.float64)
    d_i = other_degree + w.sum()
    grad: np.ndarray = linear + params.mu * (2 * params.beta * w - 1.0 / (d_i + params.delta)
                                             - 1.0 / (others + w + params.delta))
    return grad


def _prox_step(block: np.ndarray, other_degree: float, own_loss: float, own_confidence: float,
               peers: Sequence[PeerView], params: GraphParams) -> np.ndarray:
    """One projected gradient step on the block, with backtracking on the constant."""
    grad = edge_gradient(block, other_degree, own_loss, own_confidence, peers, params)
    before = block_objective(block, other_degree, own_loss, own_confidence, peers, params)
    _, others = _block_terms(own_loss, own_confidence, peers, params)
    d_i = other_degree + block.sum()
    # the block Hessian's largest eigenvalue at this point (barrier curvature
    # shrinks as degrees grow, so stepping up is safe; stepping down is checked)
    lipschitz = params.mu * (2 * params.beta + len(peers) / (d_i + params.delta) ** 2
                             + float(np.max(1.0 / (others + block + params.delta) ** 2)))
    ceiling = params.worst_lipschitz
    while True:
        lipschitz = min(lipschitz, ceiling)
        new = np.maximum(0.0, block - grad / lipschitz)
        step = new - block
        after = block_objective(new, other_degree, own_loss, own_confidence, peers, params)
        bound = before + float(np.dot(grad, step)) + lipschitz / 2 * float(np.dot(step, step))
        if after <= bound + 1e-12 * max(1.0, abs(before)) or lipschitz >= ceiling:
            return new
        lipschitz *= 2.0


# ------------------------------------------------------------------ one node's graph
@dataclass
class CollabGraph(Generic[K]):
    """One node's side of the collaboration graph: its weights to the peers it met."""

    params: GraphParams
    weights: dict[K, float] = field(default_factory=dict)
    updates: int = 0

    @property
    def degree(self) -> float:
        """``d_i``: the sum of this node's edge weights."""
        return float(sum(self.weights.values()))

    def weight(self, peer: K) -> float:
        """The weight on the edge to ``peer`` (0 for a peer never met)."""
        return self.weights.get(peer, 0.0)

    def set_weight(self, peer: K, value: float) -> None:
        """Take the weight a peer computed for our shared edge (the graph is undirected:
        whoever last updated an edge tells the other end)."""
        value = min(_finite(value, "edge weight", minimum=0.0), self.params.max_edge_weight)
        if value > 0.0:
            self.weights[peer] = value
            if len(self.weights) > self.params.max_edges:  # bounded: drop the lightest edge
                lightest = min(self.weights, key=lambda p: self.weights[p])
                del self.weights[lightest]
        else:
            self.weights.pop(peer, None)

    def update(self, peers: Mapping[K, PeerView], own_loss: float,
               own_confidence: float) -> dict[K, float]:
        """One graph step on the block of the sampled ``peers``; returns their new weights
        (to tell each of them)."""
        if not peers:
            return {}
        own_loss = _finite(own_loss, "own loss", minimum=0.0)
        own_confidence = _finite(own_confidence, "own confidence")
        if not 0.0 < own_confidence <= 1.0:
            raise GraphError(f"own confidence: expected a number in (0, 1], got {own_confidence}")
        ids = list(peers)
        views = [peers[j] for j in ids]
        block = np.array([self.weight(j) for j in ids])
        other = max(0.0, self.degree - float(block.sum()))
        new = np.minimum(_prox_step(block, other, own_loss, own_confidence, views, self.params),
                         self.params.max_edge_weight)
        for j, value in zip(ids, new, strict=True):
            self.set_weight(j, float(value))
        self.updates += 1
        return {j: float(v) for j, v in zip(ids, new, strict=True)}

    def neighbours(self, limit: int | None = None) -> list[tuple[K, float]]:
        """Peers with a positive weight, heaviest first (at most ``limit``)."""
        ranked = sorted(self.weights.items(), key=lambda kv: -kv[1])
        return ranked if limit is None else ranked[:limit]

    def share(self, peer: K) -> float:
        """The fraction of this node's degree on the edge to ``peer``."""
        d = self.degree
        return self.weight(peer) / d if d > 0 else 0.0


# ------------------------------------------------------------------ models
def mixing_rate(own_confidence: float, params: GraphParams) -> float:
    """``a = mu / (mu + c_i L_loc)``: how far a wake-up moves the model to the neighbours'."""
    return params.mu / (params.mu + own_confidence * params.local_lipschitz)


def mix_models(own: np.ndarray, neighbours: Mapping[K, np.ndarray],
               weights: Mapping[K, float], own_confidence: float,
               params: GraphParams) -> np.ndarray:
    """The model step: ``(1 - a) theta_i + a sum_j (w_ij / W) theta_j`` over the
    neighbours whose models are known (``W``: their total weight, ``d_i`` when all
    are known). Without a weighted neighbour the model is returned unchanged."""
    own = np.asarray(own)
    total = 0.0
    acc = np.zeros(own.shape, dtype=np.float64)
    for peer, model in neighbours.items():
        w = float(weights.get(peer, 0.0))
        if w <= 0.0:
            continue
        model = np.asarray(model)
        if model.shape != own.shape:
            raise GraphError(f"mix_models: peer {peer!r} sent a model of shape {model.shape}, "
                             f"expected {own.shape}")
        if not np.isfinite(model).all():
            raise GraphError(f"mix_models: the model of peer {peer!r} holds NaN or infinite values")
        acc += w * model
        total += w
    if total <= 0.0:
        return own.copy()
    a = mixing_rate(own_confidence, params)
    mixed: np.ndarray = ((1 - a) * own.astype(np.float64) + a * acc / total).astype(own.dtype)
    return mixed


# ------------------------------------------------------------------ privacy
def laplace_scale(epsilon: float, sensitivity: float, samples: int) -> float:
    """The slides' ``s_i = L_0 / (epsilon_i m_i)`` (0 when ``epsilon`` is infinite: no noise)."""
    if not epsilon > 0:
        raise GraphError(f"laplace_scale: epsilon must be > 0 (inf: no noise), got {epsilon!r}")
    if not (math.isfinite(sensitivity) and sensitivity >= 0) or samples < 1:
        raise GraphError(f"laplace_scale: expected sensitivity >= 0 and samples >= 1, got "
                         f"{sensitivity!r} and {samples!r}")
    return 0.0 if math.isinf(epsilon) else sensitivity / (epsilon * samples)


def release_noise(rng: np.random.Generator, size: int, epsilon: float, sensitivity: float,
                  samples: int, own_confidence: float, params: GraphParams) -> np.ndarray:
    """The noise a release adds to the parameters: ``eta ~ Laplace(0, s_i)^p`` on the
    gradient, times the step's ``c_i / (mu + c_i L_loc)`` (float32)."""
    scale = laplace_scale(epsilon, sensitivity, samples)
    if scale == 0.0:
        return np.zeros(size, dtype=np.float32)
    step = own_confidence / (params.mu + own_confidence * params.local_lipschitz)
    noise: np.ndarray = (step * rng.laplace(0.0, scale, size)).astype(np.float32)
    return noise


@dataclass
class PrivacyLedger:
    """A node's epsilon over its releases: ``T_i epsilon_i`` (basic composition, as the
    slides' theorem). ``budget`` 0 means unlimited; ``epsilon`` inf means no noise."""

    epsilon: float
    budget: float = 0.0
    releases: int = 0

    def __post_init__(self) -> None:
        if not self.epsilon > 0:
            raise GraphError(f"graph epsilon: expected a number > 0 (inf: no noise), got "
                             f"{self.epsilon!r}")
        if not (self.budget >= 0 and not math.isnan(self.budget)):
            raise GraphError(f"graph epsilon budget: expected a number >= 0 (0: none), got "
                             f"{self.budget!r}")

    @property
    def noisy(self) -> bool:
        """Whether releases carry noise (a finite epsilon)."""
        return math.isfinite(self.epsilon)

    @property
    def spent(self) -> float:
        """Epsilon spent so far (inf once a noiseless model was released)."""
        if self.releases == 0:
            return 0.0
        return self.releases * self.epsilon

    def allows(self) -> bool:
        """Whether one more release stays within the budget."""
        if self.budget == 0:
            return True
        return (self.releases + 1) * self.epsilon <= self.budget * (1 + 1e-12)

    def record(self) -> None:
        """Count one release."""
        self.releases += 1
