"""Push-sum benchmark: convergence, loss, crashes and the masked exchange.

Prints the figures listed in docs/design/gossip.md; ``--json PATH`` also writes them,
``--quick`` runs a reduced set (one seed, no N = 1,024).  ``--exchange`` prints
only the exchange figures (push vs push-pull, wire encodings, requests as
deltas against the pair's reference or not, bytes per node, and the 4-peer,
1M-float averaging case).  ``--epochs`` prints only the masking-epoch figures
(gossip/masking/epochs.py): one crash during an epoch, survivors' error with and
without the removal of their pair sides next to the same crash in clear, per
mask scale; hiding (also against a receiver that is a pair partner); extra
rounds to 1e-6.

    .venv/bin/python scripts/bench/pushsum.py [--quick] [--exchange] [--epochs] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from gossip.compression import decode
from gossip.masking.epochs import EpochSettings, MaskEpochs
from gossip.messages import Push
from gossip.pushsum import PushSum
from lab.sim.pushsum import Faults, LeastRecentSampler, Simulation, random_models

TOL = 1e-6
DIM = 8


BENCH_MASK_STD = 100.0  # the scale the masked figures in docs/design/gossip.md were measured at


def _sim(n: int, seed: int, dim: int = DIM, **kwargs: Any) -> Simulation:
    rng = np.random.default_rng(seed)
    if kwargs.get("privacy") == "masked":
        kwargs.setdefault("mask_std", BENCH_MASK_STD)
    return Simulation(random_models(n, dim, rng), seed=seed, **kwargs)


def _median_spread(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def convergence(sizes: list[int], seeds: list[int]) -> list[dict[str, object]]:
    rows = []
    for n in sizes:
        rounds = []
        for seed in seeds:
            r = _sim(n, seed).run_until("G", TOL, 500)
            rounds.append(float(r if r is not None else math.inf))
        rows.append({
            "n": n,
            "rounds": _median_spread(rounds),
            "log2_n_plus_log2_1e6": math.log2(n) + math.log2(1 / TOL),
        })
        print(f"  N={n:5d}  rounds to worst error < 1e-6: median {statistics.median(rounds):5.1f} "
              f"[{min(rounds):.0f}-{max(rounds):.0f}]   log2(N)+log2(1e6) = "
              f"{math.log2(n) + math.log2(1 / TOL):5.1f}")
    return rows


def loss(rates: list[float], seeds: list[int], n: int = 64, rounds: int = 200) -> list[dict]:
    rows = []
    for rate in rates:
        w_live, w_quiet, errs, fails = [], [], [], []
        for seed in seeds:
            sim = _sim(n, seed, faults=Faults(loss=rate))
            sim.run(rounds)
            w_live.append(sim.total_weight("G") / n)
            sim.quiesce()
            w_quiet.append(sim.total_weight("G") / n)
            errs.append(float(sim.errors("G").max()))
            fails.append(float(sum(c.counters.failures for c in sim.cores.values())))
        rows.append({"loss": rate, "weight_per_node_live": _median_spread(w_live),
                     "weight_per_node_quiesced": _median_spread(w_quiet),
                     "worst_error": _median_spread(errs), "pushes_given_up": _median_spread(fails)})
        print(f"  loss {rate:4.0%}: total weight / N after {rounds} rounds {statistics.median(w_live):.4f}"
              f" (incl. unacked in flight), {statistics.median(w_quiet):.6f} once settled;"
              f" worst error {statistics.median(errs):.1e}; pushes given up "
              f"{statistics.median(fails):.0f}")
    return rows


def crashes(when: list[int], seeds: list[int], privacy: str, n: int = 64,
            rounds: int = 200) -> list[dict]:
    rows = []
    for r in when:
        e_all, e_surv = [], []
        for seed in seeds:
            sim = _sim(n, seed, privacy=privacy, faults=Faults(crashes=((n // 2, r),)))
            sim.run(rounds)
            sim.quiesce()
            e_all.append(float(sim.errors("G").max()))
            e_surv.append(float(sim.errors("G", sim.target("G", survivors_only=True)).max()))
        rows.append({"crash_round": r, "privacy": privacy,
                     "error_vs_all_mean": _median_spread(e_all),
                     "error_vs_survivor_mean": _median_spread(e_surv)})
        print(f"  [{privacy:6s}] crash at round {r:2d}: survivors' error vs mean of all "
              f"{statistics.median(e_all):.1e}, vs survivors' initial mean "
              f"{statistics.median(e_surv):.1e}")
    return rows


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a - a.mean(), b - b.mean()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def masked(seeds: list[int], n: int = 64, rounds: int = 200) -> dict[str, object]:
    out: dict[str, Any] = {}
    exact, extra, r_plain, r_masked = [], [], [], []
    for seed in seeds:
        a = _sim(n, seed).run_until("G", TOL, 500)
        sim = _sim(n, seed, privacy="masked")
        b = sim.run_until("G", TOL, 500)
        sim.run(rounds - sim.round)
        sim.quiesce()
        exact.append(float(sim.errors("G").max()))
        r_plain.append(float(a or math.inf))
        r_masked.append(float(b or math.inf))
        extra.append(float((b or math.inf) - (a or math.inf)))
    out["error_no_faults"] = _median_spread(exact)
    out["rounds_unmasked"] = _median_spread(r_plain)
    out["rounds_masked"] = _median_spread(r_masked)
    out["extra_rounds"] = _median_spread(extra)
    print(f"  no faults: worst relative error after {rounds} rounds "
          f"{statistics.median(exact):.1e} (target <= 1e-9)")
    print(f"  rounds to 1e-6 on the trained values: unmasked {statistics.median(r_plain):.0f}, "
          f"masked {statistics.median(r_masked):.0f} -> masking costs "
          f"{statistics.median(extra):.0f} extra rounds")

    # hiding: what receivers see versus the sender's true (trained) values
    dim = 1000
    seen: dict[str, list[float]] = {"masked": [], "noisy": [], "clean": []}

    def observe(rnd: int, src: int, dst: int, push: Push, core: PushSum) -> None:
        kind = "masked" if push.masked else "noisy" if push.noisy else "clean"
        seen[kind].append(abs(_corr(decode(push.values, push.values.length), core.values)))

    for seed in seeds:
        sim = _sim(n, seed, dim=dim, privacy="masked", on_send=observe)
        sim.run(10)
    rng = np.random.default_rng(0)
    noise_floor = [abs(_corr(rng.normal(size=dim), rng.normal(size=dim))) for _ in range(2000)]
    out["hiding"] = {
        "dim": dim,
        "mean_abs_corr_masked_pushes": statistics.fmean(seen["masked"]),
        "max_abs_corr_masked_pushes": max(seen["masked"]),
        "mean_abs_corr_noisy_pushes": statistics.fmean(seen["noisy"]) if seen["noisy"] else None,
        "mean_abs_corr_independent_noise": statistics.fmean(noise_floor),
        "p99_abs_corr_independent_noise": float(np.quantile(noise_floor, 0.99)),
        "mean_abs_corr_unmasked_pushes": 1.0,
    }
    h = out["hiding"]
    print(f"  hiding (dim {dim}): |corr(sent, sender's values)| masked pushes mean "
          f"{h['mean_abs_corr_masked_pushes']:.4f} max {h['max_abs_corr_masked_pushes']:.4f}; "
          f"later noisy pushes mean {h['mean_abs_corr_noisy_pushes']:.4f}; two independent "
          f"noise vectors mean {h['mean_abs_corr_independent_noise']:.4f} "
          f"p99 {h['p99_abs_corr_independent_noise']:.4f}; unmasked pushes 1")
    return out


class _EpochRun:
    """N cores with masking epochs (gossip/masking/epochs.py), pushes delivered at once.

    ``privacy="none"`` runs the same push schedule in clear (no epoch).  One
    model, weights 1, one-way pushes to a uniformly drawn other node.
    """

    FP = bytes(32)

    def __init__(self, n: int, dim: int, seed: int, scale: float, privacy: str,
                 mix_exchanges: int = 40, partners: int = 3) -> None:
        init = np.random.default_rng(seed)
        self.schedule = np.random.default_rng(seed + 1000)  # same pushes whatever the mode
        self.ids = [i.to_bytes(4, "big") for i in range(n)]
        self.initial = {i: init.normal(1.0, 1.0, dim) for i in self.ids}
        self.cores = {i: PushSum(self.FP, self.initial[i], privacy=privacy, masked_pushes=0,
                                 exchange="push", unmask_after=mix_exchanges,
                                 rng=np.random.default_rng(seed + k))
                      for k, i in enumerate(self.ids)}
        settings = EpochSettings(partners=partners, mask_scale=scale,
                                 mix_exchanges=mix_exchanges)
        self.epochs = {i: MaskEpochs(i, self.FP, dim, settings) for i in self.ids}
        self.alive = list(self.ids)
        # |corr(push, sender's trained values)| of noisy pushes, per mixing round
        self.corr: list[list[float]] = []
        # the same seen by a receiver that is a pair partner of the sender and
        # projects the pairs it knows out of the push (least squares)
        self.partner_corr: list[float] = []
        if privacy == "masked":
            self._setup(np.random.default_rng(seed + 2000))

    def _setup(self, rng: np.random.Generator) -> None:
        for i in self.ids:
            others = [p for p in self.ids if p != i]
            picks = [others[k] for k in rng.permutation(len(others))]
            for peer, offer in self.epochs[i].start(picks, self.cores[i].weight):
                accept, side = self.epochs[peer].on_offer(i, offer,
                                                          self.cores[peer].weight)
                if side is not None:
                    self.cores[peer].add_noise_mass(side)
                self.cores[i].add_noise_mass(
                    self.epochs[i].on_accept(peer, accept))

    def round(self, observe: bool = False) -> None:
        n = len(self.alive)
        if observe:
            self.corr.append([])
        for src in list(self.alive):
            core = self.cores[src]
            k = int(self.schedule.integers(n - 1))
            dst = self.alive[k] if self.alive[k] != src else self.alive[-1]
            weight = core.weight
            for peer, push in core.make_pushes([dst], 0.0):
                if observe and push.noisy:
                    sent = decode(push.values, push.values.length)
                    self.corr[-1].append(abs(_corr(sent, core.values)))
                    known = self.epochs[peer].sides_with(src)
                    if known and len(self.corr) <= 3:
                        basis = np.stack(known, axis=1)
                        coef, *_ = np.linalg.lstsq(basis, sent, rcond=None)
                        self.partner_corr.append(abs(_corr(sent - basis @ coef, core.values)))
                core.on_ack(peer, self.cores[peer].on_push(src, push, 0.0), 0.0)
                self.epochs[src].note_pushed(peer, push.weight / weight)
            if not core.noisy:
                self.epochs[src].on_folded()

    def crash(self, node: bytes, remove: bool) -> None:
        self.alive.remove(node)
        for i in self.alive:
            back = self.epochs[i].partner_lost(node)
            if back is not None and remove:
                self.cores[i].add_noise_mass(back, fresh=False)

    def survivors_mean(self) -> np.ndarray:
        """The average the survivors converge to: their sum of mass over their sum of weight."""
        mass = sum((self.cores[i].mass for i in self.alive), np.zeros(self.cores[self.alive[0]].length))
        return mass / sum(self.cores[i].weight for i in self.alive)

    def error_vs_all(self) -> float:
        mean = sum(self.initial.values()) / len(self.ids)
        return max(float(np.linalg.norm(self.cores[i].values - mean) / np.linalg.norm(mean))
                   for i in self.alive)


def epoch_crashes(when: list[int], scales: list[float], seeds: list[int], n: int = 32,
                  dim: int = 256, rounds: int = 300) -> dict[str, object]:
    """One crash during a masking epoch: survivors' error, with and without the removal."""
    rows = []
    for scale in scales:
        for r in when:  # (an empty list: only the hiding and cost figures)
            errs: dict[str, list[float]] = {"clear": [], "removed": [], "kept": []}
            # the survivors' average (sum of mass / sum of weight) against the same crash
            # without masking (relative)
            vs_clear: list[float] = []
            for seed in seeds:
                means = {}
                for mode in errs:
                    run = _EpochRun(n, dim, seed, scale, "none" if mode == "clear" else "masked")
                    for _ in range(r):
                        run.round()
                    run.crash(run.ids[n // 2], remove=mode == "removed")
                    for _ in range(rounds - r):
                        run.round()
                    errs[mode].append(run.error_vs_all())
                    means[mode] = run.survivors_mean()
                vs_clear.append(float(np.linalg.norm(means["removed"] - means["clear"])
                                      / np.linalg.norm(means["clear"])))
            rows.append({"mask_scale": scale, "crash_round": r,
                         **{f"error_{k}": _median_spread(v) for k, v in errs.items()},
                         "removed_vs_clear": _median_spread(vs_clear)})
            print(f"  scale {scale:5g}  crash at mixing round {r:2d}: survivors' error vs mean of "
                  f"all: clear {statistics.median(errs['clear']):.1e}, epoch + removal "
                  f"{statistics.median(errs['removed']):.1e}, epoch without removal "
                  f"{statistics.median(errs['kept']):.1e}; survivors' average, epoch + removal "
                  f"vs clear: {statistics.median(vs_clear):.1e} relative")
    hiding = []
    rng = np.random.default_rng(0)
    floor = [abs(_corr(rng.normal(size=dim), rng.normal(size=dim))) for _ in range(2000)]
    for scale in scales:
        first: list[float] = []  # pushes of the first 3 mixing rounds
        later: list[float] = []  # rounds 10-40: the noise has partly mixed
        partner: list[float] = []  # rounds 1-3, receivers that are pair partners
        extra = []
        for seed in seeds:
            run = _EpochRun(n, dim, seed, scale, "masked")
            clear = _EpochRun(n, dim, seed, scale, "none")
            done_m = done_c = None
            for k in range(1, 400):
                run.round(observe=True)
                clear.round()
                if done_m is None and run.error_vs_all() < TOL:
                    done_m = k
                if done_c is None and clear.error_vs_all() < TOL:
                    done_c = k
                if done_m is not None and done_c is not None:
                    break
            first.extend(c for rnd in run.corr[:3] for c in rnd)
            later.extend(c for rnd in run.corr[9:40] for c in rnd)
            partner.extend(run.partner_corr)
            extra.append(float((done_m or math.inf) - (done_c or math.inf)))
        row = {"mask_scale": scale,
               "mean_abs_corr_rounds_1_3": statistics.fmean(first),
               "max_abs_corr_rounds_1_3": max(first),
               "mean_abs_corr_rounds_10_40": statistics.fmean(later) if later else None,
               "mean_abs_corr_partner_rounds_1_3": statistics.fmean(partner) if partner else None,
               "pushes_to_partners_rounds_1_3": len(partner),
               "mean_abs_corr_independent_noise": statistics.fmean(floor),
               "p99_abs_corr_independent_noise": float(np.quantile(floor, 0.99)),
               "extra_rounds_to_1e-6": _median_spread(extra)}
        hiding.append(row)
        print(f"  scale {scale:5g}  |corr(noisy push, sender's values)|: mixing rounds 1-3 mean "
              f"{statistics.fmean(first):.3f} max {max(first):.3f}, rounds 10-40 mean "
              f"{statistics.fmean(later) if later else math.nan:.3f}, seen by a pair partner "
              f"(rounds 1-3, its pairs projected out) "
              f"{statistics.fmean(partner) if partner else math.nan:.3f} "
              f"over {len(partner)} pushes (independent noise: mean "
              f"{row['mean_abs_corr_independent_noise']:.3f}, p99 "
              f"{row['p99_abs_corr_independent_noise']:.3f}); extra rounds to 1e-6 "
              f"{statistics.median(extra):.0f}")
    return {"n": n, "dim": dim, "rounds": rounds, "crashes": rows, "hiding": hiding}


EXCHANGE_TOL = 1e-4  # max|x - m| <= 1e-4 max|m| on every holder


def _to_tolerance(n: int, dim: int, seed: int, max_rounds: int,
                  **kwargs: object) -> tuple[float, float]:
    """(rounds, mean payload bytes sent per node) until every holder is within EXCHANGE_TOL."""
    sim = _sim(n, seed, dim=dim, **kwargs)
    r = sim.run_until("G", EXCHANGE_TOL, max_rounds, worst_coordinate=True)
    return float(r if r is not None else math.inf), statistics.fmean(sim.bytes_sent("G"))


# (label, PushSum options) of the exchange rows; "refs": requests as deltas
# against the pair's reference (the default), "no refs": reference_store_bytes=0
EXCHANGE_CASES: tuple[tuple[str, dict[str, object]], ...] = (
    ("push f32", dict(exchange="push", encoding="f32")),
    ("push-pull f32, no refs", dict(encoding="f32", reference_store_bytes=0)),
    ("push-pull f32, refs", dict(encoding="f32")),
    ("push-pull f16, refs", dict(encoding="f16")),
    ("push-pull int8, refs", dict(encoding="int8")),
)


def exchange(sizes: list[int], seeds: list[int], dim: int = 1024) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for n in sizes:
        for label, kwargs in EXCHANGE_CASES:
            rounds, sent = [], []
            for seed in seeds:
                r, b = _to_tolerance(n, dim, seed, 150, delta_encoding="int8", **kwargs)
                rounds.append(r)
                sent.append(b)
            ok = [b for r, b in zip(rounds, sent, strict=True) if math.isfinite(r)]
            row = {"n": n, "case": label, **kwargs, "delta_encoding": "int8", "dim": dim,
                   "rounds": _median_spread(rounds),
                   "bytes_per_value": statistics.median(ok) / dim if ok else None}
            rows.append(row)
            r_med = statistics.median(rounds)
            b_txt = (f"{statistics.median(ok) / dim:6.1f} B/value" if ok
                     else "  never (floor of the encoding)")
            print(f"  N={n:3d} {label:24s} (int8 deltas): rounds {r_med:5.1f} "
                  f"[{min(rounds):.0f}-{max(rounds):.0f}]  payload per node {b_txt}")
    return rows


EXACT_LOWER_BOUND_MB = 4.0  # an exact all-reduce of 1M float32: each peer sends its 4 MB once


def averaging_1m(seeds: list[int], dim: int = 1_000_000) -> list[dict[str, object]]:
    """4 peers, 1M float32 values each: payload per peer until all are within 1e-4."""
    rows: list[dict[str, object]] = []
    for label, kwargs, least_recent in (
        ("push-pull f32, no refs (before)", dict(encoding="f32", reference_store_bytes=0),
         False),
        ("push-pull f32, refs, random peer", dict(encoding="f32"), False),
        ("push-pull f32, refs, least-recent peer", dict(encoding="f32"), True),
        ("push-pull int8, refs, random peer", dict(encoding="int8"), False),
        ("push-pull int8, refs, least-recent peer", dict(encoding="int8"), True),
    ):
        rounds, sent = [], []
        for seed in seeds:
            kw = dict(kwargs)
            if least_recent:
                kw["sampler"] = LeastRecentSampler()  # fresh per run
            r, b = _to_tolerance(4, dim, seed, 60, **kw)
            rounds.append(r)
            sent.append(b)
        mb = statistics.median(sent) / 1e6
        rows.append({"case": label, "rounds": _median_spread(rounds),
                     "mb_per_peer": _median_spread([b / 1e6 for b in sent]),
                     "times_exact_lower_bound": mb / EXACT_LOWER_BOUND_MB})
        print(f"  {label:42s} rounds {statistics.median(rounds):4.1f} "
              f"[{min(rounds):.0f}-{max(rounds):.0f}]  payload per peer "
              f"{mb:6.1f} MB [{min(sent) / 1e6:.1f}-{max(sent) / 1e6:.1f}] "
              f"= {mb / EXACT_LOWER_BOUND_MB:.1f}x the exact 4 MB")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one seed, fewer sizes")
    ap.add_argument("--json", type=Path, help="write the figures as JSON")
    ap.add_argument("--exchange", action="store_true", help="only the exchange figures")
    ap.add_argument("--epochs", action="store_true",
                    help="only the masking-epoch figures (crash table, hiding, cost)")
    args = ap.parse_args(argv)
    seeds = [0] if args.quick else [0, 1, 2]
    sizes = [16, 64, 256] if args.quick else [16, 64, 256, 1024]
    started = time.perf_counter()
    fig: dict[str, object] = {"command": " ".join(sys.argv), "seeds": seeds}
    print("masking epochs (N=32, dim 256, 3 pairs offered per node, mix_exchanges 40):")
    fig["mask_epochs"] = epoch_crashes([0, 1, 2, 10, 40], [1.0, 10.0], seeds)
    if args.epochs:
        fig["seconds"] = time.perf_counter() - started
        if args.json:
            args.json.write_text(json.dumps(fig, indent=2))
        return 0
    print(f"exchange: rounds and payload per node until max|x - m| <= {EXCHANGE_TOL:g} max|m| "
          "(dim 1024):")
    fig["exchange"] = exchange([8, 16], seeds)
    print("averaging primitive: 4 peers, 1M values each, to 1e-4:")
    fig["averaging_1m"] = averaging_1m(seeds)
    if args.exchange:
        fig["seconds"] = time.perf_counter() - started
        if args.json:
            args.json.write_text(json.dumps(fig, indent=2))
        return 0
    print("convergence (uniform peer choice, fanout 1, dim 8):")
    fig["convergence"] = convergence(sizes, seeds)
    print("message loss (N=64, each push and each ack dropped independently):")
    fig["loss"] = loss([0.01, 0.05], seeds)
    print("one crash (N=64, 200 rounds):")
    fig["crash"] = crashes([1, 10, 40], seeds, "none")
    print("masked exchange (N=64, 3 masked pushes, mask_std 100, unmask_after 40):")
    fig["masked"] = masked(seeds)
    fig["masked_crash"] = crashes([1, 2, 10, 40], seeds, "masked")
    fig["seconds"] = time.perf_counter() - started
    print(f"({fig['seconds']:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(fig, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
