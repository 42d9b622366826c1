"""FedCurv on a node: partial averaging plus an elastic penalty from gossiped sums.

For each shared model the node gossips, by push-sum among that model's holders
(:meth:`~p2p.strategies.base.StrategyHost.add_gossiped`), one vector
``fedcurv.<model>``: its diagonal Fisher ``F_i`` on the model's parameters, then
``F_i * w_i`` (``w_i`` the model's values when ``F_i`` was estimated), then one
count slot (1 on the node with ``data.node_index`` 0, 0 elsewhere, so the slot's
estimate is ``1 / N``), then the *generation* slot. One vector, not two: both sums
mix with the same push-sum weights, so the pull's target (their ratio) is a
weighted mean of the nodes' anchors.

**Generations.** The sums are renewed, never edited. A node enters generation
``g + 1`` when its own generation is ``strategy.fedcurv_every`` rounds old (with a
new Fisher estimate), or as soon as a push of a newer generation reaches it (with
its latest estimate): it restarts the vector at ``[F_i, F_i w_i, count, g + 1]``
with push-sum weight 1 (:func:`start_generation`). Pushes and replies of an older
generation are refused (:func:`check_pushed`, quietly:
:class:`~p2p.strategies.base.OutOfStep`), so each generation is a plain
push-sum of fixed, non-negative contributions, its estimates at every node and
every moment non-negative mixes of them, and the target ``est(F w) / est(F)`` a
*convex* mean of the anchors. The newest generation spreads as gossip does, so
nodes that started at different times follow the same generations. A generation a
*peer* announces is entered at most once per ``jump_gap`` rounds (besides the node's
own boundaries), and slots count modulo :data:`GENERATION_MODULUS`, so a liar
announcing ever newer (or huge) generations can neither reset the honest nodes' sums
at each push nor leave them without a next generation.

Why (the divergence at lambda >= 1, found by measurement): the former sums were
edited in place, a new estimate moving the node's contribution by ``new - old``.
The old contribution has by then mostly left the node, so subtracting it leaves a
local mass that is no longer a non-negative mix: ``est(F w) / est(F)`` extrapolated
(targets of 36 to 5000 while every parameter was below 1.6 to 44 in magnitude), and
the safety bound on targets (twice the node's largest parameter) grew with the
parameters it let the targets pull out: the largest parameter about doubled every
round (0.5 to 121 in 20 rounds, Fisher values to 1e4 and beyond).

The pull (:meth:`FedCurvStrategy.refresh`) reads the current generation (the
freshest anchors; its target and mean Fisher are convex mixes of this generation's
contributions from its first moment, the node's own among them until it has mixed)
with ``N`` from the larger usable count share of the current and the previous
generation; ``A = mean F * (N - 1)`` and ``B = A * t`` come from
:func:`~p2p.strategies.fedcurv.maths.estimated_pull` (ratios of one vector's
estimates, in which push-sum's weights cancel) and the stiffness cap of
:func:`~p2p.strategies.fedcurv.maths.capped`. The trainer adds
``lambda * (w' diag(A) w - 2 B' w)`` to every mini-batch loss.

Sums are renewed, never edited, because push-sum can add to a node's mass but not
take an old contribution back out of it; and the vector is a checked core
(:class:`~p2p.runtime.strategy_host.CheckedPushSum`), which replies from its free
mass, because the plain reply rule lets an ack take out more of a coordinate than a
node still holds. Both kept the mixes non-negative; the measurements behind them are
in docs/guide/strategies.md.

A node joins generation 0 (a fresh start) by *adding* its first estimate to its
zero vector (adding keeps every mix non-negative); a generation is started only
while none of the vector's pushes awaits its ack (a late ack would take mass of the
old generation out of the new one). Pushes and replies are checked
(:func:`check_pushed`): Fisher entries finite and >= 0 (up to rounding), the count
slot within [0, 1], the generation this node's; others are refused or dropped.

Restarts: the vectors are not checkpointed. A restarted node starts with a zero
vector and neither contributes nor counts in the first generation it enters (its
earlier contribution and count, if made, are already spread there); from the next
one on it takes part as any node. What a restart costs is the share of the
current generation's sums the node held, until the next generation; a restarted
counter adds no second 1.

The node count needs the node with ``data.node_index`` 0 to hold the model: if it
does not (or is down), the count slot stays 0 and the penalty never applies; the
node warns once after ``COUNT_WAIT_ROUNDS`` rounds without a count and its status
says ``count_missing``.
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

from gossip import LogLimiter, PushSumSnapshot
from p2p.strategies.base import LossTerm, OutOfStep, StrategyHost
from p2p.strategies.fedcurv.maths import (
    capped,
    contribute,
    estimated_pull,
    fisher_diagonal,
    penalty,
    totals,
)
from p2p.strategies.fedcurv.settings import FedCurvKeys

if TYPE_CHECKING:
    from gossip import PushSum
    from p2p.config import NodeConfig

__all__ = ["COUNT_WAIT_ROUNDS", "GENERATION_MODULUS", "FedCurvStrategy", "build", "check_pushed",
           "gossiped_fingerprint", "start_generation", "vector_of"]

logger = logging.getLogger(__name__)

#: Seconds between tries to apply a new estimate while a push is in flight.
PENDING_POLL = 0.05
#: Rounds after which a node still without a node count warns (once).
COUNT_WAIT_ROUNDS = 20
_COUNT_SLACK = 1e-9  # float rounding of convex mixes of 0 and 1
_FISHER_SLACK = 1e-9  # float rounding of convex mixes of non-negative values, relative
_GENERATION_SLACK = 0.25  # a mix of holders' generation slots is g up to rounding
#: Generation slots count modulo this (below the values' magnitude bound, MAX_ABS_VALUE);
#: a slot up to half of it ahead is newer, else older (serial-number arithmetic), so
#: no announced number, however large, leaves the honest nodes without a next one.
GENERATION_MODULUS = 1 << 19


def vector_of(fisher: np.ndarray, anchor: np.ndarray, *, count: float,
              generation: int) -> np.ndarray:
    """A node's contribution as gossiped: ``[F, F * anchor, count, generation]``."""
    return np.concatenate([fisher, fisher * anchor,
                           [count, float(generation % GENERATION_MODULUS)]])


def check_pushed(values: np.ndarray, generation: int | None = None) -> str | None:
    """Why pushed (or replied) FedCurv values ``[F, F w, count, generation]`` are no
    honest holder's of ``generation`` (None: any), or None: every holder's values are
    non-negative mixes of contributions of one generation (Fisher parts >= 0, count
    slots 0 and 1, generation slots all ``g``). Another generation is
    :class:`OutOfStep` (an honest node a little ahead or behind)."""
    n = (values.size - 2) // 2
    if values.size != 2 * n + 2:
        return f"fedcurv: {values.size} values, expected an even number"
    if not np.all(np.isfinite(values)):
        return "fedcurv: values not finite"
    fisher, count, gen = values[:n], float(values[-2]), float(values[-1])
    if fisher.size and float(fisher.min()) < -_FISHER_SLACK * float(np.abs(fisher).max()):
        return f"fedcurv: a Fisher entry is negative ({float(fisher.min()):.3g})"
    if not -_COUNT_SLACK <= count <= 1.0 + _COUNT_SLACK:
        return f"fedcurv: count slot {count:.6g} outside [0, 1]"
    if (abs(gen - round(gen)) > _GENERATION_SLACK or gen < -_GENERATION_SLACK
            or round(gen) >= GENERATION_MODULUS):
        return f"fedcurv: generation slot {gen:.6g} is no generation"
    if generation is not None and round(gen) != generation % GENERATION_MODULUS:
        return OutOfStep(f"fedcurv: generation slot {round(gen)}, this node is in "
                         f"{generation} (slot {generation % GENERATION_MODULUS})")
    return None


def start_generation(core: PushSum, values: np.ndarray) -> None:
    """Restart ``core``'s push-sum afresh at ``values`` with weight 1: the mass it held
    of the previous generation is dropped (call only while no push awaits its ack)."""
    v = np.asarray(values, dtype=np.float64)
    core.restore(PushSumSnapshot(fingerprint=core.fingerprint, values=v, estimate=v.copy(),
                                 weight=1.0, noisy=False, noise_age=0))


def gossiped_fingerprint(model_fingerprint: bytes, what: str) -> bytes:
    """The fingerprint of FedCurv's vector ``what`` of a shared model: the same on
    every holder of that model, distinct from any model's."""
    return hashlib.blake2b(b"fedcurv/" + what.encode() + b"/" + model_fingerprint,
                           digest_size=32).digest()


@dataclass
class _ModelSums:
    """One shared model's gossiped sums and this node's share of them."""

    index: torch.Tensor  # flat parameter indices of the model (canonical order)
    core: PushSum  # F_i, F_i * w_i, count slot, generation slot
    own_f: np.ndarray  # this node's contribution to the current generation
    own_fw: np.ndarray
    anchor: np.ndarray  # the model's values at this node's last Fisher estimate
    # sum over the others of F_j and of F_j * w_j (float32, read by the loss term):
    # replaced by refresh(), never edited in place (a step's backward may still use them)
    a: torch.Tensor
    b: torch.Tensor
    generation: int = 0  # the generation the core is in
    entered: int = 0  # this node's rounds when it entered it
    joined: bool = False  # contributed to (or, restarted, kept out of) this generation
    newest: int = 0  # the newest generation heard of (or due by this node's rounds)
    due: bool = False  # this node's own generation is ``every`` rounds old: the next is due
    jumped: int | None = None  # this node's rounds when it last entered a peer's generation
    skip: bool = False  # restarted: no contribution to the next generation entered
    estimated: int = 0  # this node's rounds when it last asked for an estimate
    awaiting: bool = False  # an estimate is asked for and not applied yet
    latest: tuple[np.ndarray, np.ndarray] | None = None  # the last estimate (F, anchor)
    previous: np.ndarray | None = None  # the previous generation's last values
    share: float | None = None  # the last usable count share (1 / N), kept across generations
    pending: tuple[np.ndarray, np.ndarray] | None = None  # a new estimate (F, anchor)


class FedCurvStrategy:
    """``strategy.name = "fedcurv"`` (see the module docstring)."""

    name = "fedcurv"

    def __init__(self, lam: float, every: int, samples: int, *, counter: bool,
                 seed: int, lr: float, max_nodes: float) -> None:
        self.lam = lam
        self.every = every
        self.samples = samples
        self.counter = counter
        self.lr = lr  # the stiffness cap (p2p.strategies.fedcurv.maths.capped)
        # A generation a peer announces restarts this node's sums: at most once per
        # this many rounds (besides its own boundaries), so a liar announcing ever
        # newer generations cannot keep every honest node's sums from mixing.
        self.jump_gap = max(1, every // 2)
        self.max_nodes = max_nodes  # no pull while the count says more nodes than this
        self._rng = np.random.default_rng(np.random.SeedSequence([seed, 0xFC]))
        self._host: StrategyHost | None = None
        self._models: dict[str, _ModelSums] = {}
        self._due = trio.Event()
        self.estimates = 0
        self.generations = 0  # generations entered (own boundary or a newer one heard)
        self.fisher_seconds = 0.0
        self._rounds_seen = 0
        self.count_missing = False  # no node count after COUNT_WAIT_ROUNDS rounds
        self._lines = LogLimiter(logger)  # a Fisher estimate gone wrong: a line a minute

    @property
    def host(self) -> StrategyHost:
        if self._host is None:
            raise RuntimeError("fedcurv: not installed on a node")
        return self._host

    def install(self, host: StrategyHost) -> None:
        """Add the gossiped vector of every shared model: zero contributions, generation
        0 (a restarted node, already past round 0, stays out of the first generation it
        enters)."""
        self._host = host
        network = host.learning.network
        rounds = host.rounds_done()
        restarted = rounds > 0
        for name, core in host.cores.items():
            n = core.length
            start = vector_of(np.zeros(n), np.zeros(n),
                              count=1.0 if self.counter and not restarted else 0.0,
                              generation=0)
            box: list[_ModelSums] = []  # the check reads the sums it guards

            def check(values: np.ndarray, box: list[_ModelSums] = box) -> str | None:
                return self._admit(box[0], values) if box else check_pushed(values)

            sums = host.add_gossiped(f"fedcurv.{name}",
                                     gossiped_fingerprint(core.fingerprint, "sums"), start,
                                     check=check)
            m = _ModelSums(network.owned_index_tensor(name), sums, np.zeros(n), np.zeros(n),
                           network.extract(name), torch.zeros(n), torch.zeros(n),
                           entered=rounds, joined=restarted, skip=restarted,
                           estimated=rounds)
            box.append(m)
            self._models[name] = m
        if not self._models:
            logger.warning("fedcurv: this node shares no model; the penalty stays zero")

    def _admit(self, m: _ModelSums, values: np.ndarray) -> str | None:
        """The check of pushed (or replied) values: honest values of this generation
        merge; a newer generation is entered at once when no push of ours is in flight
        (else as soon as none is); an older one is refused (the sender moves on when it
        hears of the newer)."""
        reason = check_pushed(values)
        if reason is not None:
            return reason
        ahead = (round(float(values[-1])) - m.generation) % GENERATION_MODULUS
        if ahead >= GENERATION_MODULUS // 2:
            return OutOfStep(f"fedcurv: generation {m.generation + ahead - GENERATION_MODULUS}"
                             f", this node is in {m.generation}")
        if ahead:
            heard = m.generation + ahead
            m.newest = max(m.newest, heard)
            if m.core.outstanding or not self._advance(m, heard):
                return OutOfStep(f"fedcurv: generation {heard}, newer than this node's "
                                 f"{m.generation}: entered once its push is acknowledged "
                                 f"(and at most once per {self.jump_gap} rounds)")
        return None

    def _may_jump(self, m: _ModelSums) -> bool:
        """Whether ``m`` may enter a newer generation now: its own is due, or it has
        not entered one a peer announced within the last ``jump_gap`` rounds."""
        return (m.due or m.jumped is None
                or self.host.rounds_done() - m.jumped >= self.jump_gap)

    def _advance(self, m: _ModelSums, generation: int) -> bool:
        """:meth:`_enter` ``generation`` if :meth:`_may_jump` allows it now."""
        if not self._may_jump(m):
            return False
        heard = not m.due
        if not self._enter(m, generation):
            return False
        if heard:
            m.jumped = self.host.rounds_done()
        return True

    def _enter(self, m: _ModelSums, generation: int) -> bool:
        """Start ``generation`` on ``m``'s core with this node's latest estimate (none
        yet: a zero contribution, added to at the first estimate; restarted: none in the
        first generation entered). Only while no push is in flight."""
        if m.core.outstanding:
            return False
        m.previous = m.core.values
        skip, m.skip = m.skip, False
        f, anchor = m.latest if m.latest is not None and not skip else (None, m.anchor)
        zero = np.zeros_like(m.own_f)
        start_generation(m.core, vector_of(
            zero if f is None else f, anchor,
            count=1.0 if self.counter and not skip else 0.0, generation=generation))
        m.generation, m.newest = generation, max(m.newest, generation)
        m.entered, m.due = self.host.rounds_done(), False
        m.joined = f is not None or skip
        m.own_f = zero if f is None else f
        m.own_fw = m.own_f * anchor
        m.anchor = anchor
        self.generations += 1
        return True

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
        """Refresh the pull from the estimates; ask for a Fisher estimate when this
        node's generation (the next one is then due) or its last estimate is ``every``
        rounds old, or it has not contributed yet."""
        if not self._models:
            return
        done = self.host.rounds_done() + 1  # the round just trained (not counted yet)
        for m in self._models.values():
            if done - m.entered >= self.every:
                m.newest, m.due = max(m.newest, m.generation + 1), True
            entering = m.newest > m.generation and self._may_jump(m)
            if not m.awaiting and (entering or not m.joined
                                   or done - m.estimated >= self.every):
                m.awaiting, m.estimated = True, done
                self._due.set()
        self.apply_pending()
        self.refresh()
        self._rounds_seen += 1
        missing = all(self._source(m) is None for m in self._models.values())
        if missing and self._rounds_seen >= COUNT_WAIT_ROUNDS and not self.count_missing:
            logger.warning("fedcurv: no node count after %d rounds: the counter (the node "
                           "with data.node_index 0) may not hold this model or be down; "
                           "the penalty stays zero until the count arrives",
                           self._rounds_seen)
        self.count_missing = missing and self._rounds_seen >= COUNT_WAIT_ROUNDS

    def _source(self, m: _ModelSums) -> tuple[np.ndarray, float] | None:
        """What the pull reads: the current generation's values (its estimates are convex
        mixes of this generation's contributions from the start: the freshest anchors)
        and the count share saying ``N``: the larger of the current generation's and the
        previous one's last (the count starts on one node, so an unmixed share is mostly
        too small), else the last one found (``N`` changes slowly, and a short
        generation may end before the count reaches every node); None before any."""
        cur = m.core.values
        shares = [float(v[-2]) for v in (cur, m.previous) if v is not None]
        share = max((x for x in shares if x * self.max_nodes >= 1.0), default=None)
        if share is not None:
            m.share = share
        return None if m.share is None else (cur, m.share)

    def refresh(self) -> None:
        """Load ``A`` and ``B`` (the pull of the other holders) from the estimates, as new
        tensors: safe while a training step runs."""
        for m in self._models.values():
            source = self._source(m)
            n = m.own_f.size
            found = None if source is None else estimated_pull(
                np.append(source[0][:n], source[1]), source[0][n:2 * n], self.max_nodes)
            # New tensors, never edited in place: the event loop refreshes while the
            # worker thread may be between a step's forward, which saved them, and its
            # backward (an in-place edit made autograd refuse it and stopped nodes).
            if found is None:  # the count has not mixed in yet: no pull
                m.a, m.b = torch.zeros(n), torch.zeros(n)
                continue
            # targets are convex means of the anchors: no bound needed (see the docstring)
            a, b = capped(found[0], found[1], self.lam, self.lr)
            m.a = torch.from_numpy(a.astype(np.float32))
            m.b = torch.from_numpy(b.astype(np.float32))

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
        """Apply the estimates waiting and enter the newest generation heard of (a new
        generation waits for no push in flight); True when nothing waits any more."""
        applied, done = False, True
        for m in self._models.values():
            if m.pending is not None:
                f, anchor = m.pending
                m.latest, m.pending, m.awaiting = (f, anchor), None, False
                m.anchor = anchor
                if not m.joined and m.newest <= m.generation:
                    # adding to a zero contribution keeps every mix non-negative
                    contribute(m.core, vector_of(f, anchor, count=0.0, generation=0))
                    m.own_f, m.own_fw, m.joined = f, f * anchor, True
                applied = True
            if (m.newest > m.generation and m.latest is not None and not m.awaiting
                    and self._may_jump(m)):  # else after_round tries again
                if self._advance(m, m.newest):
                    applied = True
                else:
                    done = False
        if applied:
            self.refresh()
        return done

    async def estimate(self) -> None:
        """One Fisher estimate at the current parameters (caller holds the model lock)."""
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
            if not (np.all(np.isfinite(f)) and np.all(np.isfinite(f * anchor))):
                self._lines.log(trio.current_time(), name, logging.ERROR,
                                "fedcurv: the Fisher estimate of %s is not finite (the model "
                                "diverged?); contribution kept", name)
                m.awaiting = False
                continue
            m.pending = (f, anchor)
        self.estimates += 1
        self.apply_pending()

    def own_sums(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """This node's contributions ``(F_i, F_i * w_i)`` to the current generation of
        model ``name`` (zeros before it joined one)."""
        m = self._models[name]
        return m.own_f.copy(), m.own_fw.copy()

    def generation(self, name: str) -> int:
        """The generation model ``name``'s sums are in on this node."""
        return self._models[name].generation

    def gossiped_totals(self, name: str) -> tuple[np.ndarray, np.ndarray, float] | None:
        """``(sum F_j, sum F_j * w_j, N)`` of the current generation as this node's
        estimates say (None before the count arrived)."""
        v = self._models[name].core.values
        n = self._models[name].own_f.size
        return totals(np.append(v[:n], v[2 * n]), v[n:2 * n], self.max_nodes)

    def status(self) -> Mapping[str, object]:
        """Lambda, estimates made, the generation, the node count, the mean of A (first
        model) and whether the count is missing after ``COUNT_WAIT_ROUNDS`` rounds."""
        first = next(iter(self._models), None)
        found = None if first is None else self.gossiped_totals(first)
        return {
            "lambda": self.lam,
            "fisher_estimates": self.estimates,
            "fisher_seconds": round(self.fisher_seconds, 3),
            "generation": None if first is None else self._models[first].generation,
            "nodes_estimate": None if found is None else round(found[2], 3),
            "others_fisher_mean": None if first is None
            else float(self._models[first].a.mean()),
            "count_missing": self.count_missing,
        }


def build(config: NodeConfig) -> FedCurvStrategy:
    """The registry's factory: ``[strategy]`` fedcurv keys; node 0 counts; the sums wait
    until the count is within 4 x ``data.num_nodes``."""
    s = config.strategy.of(FedCurvKeys)
    return FedCurvStrategy(s.fedcurv_lambda, s.fedcurv_every, s.fedcurv_samples,
                           counter=config.data.node_index == 0, seed=config.node.seed,
                           lr=config.training.lr, max_nodes=4.0 * max(config.data.num_nodes, 2))
