"""FedLinked on a node: distillation towards peers' representations, no parameter sent.

After the FedLinked report (paper 002), without its server: every
``strategy.fedlinked_every`` rounds (from round ``fedlinked_warmup`` on) the node
computes its own representation of the public split, pulls those of
``fedlinked_peers`` sampled peers (:class:`~p2p.strategies.fedlinked.messages.FedLinkedPull`;
each reply checked, the newest of up to ``fedlinked_cache`` peers kept) and
computes the distillation target
(:func:`p2p.strategies.fedlinked.maths.distillation_target`). The trainer adds
``fedlinked_weight`` times the distillation loss on a batch of
``fedlinked_public_batch`` public samples. The node declares no partial model,
so no parameter byte leaves it; it serves its latest representation to pulls.

How it works: docs/design/strategies.md ("FedLinked"); use: docs/guide/strategies.md.
"""

from __future__ import annotations

import functools
import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import torch
import trio

from p2p.strategies.base import LossTerm, StrategyHost
from p2p.strategies.fedlinked.maths import (
    distillation_loss,
    distillation_target,
    public_representation,
    representation_tensor,
)
from p2p.strategies.fedlinked.messages import (
    MAX_FEATURES,
    MAX_ROWS,
    MAX_VALUES,
    FedLinkedMessageError,
    FedLinkedPull,
    FedLinkedReply,
    public_digest,
    representation_of,
)
from p2p.strategies.fedlinked.settings import FedLinkedKeys
from p2p.wire.messages import Error

if TYPE_CHECKING:
    from p2p.config import NodeConfig
    from p2p.wire.codec import Message
    from p2p.wire.handshake import PeerInfo

__all__ = ["FedLinkedStrategy", "build"]

logger = logging.getLogger(__name__)


class FedLinkedStrategy:
    """``strategy.name = "fedlinked"`` (see the module docstring)."""

    name = "fedlinked"

    def __init__(self, *, weight: float, eta: float, sharpness: float, peers: int, every: int,
                 warmup: int, cache: int, public_batch: int, seed: int) -> None:
        self.weight = weight
        self.eta = eta
        self.sharpness = sharpness
        self.peers = peers
        self.every = every
        self.warmup = warmup
        self.cache_size = cache
        self.public_batch = public_batch
        self._generator = torch.Generator().manual_seed(seed)
        self._host: StrategyHost | None = None
        self._public = torch.zeros(0)
        self._digest = b""
        self._own: np.ndarray | None = None  # latest own representation (served to peers)
        self._own_round = 0
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._target: torch.Tensor | None = None
        self._utilities: dict[bytes, float] = {}
        self._due = trio.Event()
        self.bytes_pulled = 0
        self.bytes_served = 0
        self.pulls = 0
        self.pull_failures = 0
        self.refreshes = 0

    @property
    def host(self) -> StrategyHost:
        if self._host is None:
            raise RuntimeError("fedlinked: not installed on a node")
        return self._host

    def install(self, host: StrategyHost) -> None:
        """Check the node shares nothing and holds a public split; serve pulls."""
        if host.cores:
            raise RuntimeError(f"fedlinked: the node shares models {sorted(host.cores)}; "
                               "FedLinked sends no parameters (declare no [[models]])")
        public_x = host.learning.data.public_x
        if public_x.ndim != 2 or public_x.shape[0] < 2:
            raise ValueError("fedlinked: needs a public split of at least 2 samples; set "
                             "data.public_size (e.g. 300 for digits)")
        if public_x.shape[0] > MAX_ROWS:
            raise ValueError(f"fedlinked: the public split has {public_x.shape[0]} samples, "
                             f"more than the {MAX_ROWS} a representation may hold; lower "
                             "data.public_size")
        self._host = host
        self._public = torch.from_numpy(np.ascontiguousarray(public_x, dtype=np.float32))
        self._digest = public_digest(public_x)
        width = representation_tensor(host.learning.network, self._public[:2]).shape[1]
        if width > MAX_FEATURES or width * public_x.shape[0] > MAX_VALUES:
            raise ValueError(f"fedlinked: a representation of {public_x.shape[0]} public samples "
                             f"x {width} features exceeds the limit of {MAX_VALUES} values; "
                             "lower data.public_size")
        host.requests.add(FedLinkedPull, self._serve)

    def loss_term(self) -> LossTerm | None:
        """``weight`` x the distillation loss on a random public batch (0 before a target)."""
        if self.weight == 0.0:
            return None
        network = self.host.learning.network
        public = self._public
        batch = min(self.public_batch, public.shape[0])

        def term() -> torch.Tensor:
            target = self._target
            if target is None:
                return torch.zeros(())
            index = torch.randperm(public.shape[0], generator=self._generator)[:batch]
            rep = representation_tensor(network, public[index])
            return self.weight * distillation_loss(rep, target[index])
        return term

    def after_round(self) -> None:
        """Ask :meth:`run` for a refresh when one is due."""
        done = self.host.rounds_done() + 1  # the round just trained (not counted yet)
        if done >= self.warmup and (done - self.warmup) % self.every == 0:
            self._due.set()

    async def run(self) -> None:
        """Refresh the target whenever :meth:`after_round` says it is due."""
        while True:
            await self._due.wait()
            self._due = trio.Event()
            await self.refresh()

    async def own_representation(self) -> np.ndarray:
        """Compute this node's representation now (under the model lock) and keep it."""
        host = self.host
        async with host.model_lock:
            rep = await host.runner.run_blocking(functools.partial(
                public_representation, host.learning.network, self._public.numpy()))
            self._own, self._own_round = rep, host.rounds_done()
        return rep

    async def pull(self, peer: bytes) -> np.ndarray | None:
        """One peer's representation, checked; None when it did not answer or its reply
        was unusable (logged)."""
        reply = await self.host.request(peer, FedLinkedPull(self._digest), FedLinkedReply)
        if reply is None:
            self.pull_failures += 1
            return None
        try:
            rep = representation_of(reply, self._digest, int(self._public.shape[0]))
        except FedLinkedMessageError as exc:
            self.pull_failures += 1
            logger.warning("fedlinked: dropped the reply of %s: %s", peer[:4].hex(), exc)
            return None
        self.pulls += 1
        self.bytes_pulled += rep.nbytes
        return rep

    async def refresh(self) -> None:
        """Own representation, pulls from sampled peers, then the new target."""
        own = await self.own_representation()
        for peer in self.host.sample_peers(self.peers):
            rep = await self.pull(peer)
            if rep is not None:
                self._cache[peer] = rep
                self._cache.move_to_end(peer)
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        if not self._cache:
            return
        peers = dict(self._cache)
        result = await self.host.runner.run_blocking(functools.partial(
            distillation_target, own, peers, eta=self.eta, sharpness=self.sharpness))
        self._target = torch.from_numpy(result.target)
        self._utilities = dict(result.utilities)
        self.refreshes += 1

    async def _serve(self, peer: PeerInfo, msg: FedLinkedPull) -> Message:
        """Answer a pull with this node's latest representation."""
        if msg.digest != self._digest:
            return Error("fedlinked_public_split", "the public split differs from this "
                         "node's (data.task, data.seed, data.public_size must match)")
        own = self._own if self._own is not None else await self.own_representation()
        self.bytes_served += own.nbytes
        return FedLinkedReply(self._digest, int(own.shape[0]), int(own.shape[1]),
                              self._own_round, np.ascontiguousarray(own.ravel(), np.float32))

    def utilities(self) -> dict[bytes, float]:
        """Each known peer's utility at the last refresh."""
        return dict(self._utilities)

    def status(self) -> Mapping[str, object]:
        """Utilities per peer (id prefix), traffic and refresh counts."""
        return {
            "weight": self.weight,
            "peers_known": len(self._cache),
            "utilities": {p[:4].hex(): round(u, 4) for p, u in self._utilities.items()},
            "representation_bytes_pulled": self.bytes_pulled,
            "representation_bytes_served": self.bytes_served,
            "parameter_bytes_sent": 0,
            "pulls": self.pulls,
            "pull_failures": self.pull_failures,
            "refreshes": self.refreshes,
        }


def build(config: NodeConfig) -> FedLinkedStrategy:
    """The registry's factory: the ``strategy.fedlinked_*`` keys."""
    s = config.strategy.of(FedLinkedKeys)
    return FedLinkedStrategy(weight=s.fedlinked_weight, eta=s.fedlinked_eta,
                             sharpness=s.fedlinked_sharpness, peers=s.fedlinked_peers,
                             every=s.fedlinked_every, warmup=s.fedlinked_warmup,
                             cache=s.fedlinked_cache, public_batch=s.fedlinked_public_batch,
                             seed=config.node.seed)
