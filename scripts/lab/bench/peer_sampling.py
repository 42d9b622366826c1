"""Benchmark of the peer sampling service in the seeded in-process simulator.

Prints the figures of the peer-sampling issue (N = 1,000, c = 20, l = 5):
in-degree after 50 periods, recovery after 50% / 80% crashes, discovery of a
model held by 3 nodes, joining through one seed, behaviour under message loss,
and wall time per simulated period at N = 1,000 and N = 10,000.

    .venv/bin/python scripts/bench/peer_sampling.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import statistics
import time
from pathlib import Path
from typing import Any

from peersampling import Simulator

MODEL = hashlib.sha256(b"bench-semi-local-model").digest()


def warmed(n: int, c: int, l: int, periods: int, seed: int, **kw: Any) -> Simulator:  # noqa: E741
    sim = Simulator(c=c, l=l, seed=seed, **kw)
    sim.add_nodes(n)
    sim.fill_random_views()
    sim.run(periods)
    return sim


def degree_row(sim: Simulator) -> dict[str, float]:
    st = sim.in_degree_stats()
    return {"mean": st.mean, "std": st.std, "min": st.min, "max": st.max}


def crash_experiment(
    base: Simulator, fraction: float, checkpoints: list[int], retries: int | None = None
) -> list[dict]:
    sim = copy.deepcopy(base)
    if retries is not None:
        for s in sim.nodes.values():
            s.retries = retries
    sim.crash_fraction(fraction)
    rows = []
    done = 0
    for at in [0, *checkpoints]:
        sim.run(at - done)
        done = at
        links = sum(len(v) for v in sim.graph().values())
        rows.append(
            {
                "periods_after": at,
                "survivors": len(sim.nodes),
                "largest_weak_component": sim.largest_component_fraction(),
                "largest_strong_component": sim.largest_component_fraction(strong=True),
                "dead_links": sim.dead_links(),
                "links": links,
            }
        )
    return rows


def holders_know_each_other(sim: Simulator, holders: list[str]) -> bool:
    everyone = set(holders)
    for h in holders:
        known = {d.address for d in sim.nodes[h].model_view(MODEL)}
        if not (everyone - {h}) <= known:
            return False
    return True


def discovery_trial(
    base: Simulator, trial: int, holders_n: int, cap: int, lookups: bool
) -> int | None:
    sim = copy.deepcopy(base)
    sim.reseed(1000 + trial)
    holders = sim.rng.sample(sorted(sim.nodes), holders_n)
    for h in holders:
        sim.nodes[h].lookups = lookups
        sim.nodes[h].set_tags({MODEL})
    for p in range(1, cap + 1):
        sim.run_period()
        if holders_know_each_other(sim, holders):
            return p
    return None


def summary(values: list[int | None], cap: int) -> dict[str, Any]:
    found = [v for v in values if v is not None]
    out: dict[str, Any] = {"runs": values, "cap": cap, "not_found": len(values) - len(found)}
    if found:
        out |= {"median": statistics.median(found), "min": min(found), "max": max(found)}
    return out


def join_experiment(n: int, c: int, l: int, seed: int, cap: int, per_period: int | None) -> dict:  # noqa: E741
    sim = Simulator(c=c, l=l, seed=seed)
    seed_node = sim.add_node()
    remaining = n - 1
    first: dict[str, int | None] = {"weak": None, "strong": None, "views_full": None}
    degree_at: dict[int, dict[str, float]] = {}
    last_join = 0
    for p in range(1, cap + 1):
        if remaining:
            batch = remaining if per_period is None else min(per_period, remaining)
            sim.add_nodes(batch, bootstrap=[seed_node])
            remaining -= batch
            last_join = p
        sim.run_period()
        if remaining:
            continue
        since = p - last_join + 1  # periods since the last node joined (inclusive)
        if first["weak"] is None and sim.largest_component_fraction() == 1.0:
            first["weak"] = since
        if first["strong"] is None and sim.largest_component_fraction(strong=True) == 1.0:
            first["strong"] = since
        if first["views_full"] is None and all(len(s.view()) == c for s in sim.nodes.values()):
            first["views_full"] = since
        if since in (1, 5, 10, 20, 30, 50):
            degree_at[since] = degree_row(sim)
        if since >= 50 and all(v is not None for v in first.values()):
            break
    return {"periods_until": first, "in_degree_after": degree_at, "joins_per_period": per_period}


def time_periods(sim: Simulator, periods: int) -> float:
    """Median wall time of one period (robust to other load on the machine)."""
    times = []
    for _ in range(periods):
        start = time.perf_counter()
        sim.run_period()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--c", type=int, default=20)
    ap.add_argument("--l", type=int, default=5)
    ap.add_argument("--periods", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--trials", type=int, default=11, help="3-holder discovery trials")
    ap.add_argument("--big-n", type=int, default=10_000)
    ap.add_argument("--quick", action="store_true", help="fewer trials, no lookup ablation")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    n, c, l = args.n, args.c, args.l  # noqa: E741
    trials = 3 if args.quick else args.trials
    out: dict[str, Any] = {"n": n, "c": c, "l": l, "periods": args.periods, "seed": args.seed}
    t0 = time.perf_counter()

    # 1. steady state from a random graph, and the time per period at N
    sim = Simulator(c=c, l=l, seed=args.seed)
    sim.add_nodes(n)
    sim.fill_random_views()
    out["in_degree_initial_random_graph"] = degree_row(sim)
    out["seconds_per_period_n"] = time_periods(sim, args.periods)
    out["in_degree_after_periods"] = degree_row(sim)
    d0, d1 = out["in_degree_initial_random_graph"], out["in_degree_after_periods"]
    print(
        f"N={n} c={c} l={l}: in-degree after {args.periods} periods "
        f"mean {d1['mean']:.2f} std {d1['std']:.2f} (min {d1['min']}, max {d1['max']}); "
        f"initial random graph std {d0['std']:.2f}"
    )

    stds = [d1["std"]]
    for extra in range(1, 1 if args.quick else 3):
        stds.append(degree_row(warmed(n, c, l, args.periods, args.seed + extra))["std"])
    out["in_degree_std_over_seeds"] = stds
    print(f"  in-degree std over {len(stds)} seed(s): " + ", ".join(f"{x:.2f}" for x in stds))

    # 2. crashes (and the same without the retry that on_failure offers)
    variants = [(None, "")] if args.quick else [(None, ""), (0, "_no_retry")]
    for retries, suffix in variants:
        for fraction in (0.5, 0.8):
            rows = crash_experiment(sim, fraction, [10, 20, 30], retries)
            out[f"crash_{int(fraction * 100)}{suffix}"] = rows
            label = "" if retries is None else " (retries=0: one exchange per period, as in Cyclon)"
            parts = [
                f"+{r['periods_after']}: LCC {r['largest_weak_component']:.3f} "
                f"(strong {r['largest_strong_component']:.3f}), "
                f"dead links {r['dead_links']}/{r['links']}"
                for r in rows
            ]
            print(f"kill {fraction:.0%}{label}: " + "; ".join(parts))

    # 3. a model held by 3 nodes
    cap = 200
    runs = [discovery_trial(sim, t, 3, cap, lookups=True) for t in range(trials)]
    out["three_holders"] = summary(runs, cap)
    s3 = out["three_holders"]
    print(
        f"model held by 3 of {n}: periods until each holder knows the other two: "
        f"median {s3.get('median')} (min {s3.get('min')}, max {s3.get('max')}) over {trials} trials"
    )
    if not args.quick:
        cap_off = 300
        runs_off = [discovery_trial(sim, t, 3, cap_off, lookups=False) for t in range(3)]
        out["three_holders_without_lookups"] = summary(runs_off, cap_off)
        s0 = out["three_holders_without_lookups"]
        print(
            f"  same without holder lookups (passive discovery only): median {s0.get('median')} "
            f"(min {s0.get('min')}, max {s0.get('max')}, not found within {cap_off}: "
            f"{s0['not_found']}) over 3 trials"
        )

    # 4. joining through one seed
    for per_period in (None, 100):
        res = join_experiment(n, c, l, args.seed, 400, per_period)
        key = "join_all_at_once" if per_period is None else f"join_{per_period}_per_period"
        out[key] = res
        u = res["periods_until"]
        std = {k: round(v["std"], 2) for k, v in res["in_degree_after"].items()}
        how = "all at once" if per_period is None else f"{per_period} per period"
        print(
            f"{n} nodes joining via one seed ({how}): after the last join, connected in "
            f"{u['weak']} period(s) (strongly {u['strong']}), all views full in {u['views_full']}; "
            f"in-degree std by periods {std}"
        )

    # 5. message loss
    lossy = warmed(n, c, l, args.periods, args.seed, loss=0.05)
    out["loss_5pct"] = {
        "in_degree": degree_row(lossy),
        "largest_weak_component": lossy.largest_component_fraction(),
        "mean_view_size": sum(len(s.view()) for s in lossy.nodes.values()) / len(lossy.nodes),
    }
    r = out["loss_5pct"]
    print(
        f"5% message loss: in-degree mean {r['in_degree']['mean']:.2f} std "
        f"{r['in_degree']['std']:.2f}, mean view size {r['mean_view_size']:.2f}, "
        f"LCC {r['largest_weak_component']:.3f}"
    )

    # 6. time per period at the big size
    big = Simulator(c=c, l=l, seed=args.seed)
    big.add_nodes(args.big_n)
    big.fill_random_views()
    big.run(1)  # warm-up
    big_periods = 3 if args.quick else 7
    out["seconds_per_period_big_n"] = time_periods(big, big_periods)
    out["big_n"] = args.big_n
    small_now = time_periods(sim, 3 * big_periods)  # side by side, same machine state
    ratio = out["seconds_per_period_big_n"] / small_now
    out["seconds_per_period_n_again"] = small_now
    print(
        f"wall time per period (median): N={n} {out['seconds_per_period_n'] * 1e3:.0f} ms "
        f"(again, next to the big run: {small_now * 1e3:.0f} ms), N={args.big_n} "
        f"{out['seconds_per_period_big_n'] * 1e3:.0f} ms; ratio {ratio:.1f}x for "
        f"{args.big_n / n:.0f}x nodes"
    )
    out["total_seconds"] = time.perf_counter() - t0
    print(f"total {out['total_seconds']:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
