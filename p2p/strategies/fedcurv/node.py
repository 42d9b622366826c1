"""FedCurv on a node: partial averaging plus an elastic penalty from gossiped sums.

For each shared model the node push-sums among its holders one vector
``fedcurv.<model>`` = ``[F_i, F_i * w_i, count, generation]`` (the count slot is
1 on the node with ``data.node_index`` 0), through a checked core
(:class:`~p2p.runtime.strategy_host.CheckedPushSum`). Sums are renewed by
generations, never edited (:func:`start_generation`); pushes of another
generation or with bad values are refused (:func:`check_pushed`), and a peer's
newer generation is entered at most once per ``jump_gap`` rounds.
:meth:`FedCurvStrategy.refresh` computes the pull from the current generation
(:mod:`p2p.strategies.fedcurv.maths`); the trainer adds
``lambda * (w' diag(A) w - 2 B' w)`` to every mini-batch loss. Vectors are not
checkpointed; without a count for ``COUNT_WAIT_ROUNDS`` rounds the node warns.

How it works: docs/design/strategies.md ("FedCurv"); use: docs/guide/strategies.md.
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
