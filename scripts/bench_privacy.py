"""What an honest-but-curious neighbour learns from the pushes it receives.

The push-sum cores (gossip/pushsum.py) with the node's settings and its
masking epochs (gossip/mask_epochs.py, the driver's steps: an epoch agreed
after a round when due, the noisy loop's extra waves while noise is held, the
fold) run a whole training run of ``--rounds`` rounds.  Local training is a
stand-in with the shape that matters: each node pulls its values towards a
private target, plus mini-batch noise (DP modes: each step's update clipped
and Gaussian noise added, as DP-SGD does, and the accountant of
learner/dp_accounting.py counts the steps).  Node 0 is the observer: it
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

Usage::

    .venv/bin/python scripts/bench_privacy.py [--quick] [--json PATH]
    .venv/bin/python scripts/bench_privacy.py --grid   # epoch settings: hiding vs cost
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from gossip.compression import decode
from gossip.mask_epochs import EpochSettings, MaskEpochs
from gossip.pushsum import PushSum
from learner.dp_accounting import PrivacyAccountant, noise_multiplier_for
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
        run = Run(**{**asdict(base), "epochs": ep})  # type: ignore[arg-type]
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--quick", action="store_true", help="8 nodes, 60 rounds, length 200")
    ap.add_argument("--grid", action="store_true",
                    help="masked mode over epoch settings (8 nodes, length 200, 200 rounds)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write the figures to this file")
    args = ap.parse_args(argv)
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
