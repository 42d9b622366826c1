"""What an honest-but-curious neighbour learns from the pushes it receives.

The push-sum cores (gossip/pushsum.py) with the node's settings and its
masking epochs (gossip/masking/epochs.py, the driver's steps: an epoch agreed
after a round when due, the noisy loop's extra waves while noise is held, the
fold) run a whole training run of ``--rounds`` rounds.  Local training is a
stand-in with the shape that matters: each node pulls its values towards a
private target, plus mini-batch noise (DP modes: each step's update clipped
and Gaussian noise added, as DP-SGD does, and the accountant of
learner/dp/accounting.py counts the steps).  Node 0 is the observer: it
records every push it receives.  For each mode (none, masked, dp, masked+dp),
per phase (pushes sent inside a masking epoch, flagged ``noisy``, and outside):

- ``values``: |corr(received - average, sender's trained values - average)|,
  the swarm's push-sum average (sum of mass over sum of weight) being what
  averaging makes public: 1 means the push is the sender's model, its private
  part included;
- ``updates``: |corr(difference of two pushes from one sender, the sender's
  local updates between them)|;
- next to the level of independent noise of the same length (mean and 99th
  percentile of |corr| between independent Gaussian vectors);
- inside epochs, also for senders holding at least two pairs with others than
  the observer (the case pairwise masks are meant to hide);
- the cost: disagreement of the trained values (RMS distance to the swarm's
  average, relative), pushes per node and round and bytes per node and round.

With ``--real``, the same observer over real nodes (``p2p.runtime.node.Node``:
trainer, push-sum, masking epochs, peer sampling; digits, the task's small
MLP, partial scheme) on the in-memory network under trio's virtual clock, as
scripts/simulate.py runs them.  Node 0 records every push it merges (a wrapper
of its cores' ``on_push``, installed here), with the sender's trained values,
its epoch phase and partners at that time; each node's train runner records
its local SGD updates.  Same figures per phase (mean and median), each next to
the level of independent noise of the same lengths, and inside epochs by the
push's noise age.  The average is that of the epoch being mixed: the
training other holders folded in since the sender's noise began is left out
(:func:`_wave_folds`; with it, near a fold, the plain correlation reads the
shift those folds made whoever sent the push: the JSON keeps the plain
figure and its control, against non-senders), and the sender's values are
those it made the push from (a push merged after its sender folded is not
compared with the fold's result).  The average a push is compared with leaves out the shares
of pushes merged by their receiver but not yet acknowledged (:func:`_in_flight`:
counted in both cores' mass they put a copy of the push's own noise into the
"average").  The JSON keeps one row per push inside epochs (``push_log``: the
sender's noise over its private part, pairs, weight, phase, held noise) and
the rounds in a row each node held noise (``noisy_streak_rounds``).

Once the noise has mixed (issue 12): by noise age ~20 a push is the average
of the epoch's estimates within float32 rounding (its deviation from that
average, RMS ~6e-9, against its sender's own part ~3e-3), so the plain
|corr| reads the correlation of a rounding-level residue with the sender's
values, which the part every holder shares (their training held apart
during the epoch) dominates: it reads as much against non-senders' values.
The acceptance figure (``own_part_by_noise_age``) correlates the push's
deviation with the sender's *own part*, its values less the other holders'
weighted mean, next to a null (a push carrying the average itself, rounded to
float32 as pushes are: nothing of the sender's) and a positive control (the
push plus the sender's values, less the average, scaled to the push's own
deviation: a leak as small as what is left reads 0.6).  The average also
leaves out what other holders trained in clear since the sender's noise
began (their estimates move by it, the sender's holds none of it), and what
the sender itself folded or trained in clear after it made the push
(:func:`_own_after`: a push made at noise age 38-39 and merged after its
sender folded was compared with an average holding that fold, which read as
the sender's own part, 0.72-0.81; the figure as measured before is printed
beside it).  Pushes at noise ages 10-39 that deviate from the average by
more than rounding are classified by what their sender did since its noise
began (``deviating_pushes``: the merges it made, clear or noisy, from
holders folded or not; a fold between making and merge; noise from a merge
after its own fold), and their deviation is regressed on the other holders'
folds and clear training and on the sender's own sources (:func:`_attribute`);
the own-part figure is also printed with the others' training taken out by
least squares (``attributed``; their vectors only, so the sender's values
stay in: its positive control still reads).  The JSON's
``clip_floor`` measures the clip radius's floor after a fold
(gossip.merge_guard.ClipRadius.note_fold): the clear merges it lets through and
how far it widens the radius.

Usage::

    .venv/bin/python scripts/bench/privacy.py [--quick] [--json PATH]
    .venv/bin/python scripts/bench/privacy.py --grid   # epoch settings: hiding vs cost
    .venv/bin/python scripts/bench/privacy.py --real [--nodes 8] [--rounds 200] \
        [--modes none,masked,dp,masked+dp] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gossip.compression import decode
from gossip.masking.epochs import EpochSettings, MaskEpochs
from gossip.pushsum import PushSum
from learner.dp.accounting import PrivacyAccountant, noise_multiplier_for
from p2p.config.schema import DPSection, GossipConfig

FP = bytes(range(32))
MODES = ("none", "masked", "dp", "masked+dp")
PAIR_MESSAGE_BYTES = 2 * (32 + 8 + 8 + 32 + 16)  # offer + accept: model, epoch, weight, key, framing


@dataclass(frozen=True)
class Run:
    """One simulated training run (the node's defaults unless given)."""

    nodes: int = 12
    dim: int = 400
    rounds: int = 200
    seed: int = 0
    lr: float = 0.05  # pull towards the private target per round
    batch_noise: float = 0.02  # mini-batch noise of one round's update, per coordinate
    noisy_waves: int = 1  # extra pushes per round while noise is held (the driver's loop)
    epochs: EpochSettings = field(default_factory=lambda: GossipConfig().epochs)
    # DP-SGD: clip norm, target epsilon (noise derived), sample rate, steps per round
    dp_clip: float = 1.0
    dp_epsilon: float = 8.0
    dp_delta: float = 1e-5
    dp_sample_rate: float = 16 / 300
    dp_steps: int = 10


@dataclass
class Seen:
    """One push received by the observer, with the sender's truth at that time."""

    sender: int
    round: int
    noisy: bool
    hidden_case: bool  # sender held >= 2 pairs with others than the observer
    values_corr: float
    payload: np.ndarray
    local_sum: np.ndarray  # the sender's local updates summed up to now


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    a = a - a.mean()
    b = b - b.mean()
    den = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / den if den > 0 else 0.0


def noise_level(dim: int, draws: int = 4000, seed: int = 99) -> tuple[float, float]:
    """Mean and 99th percentile of |corr| between independent N(0, 1) vectors of ``dim``."""
    rng = np.random.default_rng(seed)
    c = [abs(_corr(rng.normal(size=dim), rng.normal(size=dim))) for _ in range(draws)]
    return statistics.fmean(c), float(np.quantile(c, 0.99))


def simulate(run: Run, mode: str) -> dict[str, object]:
    """One run in ``mode``; the observer's figures and the cost."""
    rng = np.random.default_rng(run.seed)
    masked = mode.startswith("masked")
    dp = mode.endswith("dp")
    n, dim = run.nodes, run.dim
    ids = [bytes([i + 1]) * 8 for i in range(n)]
    start = rng.normal(0.0, 0.1, dim)  # shared initial model (public)
    targets = [start + rng.normal(0.0, 0.3, dim) for _ in range(n)]  # private data
    cores = [PushSum(FP, start.copy(), privacy="masked" if masked else "none",
                     masked_pushes=0, exchange="push", encoding="f32",
                     unmask_after=run.epochs.mix_exchanges, rng=np.random.default_rng(k))
             for k in range(n)]
    epochs = [MaskEpochs(ids[k], FP, dim, run.epochs, rng=np.random.default_rng(1000 + k))
              for k in range(n)]
    local_sum = [np.zeros(dim) for _ in range(n)]
    sigma = (noise_multiplier_for(run.dp_epsilon, run.dp_delta, run.dp_sample_rate,
                                  run.rounds * run.dp_steps) if dp else 0.0)
    accountant = PrivacyAccountant(run.dp_delta)
    seen: list[Seen] = []
    pushes = 0
    pair_msgs = 0
    noisy_rounds = 0
    disagreement: list[float] = []
    largest = 0.0

    def deliver(src: int, dst: int, t: int) -> None:
        nonlocal pushes
        core = cores[src]
        weight = core.weight
        for _, push in core.make_pushes([ids[dst]], float(t)):
            pushes += 1
            if dst == 0:
                # reference: the swarm's push-sum average (sum of mass / sum of weight),
                # what averaging makes public; the rest of the sender's values is private
                obs = (sum((c.mass for c in cores), np.zeros(dim))
                       / sum(c.weight for c in cores))
                others = [p for p in epochs[src].partners_of_epoch() if p != ids[0]]
                q = decode(push.values, dim)
                seen.append(Seen(src, t, push.noisy, len(others) >= 2,
                                 abs(_corr(q - obs, core.values - obs)), q,
                                 local_sum[src].copy()))
            ack = cores[dst].on_push(ids[src], push, float(t))
            core.on_ack(ids[dst], ack, float(t))
            epochs[src].note_pushed(ids[dst], push.weight / weight)
        if not core.noisy:
            epochs[src].on_folded()

    def partner(src: int) -> int:
        k = int(rng.integers(n - 1))
        return k if k < src else k + 1

    for t in range(1, run.rounds + 1):
        # local training: a pull to the private target plus batch noise (DP: clipped + noise)
        for k in range(n):
            z = cores[k].values
            update = run.lr * (targets[k] - z) + rng.normal(0.0, run.batch_noise, dim)
            if dp:
                # DP-SGD's shape: each step's update clipped, Gaussian noise of
                # sigma * clip / batch added (the batch mean of clipped samples)
                clip = run.dp_clip * run.lr / run.dp_steps  # one step's largest update
                batch = run.dp_sample_rate * 300
                total = np.zeros(dim)
                for _ in range(run.dp_steps):
                    step = update / run.dp_steps
                    norm = float(np.linalg.norm(step))
                    if norm > clip:
                        step = step * (clip / norm)
                    total += step + rng.normal(0.0, sigma * clip / batch, dim)
                update = total
            local_sum[k] += update
            cores[k].set_values(z + update)
        if dp:
            accountant.record(sigma, run.dp_sample_rate, run.dp_steps)
        # the driver after a round: epochs due agree their pairs (noise first, then data)
        if masked:
            for k in rng.permutation(n):
                ep = epochs[k]
                ep.on_round()
                core = cores[k]
                if core.outstanding or not ep.ready(core.noisy, core.noise_age):
                    continue
                cands = [ids[partner(k)] for _ in range(3 * run.epochs.partners)]
                for peer, offer in ep.start(cands, core.weight):
                    j = ids.index(peer)
                    pair_msgs += 1
                    try:
                        accept, side = epochs[j].on_offer(ids[k], offer, cores[j].weight,
                                                          noisy=cores[j].noisy,
                                                          noise_age=cores[j].noise_age)
                    except Exception:  # noqa: BLE001 - refused: the initiator asks no one else
                        ep.offer_failed(peer)
                        continue
                    if side is not None:
                        cores[j].add_noise_mass(side)
                    core.add_noise_mass(ep.on_accept(peer, accept))
        # one wave after the round, and the noisy loop's extra waves while noise is held
        for k in rng.permutation(n):
            deliver(int(k), partner(int(k)), t)
        for _ in range(run.noisy_waves):
            for k in rng.permutation(n):
                if cores[k].noisy:
                    deliver(int(k), partner(int(k)), t)
        noisy_rounds += sum(1 for c in cores if c.noisy)
        values = np.array([c.values for c in cores])
        mean = values.mean(axis=0)
        disagreement.append(float(np.sqrt(((values - mean) ** 2).mean()))
                            / float(np.sqrt((mean ** 2).mean())))
        largest = max(largest, float(np.abs(values).max()))

    # the observer's figures, per phase
    def stats(xs: list[float]) -> dict[str, float | int]:
        return {"count": len(xs), "mean": statistics.fmean(xs) if xs else math.nan,
                "median": statistics.median(xs) if xs else math.nan}

    by_sender: dict[int, list[Seen]] = {}
    for s in seen:
        by_sender.setdefault(s.sender, []).append(s)
    upd: dict[str, list[float]] = {"inside": [], "outside": [], "boundary": []}
    for lst in by_sender.values():
        for a, b in zip(lst, lst[1:], strict=False):
            if b.round - a.round > 3:
                continue  # a short gap, as the "two pushes one round apart"
            local = b.local_sum - a.local_sum
            if not np.any(local):
                continue
            phase = ("inside" if a.noisy and b.noisy else
                     "outside" if not a.noisy and not b.noisy else "boundary")
            upd[phase].append(abs(_corr(b.payload - a.payload, local)))
    out: dict[str, object] = {
        "mode": mode,
        "values_inside": stats([s.values_corr for s in seen if s.noisy]),
        "values_inside_hidden_case": stats([s.values_corr for s in seen
                                            if s.noisy and s.hidden_case]),
        "values_outside": stats([s.values_corr for s in seen if not s.noisy]),
        "updates_inside": stats(upd["inside"]),
        "updates_outside": stats(upd["outside"]),
        "updates_boundary": stats(upd["boundary"]),
        "share_of_pushes_inside": (sum(1 for s in seen if s.noisy) / len(seen)) if seen else 0.0,
        "noisy_node_rounds": noisy_rounds / (n * run.rounds),
        "disagreement_median": statistics.median(disagreement),
        "disagreement_final": disagreement[-1],
        "largest_value": largest,
        "pushes_per_node_round": pushes / (n * run.rounds),
        "bytes_per_node_round": (pushes * (4 * dim + 64) + pair_msgs * PAIR_MESSAGE_BYTES)
        / (n * run.rounds),
        "folds": sum(e.folds for e in epochs),
    }
    if dp:
        out["dp"] = {"noise_multiplier": sigma, "target_epsilon": run.dp_epsilon,
                     "accountant_epsilon": accountant.epsilon(), "delta": run.dp_delta,
                     "steps": accountant.steps}
    return out


def _fmt(s: object) -> str:
    d = s if isinstance(s, dict) else {}
    if not d.get("count"):
        return "    -     "
    return f"{d['mean']:.3f} (n={d['count']})"


def report(run: Run, modes: tuple[str, ...]) -> dict[str, object]:
    """Every mode's figures, printed as a table."""
    mean, p99 = noise_level(run.dim)
    print(f"observer = node 0 of {run.nodes}, vector length {run.dim}, {run.rounds} rounds; "
          f"epochs: {run.epochs.partners} partners, mask_std {run.epochs.mask_scale:g}, "
          f"unmask_after {run.epochs.mix_exchanges}, clear rounds {run.epochs.clear_rounds}")
    print(f"independent noise of length {run.dim}: |corr| mean {mean:.3f}, p99 {p99:.3f}")
    results: dict[str, object] = {"run": {**asdict(run), "epochs": asdict(run.epochs)},
                                  "noise_mean": mean, "noise_p99": p99, "modes": {}}
    print(f"{'mode':<10} {'values in':>16} {'(>=2 others)':>16} {'values out':>16} "
          f"{'updates in':>16} {'updates out':>16} {'in %':>5} {'disagr.':>8} "
          f"{'push/rd':>7} {'B/rd':>7}")
    for mode in modes:
        r = simulate(run, mode)
        results["modes"][mode] = r  # type: ignore[index]
        print(f"{mode:<10} {_fmt(r['values_inside']):>16} "
              f"{_fmt(r['values_inside_hidden_case']):>16} {_fmt(r['values_outside']):>16} "
              f"{_fmt(r['updates_inside']):>16} {_fmt(r['updates_outside']):>16} "
              f"{100 * float(r['share_of_pushes_inside']):5.1f} "  # type: ignore[arg-type]
              f"{float(r['disagreement_median']):8.4f} "  # type: ignore[arg-type]
              f"{float(r['pushes_per_node_round']):7.2f} "  # type: ignore[arg-type]
              f"{float(r['bytes_per_node_round']):7.0f}")  # type: ignore[arg-type]
        if "dp" in r:
            d = r["dp"]
            print(f"{'':<10} dp: noise multiplier {d['noise_multiplier']:.3f} for target epsilon "  # type: ignore[index]
                  f"{d['target_epsilon']:g}; accountant after {d['steps']} steps: epsilon "  # type: ignore[index]
                  f"{d['accountant_epsilon']:.4f} at delta {d['delta']:g}")  # type: ignore[index]
    return results


def grid(base: Run) -> list[dict[str, object]]:
    """Masked mode over epoch settings: hiding, share of pushes hidden, cost."""
    mean, p99 = noise_level(base.dim)
    print(f"masked mode over epoch settings (noise level: mean {mean:.3f}, p99 {p99:.3f}); "
          "'in %': pushes sent inside epochs; 'disagr.': median RMS distance of the trained "
          "values to their average (none: see the first row)")
    rows = []
    none = simulate(base, "none")
    print(f"{'setting':<34} {'values in':>16} {'updates in':>16} {'in %':>5} "
          f"{'disagr.':>8} {'push/rd':>7} {'B/rd':>7}")
    print(f"{'none':<34} {'':>16} {'':>16} {'':>5} "
          f"{float(none['disagreement_median']):8.4f} "  # type: ignore[arg-type]
          f"{float(none['pushes_per_node_round']):7.2f} "  # type: ignore[arg-type]
          f"{float(none['bytes_per_node_round']):7.0f}")  # type: ignore[arg-type]
    settings = [(3, mix, clear, 10.0) for mix in (10, 20, 40) for clear in (2, 10, 30)]
    settings += [(2, 20, 10, 10.0), (3, 20, 10, 1.0)]
    for partners, mix, clear, scale in settings:
        ep = EpochSettings(partners=partners, mask_scale=scale, mix_exchanges=mix,
                           clear_rounds=clear, join_window=max(1, mix // 4))
        run = Run(**{**asdict(base), "epochs": ep})
        r = simulate(run, "masked")
        name = f"p{partners} mix{mix} clear{clear} std{scale:g}"
        print(f"{name:<34} {_fmt(r['values_inside']):>16} "
              f"{_fmt(r['updates_inside']):>16} "
              f"{100 * float(r['share_of_pushes_inside']):5.1f} "  # type: ignore[arg-type]
              f"{float(r['disagreement_median']):8.4f} "  # type: ignore[arg-type]
              f"{float(r['pushes_per_node_round']):7.2f} "  # type: ignore[arg-type]
              f"{float(r['bytes_per_node_round']):7.0f}", flush=True)  # type: ignore[arg-type]
        rows.append({"setting": name, **r})
    return rows


# ---------------------------------------------------------------- real nodes (--real)
#
# The same observer over N real nodes (p2p.runtime.node.Node: trainer, push-sum,
# masking epochs, peer sampling) on the in-memory network under trio's virtual
# clock, as scripts/simulate.py runs them.  Hooks live here only: the observer's
# push-sum cores get an instance-level wrapper of ``on_push`` (and of the delta
# rebuild, to see the values it merges), and every node's train runner records
# its local SGD update of each shared model.  The nodes' code is unchanged.

@dataclass(frozen=True)
class RealRun:
    """One run of real nodes (digits, the task's small MLP, partial scheme)."""

    nodes: int = 8
    rounds: int = 200
    seed: int = 0
    compute_seconds: float = 0.05  # simulated seconds one training round costs
    max_gap: float = 1.0  # simulated seconds: longest gap between two pushes compared


@dataclass
class RealSeen:
    """One push the observer merged, with its sender's truth at that time."""

    sender: bytes
    model: str
    time: float
    noisy: bool  # the push carries mask noise (sent inside a masking epoch)
    phase: str  # the sender's epoch phase then (``clear`` without masking)
    hidden_case: bool  # the sender's epoch had >= 2 partners other than the observer
    values_corr: float
    payload: np.ndarray
    local_sum: np.ndarray  # the sender's local updates of this model summed up to then
    noise_age: int = 0  # the push's noise_age: exchanges its youngest noise has mixed
    # diagnostics of the sender then: RMS of the noise the push carries (push minus its
    # trained values) over RMS of its private part (trained values minus the average)
    noise_ratio: float = math.nan
    pairs: int = 0  # live pairs the sender held
    weight: float = 0.0  # the sender's push-sum weight
    # values_corr against the holders' summed mass with no correction for pushes in flight
    raw_corr: float = math.nan
    extra: dict[str, object] = field(default_factory=dict)  # more of the sender's state


class _RecordingRunner:
    """An InlineRunner that records each round's local update of every shared model."""

    def __init__(self, compute_seconds: float) -> None:
        from p2p.runtime.train_runner import InlineRunner

        self.inner = InlineRunner(compute_seconds)
        self.node: object | None = None  # set once the node is built
        self.local_sum: dict[str, np.ndarray] = {}
        self.rounds = 0
        # training rounds in a row each model's core held noise (ended streaks)
        self.streak: dict[str, int] = {}
        self.streaks: list[int] = []

    async def wait_turn(self) -> None:
        wait = getattr(self.inner, "wait_turn", None)
        if wait is not None:
            await wait()

    async def train_steps(self, trainer: object, steps: int) -> float:
        node: Any = self.node
        net: Any = None if node is None else node.learning.network
        names = [] if node is None else list(node.cores)
        before = {n: net.extract(n).astype(np.float64) for n in names}
        loss = trainer.train_steps(steps)  # type: ignore[attr-defined]
        for n in names:
            update = net.extract(n).astype(np.float64) - before[n]
            self.local_sum[n] = self.local_sum.get(n, 0.0) + update
        self.rounds += 1
        for n in names:
            if node.cores[n].noisy:
                self.streak[n] = self.streak.get(n, 0) + 1
            elif self.streak.get(n):
                self.streaks.append(self.streak.pop(n))
        await self.inner.charge()
        return float(loss)

    async def evaluate(self, fn: Any) -> Any:
        return fn()

    async def run_blocking(self, fn: Any) -> Any:
        return fn()


#: (node id, model) -> its folds: (virtual time, the mass the fold added: the weight
#: at the fold times the epoch's training it folded in, or None without training)
FoldLog = dict[tuple[bytes, str], list[tuple[float, np.ndarray | None]]]


def _wave_folds(folds: FoldLog, name: str, sender: bytes, since: float | None = None,
                trained: FoldLog | None = None) -> Any:
    """Mass the other holders of ``name`` folded in since ``since``: when ``sender``'s
    noise began (a push inside an epoch), else (None) since its own last fold; with
    ``trained`` (each holder's training made in clear: (time, weight x step)), also
    what they trained in clear since then (it moves their estimates and the sum at
    once, and reaches the sender only as it mixes: with DP-SGD's noisy steps, 4.7 %
    of the pushes at noise ages 10-37 read that as |corr| 0.2-0.3 with every holder).

    A push made inside an epoch is compared with the average of that epoch's
    estimates.  Near the fold front part of the swarm has folded its epoch's
    training into its estimates (push-sum conserves that mass wherever it
    went since): the plain average moves by it, while a push from a holder
    still mixing carries none of it, so ``push - average`` and every holder's
    ``values - average`` share that shift and correlate whoever sent the
    push (measured at noise ages 38-39: 0.17 / 0.06 mean / median with the
    sender's private part, 0.18 with a non-sender's).  Left out of the
    average, the shift is gone and what is left is what the push says about
    its sender.
    """
    if since is None:
        mine = folds.get((sender, name), [])
        since = mine[-1][0] if mine else -math.inf
    out: Any = 0.0
    for (node, model), events in folds.items():
        if model != name or node == sender:
            continue
        for t, mass in events:
            if t > since and mass is not None:
                out = out + mass
    for (node, model), events in (trained or {}).items():
        if model != name or node == sender:
            continue
        # a holder training in clear (folded, or not in the epoch yet): its estimate
        # (and the sum) moves by each step, none of which the sender's estimate holds
        for t, mass in events:
            if t > since and mass is not None:
                out = out + mass
    return out


def _own_after(folds: FoldLog, trained: FoldLog, sender: bytes, name: str,
               made: tuple[int, int]) -> Any:
    """The mass ``sender`` folded in or trained in clear after it made a push (``made``:
    how many folds and clear trainings of it were logged then): 0.0 when none (a
    float), else the summed vector."""
    out: Any = 0.0
    for log, logged in ((folds, made[0]), (trained, made[1])):
        for _, mass in log.get((sender, name), [])[logged:]:
            if mass is not None:
                out = out + mass
    return out


def _wave_parts(folds: FoldLog, name: str, sender: bytes, since: float,
                trained: FoldLog) -> dict[bytes, np.ndarray]:
    """:func:`_wave_folds` per other holder: the mass each folded in or trained in clear
    since ``since`` (the candidate sources of a push's deviation that are not the
    sender's: see :func:`_attribute`)."""
    out: dict[bytes, np.ndarray] = {}
    for log in (folds, trained):
        for (node, model), events in log.items():
            if model != name or node == sender:
                continue
            for t, mass in events:
                if t > since and mass is not None:
                    out[node] = out[node] + mass if node in out else np.array(mass)
    return out


def _attribute(dev: np.ndarray, parts: list[np.ndarray],
               own_sources: list[np.ndarray]) -> dict[str, Any]:
    """Least squares of a push's deviation from the average on its candidate sources.

    ``parts``: what other holders folded in or trained in clear since the sender's
    noise began (over the holders' weight: the average leaves it out, a sender that
    merged a clear push from them holds a share of it); ``own_sources``: the
    sender's own (its training held apart, its own part).  Returns the share of
    the deviation's energy the others' parts explain (``r2_others``), the share
    with the sender's own sources added (``r2_all``), the coefficients and the
    residual once the others' parts are taken out (what is left to read).
    """
    def fit(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        if not cols:
            return np.zeros(0), dev.copy()
        a = np.stack(cols, axis=1)
        c, *_ = np.linalg.lstsq(a, dev, rcond=None)
        return c, dev - a @ c

    energy = float(dev @ dev)
    c_o, res_o = fit(parts)
    c_a, res_a = fit(parts + own_sources)
    return {"r2_others": 1.0 - float(res_o @ res_o) / energy if energy > 0 else math.nan,
            "r2_all": 1.0 - float(res_a @ res_a) / energy if energy > 0 else math.nan,
            "coef_others": [float(x) for x in c_o],
            "coef_own": [float(x) for x in c_a[len(parts):]],
            "residual": res_o}


def _project_out(v: np.ndarray, parts: list[np.ndarray]) -> np.ndarray:
    """``v`` less its least-squares fit on ``parts`` (unchanged without parts)."""
    if not parts:
        return v
    a = np.stack(parts, axis=1)
    c, *_ = np.linalg.lstsq(a, v, rcond=None)
    return v - a @ c


def _noise_floor(lengths: list[int], seed: int = 99) -> tuple[float, float]:
    """Mean and p99 of |corr| of independent Gaussian pairs, one draw per observation length."""
    rng = np.random.default_rng(seed)
    draws = [abs(_corr(rng.normal(size=n), rng.normal(size=n)))
             for n in lengths for _ in range(4)]
    if not draws:
        return math.nan, math.nan
    return statistics.fmean(draws), float(np.quantile(draws, 0.99))


def _sender_state(node: Any, name: str) -> dict[str, object]:
    """Diagnostics of the sender's masking state when its push was merged."""
    core = node.cores[name]
    out: dict[str, object] = {"noisy_now": core.noisy, "age_now": core.noise_age,
                              "unmasks": core.counters.unmasks}
    if node.masking is not None:
        ep = node.masking.epochs(name)
        out.update(removed=ep.removed_exact + ep.removed_mixing, folds=ep.folds,
                   epoch=ep.epoch)
    return out


_AGE_BINS = ((0, 10), (10, 20), (20, 30), (30, 38), (38, 40), (40, 10 ** 6))


def _own_part(xs: list[Any]) -> dict[str, object]:
    """|corr| of pushes with their senders' own part, its null and positive control
    (means), the pushes' deviation from the average and the own part (RMS, medians)."""
    xs = [s for s in xs if "corr_own" in s.extra]

    def mean(key: str) -> float:
        return statistics.fmean(float(s.extra[key]) for s in xs) if xs else math.nan

    def median(key: str) -> float:
        return statistics.median(float(s.extra[key]) for s in xs) if xs else math.nan

    floor_mean, floor_p99 = _noise_floor([s.payload.size for s in xs])
    over = (sum(1 for s in xs if float(s.extra["corr_own"]) > floor_p99) / len(xs)
            if xs else math.nan)
    ys = [s for s in xs if "corr_own_attr" in s.extra]

    def mean_attr(key: str) -> float:
        return statistics.fmean(float(s.extra[key]) for s in ys) if ys else math.nan

    return {"count": len(xs), "mean": mean("corr_own"), "median": median("corr_own"),
            # as measured before: a push merged after its sender folded compared with an
            # average holding that fold
            "before_fix_mean": (statistics.fmean(float(s.extra.get("corr_own_unfixed",
                                                                   s.extra["corr_own"]))
                                                 for s in xs) if xs else math.nan),
            "merged_after_fold": sum(1 for s in xs if "corr_own_unfixed" in s.extra),
            # the same once the other holders' clear training is attributed to them
            "attributed_mean": mean_attr("corr_own_attr"),
            "attributed_null_mean": mean_attr("corr_own_attr_null"),
            "attributed_leak_mean": mean_attr("corr_own_attr_leak"),
            "null_mean": mean("corr_own_null"), "leak_mean": mean("corr_own_leak"),
            "common_mean": mean("corr_common"), "noise_mean": floor_mean,
            "noise_p99": floor_p99, "share_over_p99": over,
            "deviation_rms": median("dev_rms"), "own_rms": median("own_rms")}


#: a push deviates from the epoch's average by more than rounding: its deviation's
#: RMS over that of the average rounded to float32 (what a push equal to it deviates by)
OUTLIER_OVER_ROUNDING = 10.0


def _outliers(xs: list[Any]) -> dict[str, object]:
    """The pushes (inside epochs, noise age 10-39) that deviate from the epoch's average
    by more than rounding, classified by what their sender merged since its noise
    began, before the push; with how much of their deviation the other holders'
    folds and clear training explain, and how much the sender's own sources add."""
    xs = [s for s in xs if "r2_others" in s.extra and 10 <= s.noise_age < 40]

    def out(s: Any) -> bool:
        return float(s.extra["dev_rms"]) > OUTLIER_OVER_ROUNDING * float(
            s.extra["rounding_rms"])

    def kind(s: Any) -> str:
        e = s.extra
        if e.get("folded_before_merged"):
            return "its sender folded between making it and its merge"
        if e.get("noise_from_merge") and math.isfinite(float(e["since_own_fold"])):
            return "re-noised by a merge after its own fold"
        if int(e["clear_from_folded"]):
            return "merged a clear push from a holder that folded"
        if int(e["clear_from_unfolded"]):
            return "merged a clear push from a holder not in the epoch"
        return "no clear merge since its noise began"

    def group(ys: list[Any]) -> dict[str, object]:
        kinds: dict[str, int] = {}
        for s in ys:
            kinds[kind(s)] = kinds.get(kind(s), 0) + 1

        def med(key: str) -> float:
            vals = [float(s.extra[key]) for s in ys if not math.isnan(float(s.extra[key]))]
            return float(np.median(vals)) if vals else math.nan
        return {"count": len(ys), "by_what_the_sender_merged": dict(sorted(kinds.items())),
                "r2_others_median": med("r2_others"), "r2_all_median": med("r2_all"),
                "dev_rms_median": med("dev_rms"), "residual_rms_median": med("residual_rms"),
                "corr_own_mean": (statistics.fmean(float(s.extra["corr_own"]) for s in ys)
                                  if ys else math.nan),
                "corr_own_attributed_mean": (statistics.fmean(
                    float(s.extra["corr_own_attr"]) for s in ys) if ys else math.nan),
                "corr_swap_mean": (statistics.fmean(float(s.extra["corr_swap"]) for s in ys)
                                   if ys else math.nan),
                "coef_own_held_abs_median": med("coef_own_held_abs"),
                "coef_others_max_median": med("coef_others_max")}

    for s in xs:
        e = s.extra
        co, cw = list(e["coef_others"]), list(e["coef_own"])
        e["coef_others_max"] = max((abs(c) for c in co), default=math.nan)
        names = list(e.get("own_sources", []))
        e["coef_own_held_abs"] = abs(cw[names.index("held")]) if "held" in names else math.nan
    return {"outliers": group([s for s in xs if out(s)]),
            "rest": group([s for s in xs if not out(s)])}


def _clip_floor_figures(log: list[tuple[int, float, float, float, float]]) -> dict[str, object]:
    """What the fold floor of the clip radius does (gossip.merge_guard.ClipRadius.note_fold)
    over the clear merges after each receiver's own fold: the updates only the floor
    lets through (beyond the recent senders' radius; honest here) and how many merges
    after the fold they came, with the floor kept until the next fold and as bounded
    (``fold_floor_merges``); and how far the floor widens the radius where it binds
    (what a poisoner's push may move a model by, relative to the radius without it)."""
    unbounded = [m for m, n, b, f, _ in log if b < n <= max(b, f)]
    bounded = [m for m, n, b, _, g in log if b < n <= max(b, g)]
    refused = [m for m, n, b, _, g in log if n > max(b, g)]
    return {"merges": len(log),
            "floor_over_radius_unbounded": _quantiles_f([f / b for _, _, b, f, _ in log
                                                         if b > 0 and f > b]),
            "floor_over_radius_bounded": _quantiles_f([g / b for _, _, b, _, g in log
                                                       if b > 0 and g > b]),
            "binds_unbounded": sum(1 for _, _, b, f, _ in log if f > b),
            "binds_bounded": sum(1 for _, _, b, _, g in log if g > b),
            "let_through_unbounded": len(unbounded),
            "let_through_bounded": len(bounded),
            "refused_by_clip": len(refused),
            "let_through_merges_after_fold": {
                str(k): unbounded.count(k) for k in sorted(set(unbounded))}}


def _quantiles_f(xs: list[float]) -> dict[str, float]:
    """Count, median, p90 and largest of ``xs`` (NaN when empty)."""
    if not xs:
        return {"count": 0, "median": math.nan, "p90": math.nan, "max": math.nan}
    return {"count": len(xs), "median": float(np.median(xs)),
            "p90": float(np.quantile(xs, 0.9)), "max": float(max(xs))}


def _quantiles(xs: list[int]) -> dict[str, float]:
    """Count, median, p99 and largest of ``xs`` (NaN when empty)."""
    if not xs:
        return {"count": 0, "median": math.nan, "p99": math.nan, "max": math.nan}
    return {"count": len(xs), "median": float(np.median(xs)),
            "p99": float(np.quantile(xs, 0.99)), "max": float(max(xs))}


def _in_flight(holders: list[Any], name: str, by_id: dict[bytes, Any]) -> tuple[Any, float]:
    """Mass and weight counted twice in the holders' sum: pushes merged by their receiver
    whose ack has not reached the sender yet (the sender still holds the share), minus
    the replies the receivers gave for them (not yet merged by the sender).

    Pushes carry noise of the mask scale: left in, they would put a multiple of the
    push's own noise into the "average" the observer compares with (and in the
    sender's private part), which reads as a correlation (|corr| near 1 once that
    share dominates the private part).
    """
    from gossip.dup_window import Seen

    mass: Any = 0.0
    weight = 0.0
    for n in holders:
        core = n.cores[name]
        me = n.identity.node_id
        for o in list(core._outstanding.values()):
            peer = by_id.get(o.peer)
            if peer is None or name not in peer[0].cores:
                continue
            state = peer[0].cores[name]._seen.lookup(me, o.push.push_id)
            if state is Seen.MERGED or state is Seen.REPLIED:
                mass = mass + o.push.weight * o.sent
                weight += o.push.weight
            if state is Seen.REPLIED:
                ack = peer[0].cores[name]._replies.get((me, o.push.push_id))
                if ack is not None:
                    r, d = core._check_reply(o, ack)
                    mass = mass - r * (o.sent + d)
                    weight -= r
    return mass, weight


def simulate_real(run: RealRun, mode: str) -> dict[str, object]:
    """Real nodes in ``mode`` (gossip.privacy); node 0 observes every push it merges."""
    import tempfile

    import torch
    import trio

    from gossip.validation import validate_push
    from p2p.simulation.host import Simulation
    from p2p.simulation.network import SimNetwork
    from p2p.swarm import SwarmSpec
    from p2p.testing.clock import virtual_clock

    torch.set_num_threads(1)
    spec = SwarmSpec(nodes=run.nodes, rounds=run.rounds, privacy=mode, seed=run.seed,
                     task="digits", eval_every=run.rounds)
    runners = [_RecordingRunner(run.compute_seconds) for _ in range(run.nodes)]
    seen: list[RealSeen] = []
    by_id: dict[bytes, Any] = {}

    refused: dict[str, int] = {}  # merge-guard refusals swarm-wide, by rule
    # clear merges checked by the clip rule: (merges the receiver made since its own fold,
    # the update's norm, the radius from recent senders, the floor from its own fold
    # were it kept until the next fold, the floor as kept: see ClipRadius.note_fold)
    clip_log: list[tuple[int, float, float, float, float]] = []
    since_fold: dict[tuple[bytes, str], int] = {}

    # (sender, model, push id) -> the sender's trained values when it made the push: a
    # push merged after its sender folded is compared with what it was made from
    made_from: dict[tuple[bytes, str, int], np.ndarray] = {}

    folds: FoldLog = {}
    clear_training: FoldLog = {}  # steps trained in clear (weight x step)
    noisy_since: dict[tuple[bytes, str], float] = {}  # when each core's held noise began
    # (sender, model, push id) -> the sender's estimate in float64 when it made the push
    # (the push carries it rounded to float32)
    estimate_sent: dict[tuple[bytes, str, int], np.ndarray] = {}
    # (node, model) -> the merges it made: (time, the push was flagged noisy, pusher,
    # the pusher's last fold then, the receiver held noise before, after, its noise
    # age after); and (sender, model, push id) -> how many of its merges preceded
    # the push (what it did just before a push: see _attribute)
    merges: dict[tuple[bytes, str], list[tuple[float, bool, bytes, float, bool, bool, int]]] = {}
    made_after: dict[tuple[bytes, str, int], int] = {}
    # (sender, model, push id) -> its folds and clear trainings logged when the push was
    # made, and when its noise began then (a push merged after its sender folded
    # belongs to the epoch it left)
    made_at: dict[tuple[bytes, str, int], tuple[tuple[int, int], float | None]] = {}

    def hook_every_node(node: Any) -> None:
        """Counts guard refusals; logs folds, when noise began, values pushes were made from."""
        from gossip.merge_guard import RefusedByGuard

        me = node.identity.node_id
        for name, core in node.cores.items():
            def maybe_unmask(force: bool = False, _orig: Any = core._maybe_unmask,
                             _core: Any = core, _key: tuple[bytes, str] = (me, name)) -> None:
                was, held, w = _core.noisy, _core._est.held_steps, _core.weight
                held = None if held is None else w * held
                _orig(force)
                if was and not _core.noisy:
                    folds.setdefault(_key, []).append((trio.current_time(), held))
                    since_fold[_key] = 0
                    noisy_since.pop(_key, None)

            def add_noise_mass(mass: Any, *, fresh: bool = True, _core: Any = core,
                               _orig: Any = core.add_noise_mass,
                               _key: tuple[bytes, str] = (me, name)) -> None:
                _orig(mass, fresh=fresh)
                if _core.noisy:
                    noisy_since.setdefault(_key, trio.current_time())

            def set_values(z: Any, _orig: Any = core.set_values, _core: Any = core,
                           _key: tuple[bytes, str] = (me, name)) -> None:
                clear, before, w = not _core.noisy, _core.values, _core.weight
                _orig(z)
                if clear and node.masking is not None:
                    clear_training.setdefault(_key, []).append(
                        (trio.current_time(), w * (_core.values - before)))

            core._maybe_unmask = maybe_unmask
            core.add_noise_mass = add_noise_mass
            core.set_values = set_values

            def make_pushes(peers: Any, now: float, _orig: Any = core.make_pushes,
                            _core: Any = core, _name: str = name) -> Any:
                out = _orig(peers, now)
                for _, push in out:
                    if push.noisy:
                        made_from[(me, _name, push.push_id)] = _core.values
                        estimate_sent[(me, _name, push.push_id)] = _core.estimate
                        made_after[(me, _name, push.push_id)] = len(merges.get((me, _name), []))
                        made_at[(me, _name, push.push_id)] = (
                            (len(folds.get((me, _name), [])),
                             len(clear_training.get((me, _name), []))),
                            noisy_since.get((me, _name)))
                return out

            core.make_pushes = make_pushes

            def on_push(sender: bytes, push: Any, now: float, _orig: Any = core.on_push,
                        _core: Any = core, _key: tuple[bytes, str] = (me, name)) -> Any:
                was_noisy, merged_before = _core.noisy, _core._c["pushes_received"]
                try:
                    ack = _orig(sender, push, now)
                except RefusedByGuard as exc:
                    refused[exc.rule] = refused.get(exc.rule, 0) + 1
                    raise
                if _core._c["pushes_received"] > merged_before:
                    pusher_folds = folds.get((sender, _key[1]), [])
                    merges.setdefault(_key, []).append(
                        (trio.current_time(), bool(push.noisy or push.masked), sender,
                         pusher_folds[-1][0] if pusher_folds else -math.inf,
                         was_noisy, _core.noisy, _core.noise_age))
                if _key in since_fold:
                    since_fold[_key] += 1
                if _core.noisy:  # (a noisy push merged: noise held from now on)
                    noisy_since.setdefault(_key, trio.current_time())
                elif _key in noisy_since:  # folded at this merge
                    noisy_since.pop(_key, None)
                return ack

            core.on_push = on_push

            def clip_factor(sender: bytes, y: Any, s: float, r: float, flagged: bool,
                            _orig: Any = core._clip_factor, _core: Any = core,
                            _key: tuple[bytes, str] = (me, name)) -> Any:
                guard = _core._guard
                if guard is not None and guard.settings.clipping and not flagged \
                        and not _core.noisy and _key in since_fold:
                    x, clip = _core._est.x, guard.clip
                    clip_log.append((since_fold[_key], float(np.linalg.norm(y - x)),
                                     clip.radius(float(np.linalg.norm(x)), sender,
                                                 with_fold_floor=False),
                                     guard.settings.clip_factor * clip._fold_jump,
                                     clip.fold_floor(sender)))
                return _orig(sender, y, s, r, flagged)

            core._clip_factor = clip_factor

    def hook_observer(node: Any) -> None:
        me = node.identity.node_id
        for name, core in node.cores.items():
            rebuilt: list[np.ndarray] = []
            original_on_push = core.on_push
            original_rebuild = core._rebuild_request

            def rebuild(sender: bytes, push: Any, y: np.ndarray, now: float,
                        _orig: Any = original_rebuild, _out: list[np.ndarray] = rebuilt) -> Any:
                out = _orig(sender, push, y, now)
                _out.append(np.array(out, dtype=np.float64))
                return out

            def on_push(sender: bytes, push: Any, now: float, _orig: Any = original_on_push,
                        _core: Any = core, _name: str = name,
                        _rebuilt: list[np.ndarray] = rebuilt) -> Any:
                _rebuilt.clear()
                ack = _orig(sender, push, now)  # raises when rejected: nothing recorded
                if not _rebuilt and push.base:
                    return ack  # a retransmission answered again: nothing new
                q = (_rebuilt[-1] if push.base else
                     np.array(validate_push(push, _core.fingerprint, _core.length,
                                            _core.max_weight), dtype=np.float64))
                record(me, sender, _name, q, bool(push.noisy or push.masked), now,
                       int(push.noise_age), made_from.pop((sender, _name, push.push_id), None),
                       estimate_sent.pop((sender, _name, push.push_id), None),
                       made_after.pop((sender, _name, push.push_id), None),
                       made_at.pop((sender, _name, push.push_id), None))
                return ack

            core.on_push = on_push
            core._rebuild_request = rebuild

    def record(me: bytes, sender: bytes, name: str, q: np.ndarray, noisy: bool,
               now: float, noise_age: int, then: np.ndarray | None = None,
               exact: np.ndarray | None = None, made_index: int | None = None,
               made: tuple[tuple[int, int], float | None] | None = None) -> None:
        src = by_id.get(sender)
        if src is None:
            return
        node, runner = src
        holders = [n for n, _ in by_id.values() if name in n.cores]
        mass = sum((n.cores[name].mass for n in holders), np.zeros(q.size))
        weight = sum(n.cores[name].weight for n in holders)
        raw_avg = mass / weight
        fix_mass, fix_weight = _in_flight(holders, name, by_id)
        plain_avg = (mass - fix_mass) / (weight - fix_weight)
        # the average of the epoch being mixed (see _wave_folds)
        noise_began = made[1] if made is not None else noisy_since.get((sender, name))
        wave = _wave_folds(folds, name, sender, noise_began if noisy else None,
                           clear_training if noisy else None)
        after = 0.0 if made is None or not noisy else _own_after(folds, clear_training,
                                                                  sender, name, made[0])
        # a push the sender made before it folded, merged after: the sender's fold (and
        # any training in clear since) moved the sum after the push left; the epoch the
        # push belongs to holds none of it (issue 12: 'merged after the fold')
        folded_since_made = not isinstance(after, float)
        wave = wave + after
        avg = (mass - fix_mass - wave) / (weight - fix_weight)
        mine = node.cores[name].values if then is None else then
        phase, hidden = "clear", False
        if node.masking is not None:
            ep = node.masking.epochs(name)
            phase = ep.phase.value
            hidden = len([p for p in ep.partners_of_epoch() if p != me]) >= 2
        pairs = 0 if node.masking is None else node.masking.epochs(name).live_pairs
        zavg = sum((n.cores[name].weight * n.cores[name].values for n in holders),
                   np.zeros(q.size)) / sum(n.cores[name].weight for n in holders)
        extra = _sender_state(node, name)
        extra["corr_zz"] = abs(_corr(q - avg, mine - zavg))
        extra["corr_zq"] = abs(_corr(q - zavg, mine - zavg))
        snap = node.cores[name].snapshot()
        extra["held_rms"] = float(np.sqrt(np.mean((snap.estimate - snap.values) ** 2)))
        extra["private_rms"] = float(np.sqrt(np.mean((mine - avg) ** 2)))
        others = [n for n in holders if n is not node]
        now_values = node.cores[name].values
        extra["vs_average_corr"] = abs(_corr(q - plain_avg, now_values - plain_avg))
        extra["corr_others"] = (statistics.fmean(
            abs(_corr(q - plain_avg, n.cores[name].values - plain_avg)) for n in others)
            if others else math.nan)
        # What is left once the noise has mixed (see the module docstring, "Once the
        # noise has mixed"): ``dev_rms`` is how far the push is from the average,
        # ``exact_rms`` the same for the float64 estimate it was rounded from
        dev = q - avg
        dev_rms = float(np.sqrt(np.mean(dev ** 2)))
        extra["dev_rms"] = dev_rms
        if exact is not None:
            extra["exact_rms"] = float(np.sqrt(np.mean((exact - avg) ** 2)))
            extra["corr_exact"] = abs(_corr(exact - avg, mine - avg))
        if others:
            ow = sum(n.cores[name].weight for n in others)
            others_z = sum((n.cores[name].weight * n.cores[name].values for n in others),
                           np.zeros(q.size)) / ow
            own = mine - others_z  # the sender's own part: its values less the others'
            # the push against the sender's own part; the part every holder's values share
            # (the others' trained values less the average); a null: a push carrying the
            # average itself rounded to float32 as pushes are (nothing of the sender's);
            # a positive control: the push plus the sender's values (less the average)
            # scaled to the push's own deviation (a leak as small as what is left)
            extra["corr_own"] = abs(_corr(dev, own))
            if folded_since_made:
                # as measured before (the sender's fold after the push in the average)
                before = q - (mass - fix_mass - (wave - after)) / (weight - fix_weight)
                extra["corr_own_unfixed"] = abs(_corr(before, own))
                extra["dev_rms_unfixed"] = float(np.sqrt(np.mean(before ** 2)))
            extra["corr_common"] = abs(_corr(dev, others_z - avg))
            extra["corr_swap"] = statistics.fmean(
                abs(_corr(dev, n.cores[name].values - avg)) for n in others)
            extra["corr_own_null"] = abs(_corr(
                avg.astype(np.float32).astype(np.float64) - avg, own))
            scale = dev_rms / max(float(np.sqrt(np.mean((mine - avg) ** 2))), 1e-300)
            extra["corr_own_leak"] = abs(_corr(dev + scale * (mine - avg), own))
            extra["common_rms"] = float(np.sqrt(np.mean((others_z - avg) ** 2)))
            extra["own_rms"] = float(np.sqrt(np.mean(own ** 2)))
            rounding = avg.astype(np.float32).astype(np.float64) - avg
            extra["rounding_rms"] = float(np.sqrt(np.mean(rounding ** 2)))
            extra["folded_before_merged"] = folded_since_made
            since = noise_began if noisy else None
            if since is not None:
                # what the sender did since its noise began, before the push (the
                # classification of pushes that deviate by more than rounding)
                done = merges.get((sender, name), [])
                done = [m for m in (done if made_index is None else done[:made_index])
                        if m[0] >= since]
                clear = [m for m in done if not m[1]]
                extra["merges_since_noise"] = len(done)
                extra["clear_merges"] = len(clear)
                extra["clear_from_folded"] = sum(1 for m in clear if m[3] >= since)
                extra["clear_from_unfolded"] = sum(1 for m in clear if m[3] < since)
                extra["merges_after_last_clear"] = (
                    len(done) - 1 - max(i for i, m in enumerate(done) if not m[1])
                    if clear else -1)
                extra["partners"] = len(node.masking.epochs(name).partners_of_epoch()) \
                    if node.masking is not None else 0
                # regress the deviation on the others' folds / clear training since the
                # sender's noise began (over the weight the average divides by) and on
                # the sender's own sources: its training held apart, its own part
                parts = [v / (weight - fix_weight) for v in
                         _wave_parts(folds, name, sender, since, clear_training).values()]
                held = node.cores[name]._est.held_steps
                own_src = ([] if held is None else [np.array(held, dtype=np.float64)]) + [own]
                extra["own_sources"] = ([] if held is None else ["held"]) + ["own"]
                # the sender's own fold before its noise began and what it trained in
                # clear since (in its estimate when a merge of a noisy push re-noised it)
                mine_folds = [t for t, _ in folds.get((sender, name), []) if t <= since]
                extra["noise_from_merge"] = bool(done) and done[0][0] == since \
                    and not done[0][4]
                extra["since_own_fold"] = since - mine_folds[-1] if mine_folds else math.inf
                if mine_folds:
                    recent_clear = [m for t, m in clear_training.get((sender, name), [])
                                    if mine_folds[-1] <= t <= since and m is not None]
                    own_recent = sum(recent_clear, np.zeros(q.size))
                    last_mass = folds[(sender, name)][len(mine_folds) - 1][1]
                    if last_mass is not None:
                        own_recent = own_recent + last_mass
                    if np.any(own_recent):
                        own_src.append(own_recent / (weight - fix_weight))
                        extra["own_sources"].append("last fold")  # type: ignore[attr-defined]
                fit = _attribute(dev, parts, own_src)
                res = fit.pop("residual")
                extra.update(fit)
                extra["other_sources"] = len(parts)
                # the own-part figure once the others' training is attributed to them
                # (taken out of the deviation, of its null and of its positive control
                # alike: the control keeps the sender's values, which are not in it)
                extra["corr_own_attr"] = abs(_corr(res, own))
                extra["corr_own_attr_null"] = abs(_corr(_project_out(rounding, parts), own))
                res_rms = float(np.sqrt(np.mean(res ** 2)))
                extra["residual_rms"] = res_rms
                s_res = res_rms / max(float(np.sqrt(np.mean((mine - avg) ** 2))), 1e-300)
                extra["corr_own_attr_leak"] = abs(_corr(
                    _project_out(dev + s_res * (mine - avg), parts), own))
        extra["clear_weight_share"] = (sum(n.cores[name].weight for n in holders
                                           if not n.cores[name].noisy) / weight)
        private = float(np.sqrt(np.mean((mine - avg) ** 2)))
        ratio = float(np.sqrt(np.mean((q - mine) ** 2))) / max(private, 1e-300)
        local = runner.local_sum.get(name)
        seen.append(RealSeen(sender, name, now, noisy, phase, hidden,
                             abs(_corr(q - avg, mine - avg)), q,
                             np.zeros(q.size) if local is None else np.array(local),
                             noise_age, ratio, pairs, float(node.cores[name].weight),
                             abs(_corr(q - raw_avg, mine - raw_avg)), extra))

    class ObservedSimulation(Simulation):
        def _build(self, slot: Any) -> Any:
            node, transport = super()._build(slot)
            runners[slot.index].node = node
            by_id[node.identity.node_id] = (node, runners[slot.index])
            if slot.index == 0:
                hook_observer(node)
            hook_every_node(node)
            return node, transport

    # the nodes' warnings (a rejected push...) are counted below, not printed
    # (restored after the run: a caller in the same process keeps its own levels)
    quiet = [logging.getLogger(name) for name in ("p2p", "gossip", "peersampling", "learner")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.ERROR)
    cpu = time.process_time()
    with tempfile.TemporaryDirectory(prefix="bench-privacy-") as root:
        sim = ObservedSimulation(spec, Path(root), SimNetwork(seed=run.seed),
                                 runner_for=lambda i: runners[i],
                                 sample_every=1.0,
                                 max_seconds=run.rounds * (run.compute_seconds
                                                           + spec.round_interval) * 4 + 150.0)
        try:
            trio.run(sim.run, clock=virtual_clock())
        finally:
            for logger, level in zip(quiet, levels, strict=True):
                logger.setLevel(level)
        summary = sim.summary(0.0)
        nodes = [n for n, _ in by_id.values()]
        spent = [n.privacy_spent() for n in nodes]
    cpu = time.process_time() - cpu

    def stats(xs: list[float]) -> dict[str, float | int]:
        return {"count": len(xs), "mean": statistics.fmean(xs) if xs else math.nan,
                "median": statistics.median(xs) if xs else math.nan,
                "max": max(xs) if xs else math.nan}

    def floor(obs: list[int]) -> dict[str, float]:
        mean, p99 = _noise_floor(obs)
        return {"noise_mean": mean, "noise_p99": p99}

    streams: dict[tuple[bytes, str], list[RealSeen]] = {}
    for s in seen:
        streams.setdefault((s.sender, s.model), []).append(s)
    upd: dict[str, list[tuple[float, int]]] = {"inside": [], "outside": [], "boundary": []}
    for lst in streams.values():
        for a, b in zip(lst, lst[1:], strict=False):
            if b.time - a.time > run.max_gap:
                continue
            local = b.local_sum - a.local_sum
            if not np.any(local):
                continue  # no training between the two pushes
            phase = ("inside" if a.noisy and b.noisy else
                     "outside" if not a.noisy and not b.noisy else "boundary")
            upd[phase].append((abs(_corr(b.payload - a.payload, local)), a.payload.size))

    def values(select: Any, vs_average: bool = False) -> dict[str, object]:
        xs = [s for s in seen if select(s)]
        corr = [float(s.extra["vs_average_corr"]) if vs_average  # type: ignore[arg-type]
                else s.values_corr for s in xs]
        return {**stats(corr), **floor([s.payload.size for s in xs])}

    def updates(phase: str) -> dict[str, object]:
        xs = upd[phase]
        return {**stats([c for c, _ in xs]), **floor([n for _, n in xs])}

    out: dict[str, object] = {
        "mode": mode,
        "values_inside": values(lambda s: s.noisy),
        "values_inside_hidden_case": values(lambda s: s.noisy and s.hidden_case),
        "values_outside": values(lambda s: not s.noisy),
        # inside epochs by the push's noise age (how far its noise has mixed)
        "values_inside_by_noise_age": {
            f"{lo}-{hi - 1}" if hi < 10 ** 6 else f">={lo}":
            values(lambda s, lo=lo, hi=hi: s.noisy and lo <= s.noise_age < hi)
            for lo, hi in _AGE_BINS},
        # the same for senders with >= 2 pairs with others than the observer
        "values_hidden_case_by_noise_age": {
            f"{lo}-{hi - 1}" if hi < 10 ** 6 else f">={lo}":
            values(lambda s, lo=lo, hi=hi: s.noisy and s.hidden_case and lo <= s.noise_age < hi)
            for lo, hi in _AGE_BINS},
        # the same against the plain average (the other holders' folds of this epoch not
        # left out, see _wave_folds) and the sender's values when merged, as measured
        # before; and its control: against non-senders' values
        "values_hidden_case_by_noise_age_vs_average": {
            f"{lo}-{hi - 1}" if hi < 10 ** 6 else f">={lo}":
            values(lambda s, lo=lo, hi=hi: s.noisy and s.hidden_case and lo <= s.noise_age < hi,
                   vs_average=True)
            for lo, hi in _AGE_BINS},
        "values_hidden_case_by_noise_age_control": {
            f"{lo}-{hi - 1}" if hi < 10 ** 6 else f">={lo}":
            {**stats([float(s.extra["corr_others"]) for s in seen  # type: ignore[arg-type]
                      if s.noisy and s.hidden_case and lo <= s.noise_age < hi])}
            for lo, hi in _AGE_BINS},
        # against the sender's own part (its values less the other holders' mean), by
        # noise age, for senders with >= 2 pairs with others: the acceptance figure; next
        # to its null (a push carrying the average rounded to float32), its positive
        # control (a leak of the sender's values as small as the push's deviation), the
        # push's deviation from the average (RMS, median) and the sender's own part's
        "own_part_by_noise_age": {
            f"{lo}-{hi - 1}" if hi < 10 ** 6 else f">={lo}":
            _own_part([s for s in seen if s.noisy and s.hidden_case
                       and lo <= s.noise_age < hi])
            for lo, hi in _AGE_BINS},
        "own_part_inside": _own_part([s for s in seen if s.noisy and s.hidden_case]),
        # pushes at noise ages 10-39 deviating by more than rounding, classified
        "deviating_pushes": _outliers([s for s in seen if s.noisy and s.hidden_case]),
        "replies_merged": sum(c.counters.replies_received
                              for n, _ in by_id.values() for c in n.cores.values()),
        # inside epochs by the sender's own epoch phase then ("clear": it holds only noise
        # received from others)
        "values_inside_by_sender_phase": {
            phase: values(lambda s, phase=phase: s.noisy and s.phase == phase)
            for phase in sorted({s.phase for s in seen if s.noisy})},
        "updates_inside": updates("inside"),
        "updates_outside": updates("outside"),
        "updates_boundary": updates("boundary"),
        "share_of_pushes_inside": (sum(1 for s in seen if s.noisy) / len(seen)) if seen else 0.0,
        "pushes_observed": len(seen),
        "senders_observed": len({s.sender for s in seen}),
        "models": sorted({s.model for s in seen}),
        "mean_accuracy": summary["mean_accuracy"],
        "worst_accuracy": summary["worst_accuracy"],
        "simulated_seconds": summary["simulated_seconds"],
        "timed_out": summary["timed_out"],
        "rounds_trained": [r.rounds for r in runners],
        # rounds in a row a node held noise (the forced fold's bound must sit above them)
        "noisy_streak_rounds": _quantiles([x for r in runners for x in r.streaks]),
        "pushes_rejected": sum(int(r.get("pushes_rejected") or 0) for r in summary["nodes"]),
        "guard_refused_by_rule": dict(sorted(refused.items())),
        "clip_floor": _clip_floor_figures(clip_log),
        "cpu_seconds": cpu,
        # one row per push inside epochs (diagnostics: what made a push readable)
        "push_log": [{"time": s.time, "model": s.model, "sender": s.sender[:4].hex(),
                      "values_corr": s.values_corr, "raw_corr": s.raw_corr,
                      "noise_age": s.noise_age,
                      "noise_ratio": s.noise_ratio, "pairs": s.pairs, "weight": s.weight,
                      "phase": s.phase, "hidden_case": s.hidden_case, **s.extra}
                     for s in seen if s.noisy],
    }
    eps = [s for s in spent if s is not None]
    if eps:
        out["dp"] = {"epsilon_max": max(s.epsilon for s in eps),
                     "delta": eps[0].delta, "steps_max": max(s.steps for s in eps)}
    return out


def report_real(run: RealRun, modes: tuple[str, ...]) -> dict[str, object]:
    """Every mode's observer figures over real nodes, printed as a table."""
    print(f"real nodes: observer = node 0 of {run.nodes}, digits (small MLP, partial scheme), "
          f"{run.rounds} rounds on virtual time; |corr| mean/median (count) next to "
          "independent noise of the same lengths (mean/p99)")
    print(f"{'mode':<10} {'phase':<8} {'values':>20} {'noise':>13} {'(>=2 others)':>20} "
          f"{'updates':>20} {'noise':>13}")
    results: dict[str, object] = {"run": asdict(run), "modes": {}}
    for mode in modes:
        r = simulate_real(run, mode)
        results["modes"][mode] = r  # type: ignore[index]
        for phase in ("inside", "outside"):
            v = r[f"values_{phase}"]
            u = r[f"updates_{phase}"]
            hid = r["values_inside_hidden_case"] if phase == "inside" else {}
            print(f"{mode:<10} {phase:<8} {_fmt_real(v):>20} {_floor_fmt(v):>13} "
                  f"{_fmt_real(hid):>20} {_fmt_real(u):>20} {_floor_fmt(u):>13}")
        ages = r["values_inside_by_noise_age"]
        if any(a["count"] for a in ages.values()):  # type: ignore[attr-defined]
            print(f"{'':<10} values inside epochs by the push's noise age: " + ", ".join(
                f"{k}: {_fmt_real(a)}" for k, a in ages.items()))  # type: ignore[attr-defined]
            hid_ages = r["values_hidden_case_by_noise_age"]
            print(f"{'':<10} same, sender with >= 2 pairs with others: " + ", ".join(
                f"{k}: {_fmt_real(a)}" for k, a in hid_ages.items()  # type: ignore[attr-defined]
                if a["count"]))
            for key, what in (("vs_average", "against the plain average (as before)"),
                              ("control", "control, against non-senders' values")):
                print(f"{'':<10} same, {what}: " + ", ".join(
                    f"{k}: {_fmt_real(a)}"
                    for k, a in r[f"values_hidden_case_by_noise_age_{key}"].items()  # type: ignore[attr-defined]
                    if a["count"]))
            own = r["own_part_by_noise_age"]
            print(f"{'':<10} against the sender's own part (its values less the other "
                  "holders' mean), >= 2 pairs with others, by noise age: |corr| mean/median; "
                  "null (the average rounded to float32); positive control (a leak as small "
                  "as the push's deviation); the push's deviation from the average / the own "
                  "part (RMS); share over the noise p99")
            for k, a in own.items():  # type: ignore[attr-defined]
                if a["count"]:
                    print(f"{'':<12} {k:>6}: {a['mean']:.3f}/{a['median']:.3f} ({a['count']}) "
                          f"null {a['null_mean']:.3f}  leak {a['leak_mean']:.3f}  "
                          f"noise {a['noise_mean']:.3f}/{a['noise_p99']:.3f}  deviation "
                          f"{a['deviation_rms']:.1e} / {a['own_rms']:.1e}  "
                          f"over p99 {100 * a['share_over_p99']:.0f}%; before the fix "
                          f"{a['before_fix_mean']:.3f} ({a['merged_after_fold']} merged "
                          "after their sender folded)")
            print(f"{'':<10} once the other holders' clear training since the sender's "
                  "noise began is attributed to them (fit and taken out): |corr| with the own "
                  "part / null / positive control")
            for k, a in own.items():  # type: ignore[attr-defined]
                if a["count"]:
                    print(f"{'':<12} {k:>6}: {a['attributed_mean']:.3f} null "
                          f"{a['attributed_null_mean']:.3f} leak {a['attributed_leak_mean']:.3f}")
            dv = r["deviating_pushes"]
            for label in ("outliers", "rest"):
                g = dv[label]  # type: ignore[index]
                sign = ">" if label == "outliers" else "<="
                print(f"{'':<10} noise age 10-39, {label} (deviation {sign} "
                      f"{OUTLIER_OVER_ROUNDING:g} x rounding): {g['count']}; "
                      f"{g['by_what_the_sender_merged']}; r2 others {g['r2_others_median']:.3f}"
                      f", + sender's own {g['r2_all_median']:.3f}; |corr| own "
                      f"{g['corr_own_mean']:.3f} -> attributed "
                      f"{g['corr_own_attributed_mean']:.3f}, non-senders "
                      f"{g['corr_swap_mean']:.3f}; deviation {g['dev_rms_median']:.1e} -> "
                      f"{g['residual_rms_median']:.1e}")
            phases = r["values_inside_by_sender_phase"]
            print(f"{'':<10} values inside epochs by the sender's epoch phase: " + ", ".join(
                f"{k}: {_fmt_real(a)}" for k, a in phases.items()))  # type: ignore[attr-defined]
        acc = r["mean_accuracy"]
        acc_s = "-" if acc is None else f"{100 * float(acc):.1f}%"  # type: ignore[arg-type]
        extra = ""
        if "dp" in r:
            d = r["dp"]
            extra = f", epsilon {d['epsilon_max']:.3g} at delta {d['delta']:g}"  # type: ignore[index]
        streak = r["noisy_streak_rounds"]
        if streak["count"]:  # type: ignore[index]
            print(f"{'':<10} rounds in a row a node held noise: median "
                  f"{streak['median']:.0f}, p99 {streak['p99']:.0f}, "  # type: ignore[index]
                  f"largest {streak['max']:.0f} ({streak['count']} epochs)")  # type: ignore[index]
        print(f"{'':<10} {len(r['rounds_trained'])} nodes, pushes seen "  # type: ignore[arg-type]
              f"{r['pushes_observed']} from {r['senders_observed']} senders, "
              f"{100 * float(r['share_of_pushes_inside']):.1f}% inside epochs, "  # type: ignore[arg-type]
              f"{r['pushes_rejected']} pushes rejected swarm-wide "
              f"(merge guard by rule: {r['guard_refused_by_rule'] or 'none'}), "
              f"mean accuracy {acc_s}{extra}, {float(r['cpu_seconds']):.0f} CPU s",  # type: ignore[arg-type]
              flush=True)
    return results


def _fmt_real(s: object) -> str:
    d = s if isinstance(s, dict) else {}
    if not d.get("count"):
        return "-"
    return f"{d['mean']:.3f}/{d['median']:.3f} ({d['count']})"


def _floor_fmt(s: object) -> str:
    d = s if isinstance(s, dict) else {}
    if not d.get("count"):
        return "-"
    return f"{d['noise_mean']:.3f}/{d['noise_p99']:.3f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true", help="8 nodes, 60 rounds, length 200")
    ap.add_argument("--grid", action="store_true",
                    help="masked mode over epoch settings (8 nodes, length 200, 200 rounds)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write the figures to this file")
    ap.add_argument("--real", action="store_true",
                    help="real nodes on the in-memory network (virtual clock) instead of cores")
    ap.add_argument("--nodes", type=int, default=8, help="--real: nodes (default 8)")
    ap.add_argument("--rounds", type=int, default=200, help="--real: rounds (default 200)")
    ap.add_argument("--modes", default="none,masked",
                    help="--real: comma-separated modes of " + ", ".join(MODES)
                    + " (default none,masked)")
    args = ap.parse_args(argv)
    if args.real:
        modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
        bad = [m for m in modes if m not in MODES]
        if bad or not modes:
            ap.error(f"--modes: expected some of {', '.join(MODES)}, got {args.modes!r}")
        if args.nodes < 3 or args.rounds < 2:
            ap.error(f"--real needs --nodes >= 3 and --rounds >= 2, got {args.nodes}, "
                     f"{args.rounds}")
        real = report_real(RealRun(nodes=args.nodes, rounds=args.rounds, seed=args.seed), modes)
        if args.json:
            args.json.write_text(json.dumps(real, indent=1, default=float))
        return 0
    dp = DPSection()
    base = Run(seed=args.seed, dp_delta=dp.delta)
    if args.quick:
        base = Run(nodes=8, dim=200, rounds=60, seed=args.seed, dp_delta=dp.delta)
    if args.grid:
        base = Run(nodes=8, dim=200, rounds=200, seed=args.seed, dp_delta=dp.delta)
    figures: dict[str, object] = {}
    if args.grid:
        figures["grid"] = grid(base)
    else:
        figures = report(base, MODES)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
