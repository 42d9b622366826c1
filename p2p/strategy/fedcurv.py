"""FedCurv on a node: partial averaging plus an elastic penalty from two gossiped sums.

For each shared model the node gossips, by push-sum among that model's holders
(:meth:`~p2p.strategy.base.StrategyHost.add_gossiped`), one vector
``fedcurv.<model>``: its diagonal Fisher ``F_i`` on the model's parameters, then
``F_i * w_i`` (``w_i`` the model's values when ``F_i`` was estimated), then one
count slot (1 on the node with ``data.node_index`` 0, 0 elsewhere), so the slot's
estimate is ``1 / N``. One vector, not two: both sums then mix with the same
push-sum weights, so their ratio (the pull's target) stays a weighted mean of the
nodes' parameters while they mix (two cores gave targets far off, and divergence).

Every ``strategy.fedcurv_every`` rounds :meth:`FedCurvStrategy.run` estimates
``F_i`` (``strategy.fedcurv_samples`` training samples, through the node's runner,
under the model lock) and moves its contributions to the new ``F_i`` and
``F_i * w_i``. After every round the penalty's sums over the other holders are
refreshed from the estimates (:func:`~learner.strategies.fedcurv.estimated_pull`:
ratios of the one core's estimates, no subtraction of the node's own term); the
trainer adds ``lambda * (w' diag(A) w - 2 B' w)`` to every mini-batch loss (the
maths: :mod:`learner.strategies.fedcurv`).

Pushes of the vector are checked before they merge (:func:`check_pushed`): Fisher
entries finite and >= 0, the count slot within [0, 1]; a push failing that is
refused. A node's own Fisher part never goes negative either: a new estimate is
applied only while none of the vector's pushes awaits its ack (the ack removes the
mass *sent*, so lowering the values under a push in flight could drive them below
zero), and a lower estimate takes out at most what the node's values hold, the rest
at its next estimate.

The node count needs the node with ``data.node_index`` 0 to hold the model: if it
does not (or is down from the start), the count slot stays 0 and the penalty never
applies; the node warns once after ``COUNT_WAIT_ROUNDS`` rounds without a count and
its status says ``count_missing``.

The gossiped vectors are not checkpointed, and a restart corrupts the sums for good
(no renewal repairs them): a restarted node rebuilds its vector from zero, so the
mass it held (its own contributions and the share of the others' it had mixed in)
is lost, while its old contributions already spread through the swarm stay there;
its next estimate then adds a whole new ``F_i`` on top. A restarted counter adds a
second 1 to the count slot (the estimated ``N`` halves for good). Restart every
holder of a model together (or not at all) to start its sums clean.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
import trio

from learner.strategies.fedcurv import (
    capped,
    estimated_pull,
    fisher_diagonal,
    penalty,
    totals,
)
from p2p.strategy.base import LossTerm, StrategyHost

if TYPE_CHECKING:
    from gossip import PushSum
    from p2p.config import NodeConfig

__all__ = ["COUNT_WAIT_ROUNDS", "FedCurvStrategy", "build", "check_pushed",
           "gossiped_fingerprint"]

logger = logging.getLogger(__name__)

#: Seconds between tries to apply a new estimate while a push is in flight.
PENDING_POLL = 0.05
#: Rounds after which a node still without a node count warns (once).
COUNT_WAIT_ROUNDS = 20
_COUNT_SLACK = 1e-9  # float rounding of convex mixes of 0 and 1


def check_pushed(values: np.ndarray) -> str | None:
    """Why pushed FedCurv values (``F``, ``F w``, count slot) are no honest holder's,
    or None: every holder's values are convex mixes of non-negative Fisher parts and
    of count slots 0 and 1."""
    n = (values.size - 1) // 2
    fisher, count = values[:n], float(values[-1])
    if not np.all(np.isfinite(values)):
        return "fedcurv: values not finite"
    if fisher.size and float(fisher.min()) < 0.0:
        return f"fedcurv: a Fisher entry is negative ({float(fisher.min()):.3g})"
    if not -_COUNT_SLACK <= count <= 1.0 + _COUNT_SLACK:
        return f"fedcurv: count slot {count:.6g} outside [0, 1]"
    return None


def gossiped_fingerprint(model_fingerprint: bytes, what: str) -> bytes:
    """The fingerprint of FedCurv's vector ``what`` ("fisher", "fw") of a shared model:
    the same on every holder of that model, distinct from any model's."""
    return hashlib.blake2b(b"fedcurv/" + what.encode() + b"/" + model_fingerprint,
                           digest_size=32).digest()


@dataclass
class _ModelSums:
    """One shared model's gossiped sums and this node's share of them."""

    index: torch.Tensor  # flat parameter indices of the model (canonical order)
    core: PushSum  # F_i, F_i * w_i, count slot
    own_f: np.ndarray
    own_fw: np.ndarray
    anchor: np.ndarray  # the model's values at this node's last Fisher estimate
    a: torch.Tensor  # sum over the others of F_j (float32, read by the loss term)
    b: torch.Tensor  # sum over the others of F_j * w_j
    pending: tuple[np.ndarray, np.ndarray] | None = None  # (F, anchor) to apply


class FedCurvStrategy:
    """``strategy.name = "fedcurv"`` (see the module docstring)."""

    name = "fedcurv"

    def __init__(self, lam: float, every: int, samples: int, *, counter: bool,
                 seed: int, lr: float, max_nodes: float) -> None:
        self.lam = lam
        self.every = every
        self.samples = samples
        self.counter = counter
        self.lr = lr  # the stiffness cap (learner.strategies.fedcurv.capped)
        self.max_nodes = max_nodes  # no pull while the count says more nodes than this
        self._rng = np.random.default_rng(np.random.SeedSequence([seed, 0xFC]))
        self._host: StrategyHost | None = None
        self._models: dict[str, _ModelSums] = {}
        self._due = trio.Event()
        self.estimates = 0
        self.fisher_seconds = 0.0
        self._rounds_seen = 0
        self.count_missing = False  # no node count after COUNT_WAIT_ROUNDS rounds

    @property
    def host(self) -> StrategyHost:
        if self._host is None:
            raise RuntimeError("fedcurv: not installed on a node")
        return self._host

    def install(self, host: StrategyHost) -> None:
        """Add the two gossiped vectors of every shared model (own contributions zero)."""
        self._host = host
        network = host.learning.network
        for name, core in host.cores.items():
            n = core.length
            start = np.zeros(2 * n + 1)
            start[-1] = 1.0 if self.counter else 0.0
            sums = host.add_gossiped(f"fedcurv.{name}",
                                     gossiped_fingerprint(core.fingerprint, "sums"), start,
                                     check=check_pushed)
            self._models[name] = _ModelSums(
                network.owned_index_tensor(name), sums, np.zeros(n), np.zeros(n),
                network.extract(name), torch.zeros(n), torch.zeros(n))
        if not self._models:
            logger.warning("fedcurv: this node shares no model; the penalty stays zero")

    def loss_term(self) -> LossTerm | None:
        """``lambda * sum over models of (w' diag(A) w - 2 B' w)`` (None when lambda is 0)."""
        if self.lam == 0.0 or not self._models:
            return None
        flat = self.host.learning.network.flat_parameters()
        models = list(self._models.values())
        lam = self.lam

        def term() -> torch.Tensor:
            total = torch.zeros(())
            for m in models:
                total = total + penalty(flat[m.index], m.a, m.b, lam)
            return total
        return term

    def after_round(self) -> None:
        """Refresh the sums from the estimates; ask for a Fisher estimate when due."""
        if not self._models:
            return
        done = self.host.rounds_done() + 1  # the round just trained (not counted yet)
        if self.estimates == 0 or done % self.every == 0:
            self._due.set()
        self.apply_pending()
        self.refresh()
        self._rounds_seen += 1
        missing = any(_totals(m, self.max_nodes) is None for m in self._models.values())
        if missing and self._rounds_seen >= COUNT_WAIT_ROUNDS and not self.count_missing:
            logger.warning("fedcurv: no node count after %d rounds: the counter (the node "
                           "with data.node_index 0) may not hold this model or be down; "
                           "the penalty stays zero until the count arrives",
                           self._rounds_seen)
        self.count_missing = missing and self._rounds_seen >= COUNT_WAIT_ROUNDS

    def refresh(self) -> None:
        """Load ``A`` and ``B`` (the pull of the other holders) from the push-sum estimates."""
        for m in self._models.values():
            v = m.core.values
            n = m.own_f.size
            found = estimated_pull(np.append(v[:n], v[-1]), v[n:2 * n], self.max_nodes)
            if found is None:  # the count has not mixed in yet: no pull
                m.a.zero_()
                m.b.zero_()
                continue
            # targets beyond twice this node's largest parameter are not the others'
            bound = 2.0 * float(np.abs(m.anchor).max()) + 1.0
            a, b = capped(found[0], found[1], self.lam, self.lr, bound)
            m.a.copy_(torch.from_numpy(a))
            m.b.copy_(torch.from_numpy(b))

    async def run(self) -> None:
        """Estimate the Fisher diagonal when :meth:`after_round` says it is due."""
        host = self.host
        if not self._models:
            return  # nothing to estimate a Fisher for
        while True:
            await self._due.wait()
            self._due = trio.Event()
            async with host.model_lock:
                await self.estimate()
            while not self.apply_pending():
                await trio.sleep(PENDING_POLL)

    def apply_pending(self) -> bool:
        """Move the contributions to the estimates waiting for no push in flight;
        True when none waits any more."""
        applied, done = False, True
        for m in self._models.values():
            if m.pending is None:
                continue
            if m.core.outstanding:
                done = False
                continue
            f, anchor = m.pending
            m.own_f, m.own_fw = _move_contribution(m.core, m.own_f, m.own_fw, f, anchor)
            m.anchor, m.pending, applied = anchor, None, True
        if applied:
            self.refresh()
        return done

    async def estimate(self) -> None:
        """One Fisher estimate at the current parameters; the contributions follow it
        (caller holds the model lock)."""
        host = self.host
        learning = host.learning
        data = learning.data
        t0 = time.perf_counter()
        fisher = await host.runner.run_blocking(functools.partial(
            fisher_diagonal, learning.network, data.train_x, data.train_y,
            samples=self.samples, rng=self._rng))
        self.fisher_seconds += time.perf_counter() - t0
        for name, m in self._models.items():
            f = fisher[m.index.numpy()]
            anchor = learning.network.extract(name)
            fw = f * anchor
            if not (np.all(np.isfinite(f)) and np.all(np.isfinite(fw))):
                logger.error("fedcurv: the Fisher estimate of %s is not finite (the model "
                             "diverged?); contribution kept", name)
                continue
            m.pending = (f, anchor)
        self.estimates += 1
        self.apply_pending()

    def own_sums(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """This node's current contributions ``(F_i, F_i * w_i)`` for model ``name``."""
        m = self._models[name]
        return m.own_f.copy(), m.own_fw.copy()

    def gossiped_totals(self, name: str) -> tuple[np.ndarray, np.ndarray, float] | None:
        """``(sum F_j, sum F_j * w_j, N)`` as this node's estimates say (None before the
        count arrived)."""
        return _totals(self._models[name], self.max_nodes)

    def status(self) -> Mapping[str, object]:
        """Lambda, estimates made, the node count, the mean of A (first model) and whether
        the count is missing after ``COUNT_WAIT_ROUNDS`` rounds."""
        first = next(iter(self._models), None)
        found = None if first is None else self.gossiped_totals(first)
        return {
            "lambda": self.lam,
            "fisher_estimates": self.estimates,
            "fisher_seconds": round(self.fisher_seconds, 3),
            "nodes_estimate": None if found is None else round(found[2], 3),
            "others_fisher_mean": None if first is None
            else float(self._models[first].a.mean()),
            "count_missing": self.count_missing,
        }


def _move_contribution(core: PushSum, own_f: np.ndarray, own_fw: np.ndarray,
                       f: np.ndarray, anchor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Move this node's contribution towards ``(f, f * anchor)``; return the new one.

    The Fisher part of the node's values stays >= 0 (pushes with a negative entry are
    refused): a lower estimate takes out at most what the values hold, so the
    contribution may stay above ``f`` on some entries until the next estimate. The
    ``F w`` part follows what the Fisher part really became."""
    v = core.values
    w = core.weight
    n = own_f.size
    new_vals = np.maximum(v[:n] + (f - own_f) / w, 0.0)
    new_f = own_f + (new_vals - v[:n]) * w
    new_fw = new_f * anchor
    out = v.copy()
    out[:n] = new_vals
    out[n:2 * n] = v[n:2 * n] + (new_fw - own_fw) / w
    core.set_values(out)
    return new_f, new_fw


def _totals(m: _ModelSums, max_nodes: float) -> tuple[np.ndarray, np.ndarray, float] | None:
    v = m.core.values
    n = m.own_f.size
    return totals(np.append(v[:n], v[-1]), v[n:2 * n], max_nodes)


def build(config: NodeConfig) -> FedCurvStrategy:
    """The registry's factory: ``[strategy]`` fedcurv keys; node 0 counts; the sums wait
    until the count is within 4 x ``data.num_nodes``."""
    s = config.strategy
    return FedCurvStrategy(s.fedcurv_lambda, s.fedcurv_every, s.fedcurv_samples,
                           counter=config.data.node_index == 0, seed=config.node.seed,
                           lr=config.training.lr, max_nodes=4.0 * max(config.data.num_nodes, 2))
