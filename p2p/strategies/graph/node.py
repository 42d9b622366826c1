"""The learned collaboration graph on a node (paper 003, Bellet et al.).

Each node keeps its own whole model (no ``[[models]]``: nothing is push-summed)
and weights on edges to peers it met. A background task wakes on a Poisson clock
(mean ``strategy.graph_period`` s); at each wake-up the node pulls the last
released model of ``graph_kappa`` sampled peers and its ``graph_neighbours``
heaviest neighbours (:class:`~p2p.strategies.graph.messages.GraphPull`); under
the model lock it steps the graph on the sampled edges, mixes its model and adds
one release's Laplace noise (:mod:`p2p.strategies.graph.maths`), serving the
result until the next wake-up; it sends each sampled peer its edge's new weight
(:class:`GraphWeight`), taken only from a peer with an edge or sampled lately,
clamped, within ``graph_max_edges``. ``graph_epsilon_budget`` stops wake-ups.
All nodes start from one initialisation; edge weights are not checkpointed.

How it works: docs/design/strategies.md; use: docs/guide/strategies.md.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
import trio

from p2p.strategies.base import LossTerm, StrategyHost
from p2p.strategies.graph.maths import (
    CollabGraph,
    GraphError,
    GraphParams,
    PeerView,
    PrivacyLedger,
    confidence,
    laplace_scale,
    mix_models,
    output_distance,
    release_noise,
    softmax,
)
from p2p.strategies.graph.messages import (
    GraphAck,
    GraphMessageError,
    GraphPull,
    GraphReply,
    GraphWeight,
    PeerState,
    graph_digest,
    peer_state_of,
    weight_of,
)
from p2p.strategies.graph.settings import GraphKeys
from p2p.wire.messages import Error

if TYPE_CHECKING:
    from learner.network import PartialNetwork
    from p2p.config import NodeConfig
    from p2p.wire.codec import Message
    from p2p.wire.handshake import PeerInfo

__all__ = ["GraphSettings", "GraphStrategy", "build", "common_init_seed"]

logger = logging.getLogger(__name__)

#: Training samples the local loss is measured on (a bounded forward pass).
LOSS_SAMPLES = 1024
#: Wake-ups whose sampled peers may still set the weight of their edge to this node.
RECENT_WAKEUPS = 8


def common_init_seed(notation: str) -> int:
    """The seed every node of a network notation initialises its model from."""
    return int.from_bytes(hashlib.blake2b(b"graph-init/" + notation.encode(),
                                          digest_size=4).digest(), "big")


@dataclass(frozen=True)
class GraphSettings:
    """The ``strategy.graph_*`` keys."""

    params: GraphParams
    period: float = 1.0
    epsilon: float = float("inf")
    epsilon_budget: float = 0.0
    sensitivity: float = 1.0
    confidence_samples: int = 1000
    seed: int = 0


class GraphStrategy:
    """``strategy.name = "graph"`` (see the module docstring)."""

    name = "graph"

    def __init__(self, settings: GraphSettings) -> None:
        self.settings = settings
        self.params = settings.params
        self.graph: CollabGraph[bytes] = CollabGraph(settings.params)
        self.ledger = PrivacyLedger(settings.epsilon, settings.epsilon_budget)
        self._rng = np.random.default_rng(np.random.SeedSequence([settings.seed, 0x6EA9]))
        self._host: StrategyHost | None = None
        self._digest = b""
        self._public = torch.zeros(0)
        self._train_x = torch.zeros(0)
        self._train_y = torch.zeros(0, dtype=torch.int64)
        self._scratch: PartialNetwork | None = None
        self._samples = 1
        self.confidence = 1.0
        self._released = np.zeros(0, np.float32)
        self._released_round = 0
        self._released_loss = 0.0
        self.wakeups = 0
        self.pulls = 0
        self.pull_failures = 0
        self.rejected = 0
        self.budget_reached = False
        # peers sampled in the last wake-ups: with the graph's own edges, the only peers
        # whose weights are taken (anyone else could make itself our heaviest neighbour)
        self._recent: deque[frozenset[bytes]] = deque(maxlen=RECENT_WAKEUPS)

    @property
    def host(self) -> StrategyHost:
        if self._host is None:
            raise RuntimeError("graph: not installed on a node")
        return self._host

    # ------------------------------------------------------------------ install
    def install(self, host: StrategyHost) -> None:
        """Check the node shares nothing and holds a public split; start every node from
        one initialisation; serve pulls and weights."""
        from learner.network import PartialNetwork

        if host.cores:
            raise RuntimeError(f"graph: the node shares models {sorted(host.cores)}; the graph "
                               "strategy mixes whole models itself (declare no [[models]])")
        data = host.learning.data
        if data.public_x.ndim != 2 or data.public_x.shape[0] < 1:
            raise ValueError("graph: needs a public split to compare outputs on; set "
                             "data.public_size (e.g. 200 for digits)")
        network = host.learning.network
        notation = network.layout.network.notation()
        self._host = host
        self._digest = graph_digest(notation, data.public_x)
        self._public = torch.from_numpy(np.ascontiguousarray(data.public_x, dtype=np.float32))
        self._train_x = torch.from_numpy(np.ascontiguousarray(data.train_x[:LOSS_SAMPLES],
                                                              dtype=np.float32))
        self._train_y = torch.from_numpy(np.asarray(data.train_y[:LOSS_SAMPLES], dtype=np.int64))
        self._samples = int(data.train_y.size)
        self.confidence = confidence(self._samples, self.settings.confidence_samples)
        self._scratch = PartialNetwork(network.layout, common_init_seed(notation))
        if host.rounds_done() == 0:
            with torch.no_grad():
                network.flat.copy_(self._scratch.flat)
        self._release(self._vector(), host.rounds_done())
        host.requests.add(GraphPull, self._serve_pull)
        host.requests.add(GraphWeight, self._serve_weight)

    def loss_term(self) -> LossTerm | None:
        """No extra loss: the smoothing acts through the mixing step."""
        return None

    def after_round(self) -> None:
        """Nothing after a round: the graph runs on its own clock."""

    # ------------------------------------------------------------------ maths helpers
    def _vector(self) -> np.ndarray:
        vec: np.ndarray = self.host.learning.network.flat.detach().numpy().copy()
        return vec

    @torch.no_grad()
    def _outputs(self, vector: np.ndarray) -> np.ndarray:
        scratch = self._scratch
        assert scratch is not None
        scratch.flat.copy_(torch.from_numpy(np.ascontiguousarray(vector, dtype=np.float32)))
        scratch.eval()
        return softmax(scratch(self._public).numpy())

    @torch.no_grad()
    def _loss(self, vector: np.ndarray) -> float:
        scratch = self._scratch
        assert scratch is not None
        scratch.flat.copy_(torch.from_numpy(np.ascontiguousarray(vector, dtype=np.float32)))
        scratch.eval()
        return float(F.cross_entropy(scratch(self._train_x), self._train_y))

    def _release(self, vector: np.ndarray, rounds: int) -> None:
        self._released = np.ascontiguousarray(vector, dtype=np.float32)
        self._released_round = rounds
        self._released_loss = self._loss(self._released)

    def measure(self, sampled: Mapping[bytes, PeerState]) -> tuple[np.ndarray, float,
                                                                   dict[bytes, PeerView]]:
        """Blocking part 1 of a wake-up: this node's model and loss, and its output distance
        to each sampled peer's released model."""
        own = self._vector()
        own_out = self._outputs(own)
        views = {peer: PeerView(distance=output_distance(own_out, self._outputs(s.model)),
                                loss=s.loss, confidence=s.confidence, degree=s.degree,
                                weight_back=s.weight_back)
                 for peer, s in sampled.items()}
        return own, self._loss(own), views

    def mix_and_release(self, own: np.ndarray, models: Mapping[bytes, np.ndarray],
                        weights: Mapping[bytes, float]) -> None:
        """Blocking part 2: mix with the neighbours, add one release's noise, write the model
        and release it."""
        mixed = mix_models(own, models, weights, self.confidence, self.params)
        if self.ledger.noisy:
            mixed = mixed + release_noise(self._rng, mixed.size, self.settings.epsilon,
                                          self.settings.sensitivity, self._samples,
                                          self.confidence, self.params)
        with torch.no_grad():
            self.host.learning.network.flat.copy_(torch.from_numpy(mixed.astype(np.float32)))
        self._release(mixed, self.host.rounds_done())

    async def step(self, sampled: Mapping[bytes, PeerState],
                   neighbours: Mapping[bytes, np.ndarray]) -> dict[bytes, float]:
        """One wake-up's computation (call under the model lock): distances, graph step on
        `sampled` (in the event loop, where the weight handler also writes the graph),
        mixing with the heaviest neighbours, noise, release. Returns the sampled peers' new
        edge weights."""
        runner = self.host.runner
        own, own_loss, views = await runner.run_blocking(functools.partial(self.measure,
                                                                           sampled))
        new = self.graph.update(views, own_loss, self.confidence)
        top = dict(self.graph.neighbours(self.params.max_neighbours))
        models = {p: m for p, m in neighbours.items() if p in top}
        models.update({p: s.model for p, s in sampled.items() if p in top})
        self.ledger.record()
        await runner.run_blocking(functools.partial(self.mix_and_release, own, models, top))
        return new

    # ------------------------------------------------------------------ background task
    async def run(self) -> None:
        """Wake on a Poisson clock until the node stops (or the epsilon budget is spent)."""
        while True:
            await trio.sleep(float(self._rng.exponential(self.settings.period)))
            if self.host.rounds_done() < 1:
                continue  # nothing trained yet: every model is still the common start
            if not self.ledger.allows():
                if not self.budget_reached:
                    self.budget_reached = True
                    logger.info("graph: epsilon budget %.4g reached after %d releases; no more "
                                "wake-ups", self.ledger.budget, self.ledger.releases)
                return
            await self.wake()

    async def pull(self, peer: bytes) -> PeerState | None:
        """One peer's checked state; None when it did not answer or sent something unusable."""
        reply = await self.host.request(peer, GraphPull(self._digest), GraphReply)
        if reply is None:
            self.pull_failures += 1
            return None
        try:
            state = peer_state_of(reply, self._digest, int(self._released.size))
        except GraphMessageError as exc:
            self.rejected += 1
            logger.warning("graph: dropped the reply of %s: %s", peer[:4].hex(), exc)
            return None
        self.pulls += 1
        return state

    async def wake(self) -> None:
        """One wake-up (see the module docstring)."""
        host = self.host
        sampled_ids = list(host.sample_peers(self.params.kappa))
        self._recent.append(frozenset(sampled_ids))
        heavy = [p for p, _ in self.graph.neighbours(self.params.max_neighbours)
                 if p not in sampled_ids]
        sampled: dict[bytes, PeerState] = {}
        neighbours: dict[bytes, np.ndarray] = {}
        for peer in sampled_ids:
            state = await self.pull(peer)
            if state is not None:
                sampled[peer] = state
        for peer in heavy:
            state = await self.pull(peer)
            if state is not None:
                neighbours[peer] = state.model
        if not sampled and not neighbours:
            return
        async with host.model_lock:
            try:
                new = await self.step(sampled, neighbours)
            except GraphError as exc:  # a peer's values the maths refused
                self.rejected += 1
                logger.warning("graph: wake-up skipped: %s", exc)
                return
        self.wakeups += 1
        for peer, weight in new.items():
            ack = await host.request(peer, GraphWeight(self._digest, weight), GraphAck)
            if ack is None:
                logger.debug("graph: %s did not take the weight of our edge", peer[:4].hex())

    # ------------------------------------------------------------------ handlers
    async def _serve_pull(self, peer: PeerInfo, msg: GraphPull) -> Message:
        """Answer with the last release and this node's side of the graph."""
        if msg.digest != self._digest:
            return Error("graph_mismatch", "the network or the public split differs from "
                         "this node's (network, data.task, data.seed, data.public_size)")
        return GraphReply(self._digest, self._released_round, self._released_loss,
                          self.confidence, self.graph.degree, self.graph.weight(peer.node_id),
                          self._released)

    def knows(self, peer: bytes) -> bool:
        """Whether `peer` may set the weight of its edge to this node: it holds an edge in
        this node's graph or was sampled in one of its last :data:`RECENT_WAKEUPS` wake-ups."""
        return peer in self.graph.weights or any(peer in ids for ids in self._recent)

    async def _serve_weight(self, peer: PeerInfo, msg: GraphWeight) -> Message:
        """Take the weight a peer computed for our edge, from a peer this node knows (see
        :meth:`knows`), clamped to what this node's own update can produce."""
        try:
            weight = weight_of(msg, self._digest)
        except GraphMessageError as exc:
            self.rejected += 1
            return Error("graph_bad_weight", str(exc))
        if not self.knows(peer.node_id):
            self.rejected += 1
            return Error("graph_unknown_peer", "graph weight: this node has no edge to the "
                         "sender and did not sample it lately; it sets the edge itself when "
                         "it samples the sender")
        weight = min(weight, self.params.max_edge_weight)
        self.graph.set_weight(peer.node_id, weight)
        return GraphAck(weight)

    # ------------------------------------------------------------------ status
    def status(self) -> Mapping[str, object]:
        """Heaviest edges (id prefix: share of the degree), degree, privacy spent, counts."""
        degree = self.graph.degree
        top = self.graph.neighbours(self.params.max_neighbours)
        noisy = self.ledger.noisy
        return {
            "degree": round(degree, 4),
            "top_weights": ({p.hex()[:8]: round(w / degree, 4) for p, w in top}
                            if degree > 0 else {}),
            "neighbours": len(self.graph.weights),
            "wakeups": self.wakeups,
            "releases": self.ledger.releases,
            "epsilon_per_release": self.settings.epsilon if noisy else None,
            "epsilon_spent": self.ledger.spent if noisy else None,
            "laplace_scale": laplace_scale(self.settings.epsilon, self.settings.sensitivity,
                                           self._samples) if noisy else 0.0,
            "confidence": round(self.confidence, 4),
            "pulls": self.pulls,
            "pull_failures": self.pull_failures,
            "rejected": self.rejected,
        }


def build(config: NodeConfig) -> GraphStrategy:
    """The registry's factory: the ``strategy.graph_*`` keys."""
    s = config.strategy.of(GraphKeys)
    params = GraphParams(mu=s.graph_mu, beta=s.graph_beta, delta=s.graph_delta,
                         kappa=s.graph_kappa, local_lipschitz=s.graph_local_lipschitz,
                         max_neighbours=s.graph_neighbours, max_edges=s.graph_max_edges)
    epsilon = s.graph_epsilon if s.graph_epsilon > 0 else float("inf")
    return GraphStrategy(GraphSettings(params, period=s.graph_period, epsilon=epsilon,
                                       epsilon_budget=s.graph_epsilon_budget,
                                       sensitivity=s.graph_sensitivity,
                                       confidence_samples=s.graph_confidence_samples,
                                       seed=config.node.seed))
