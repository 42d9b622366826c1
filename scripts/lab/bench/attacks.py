"""One lying holder against push-sum gossip, with and without the merge defences.

Simulator only (the same cores the daemon runs): N honest holders of one model
(N(1, 1) initial values) and one liar, the default exchange (push-pull, f32
requests, int8 replies; ``--exchange push``: one-way pushes), ``--rounds`` rounds.  For each attack it prints, over
the honest nodes: the total weight's min and max over time (in units of N),
the consensus error at the end (largest ||x_i - mean_j x_j|| / ||m||) and the
estimate error (largest ||x_i - m|| / ||m||, m the mean of the initial values
of the nodes that were honest at first, moved by the training drift), as
medians over ``--seeds`` (the error and the refusals with their min-max over
the seeds, the run-to-run spread); and how often the defences fired.

    .venv/bin/python scripts/bench/attacks.py            # the README table
    .venv/bin/python scripts/bench/attacks.py --rounds 60 --seeds 5
    .venv/bin/python scripts/bench/attacks.py --exchange push --start 0 --attacks none
"""

from __future__ import annotations

import argparse
import logging
import statistics
from collections.abc import Callable

import numpy as np

from gossip.merge_guard import GuardSettings
from lab.sim.adversaries import (
    Creeper,
    HeavyPusher,
    LateLiar,
    MaskLookalike,
    Poisoner,
    RandomKicker,
    Sink,
    TakingSink,
    WeightInjector,
)
from lab.sim.pushsum import Adversary, ModelSpec, Simulation, node_id

ATTACKS: dict[str, Callable[[], Adversary | None]] = {
    "none": lambda: None,
    "weight 9e5": lambda: HeavyPusher(9e5),
    "zeros weight 1": lambda: HeavyPusher(1.0),
    "own values weight 1": lambda: WeightInjector(1.0),
    "poison 1e5 x gaussian": lambda: Poisoner(1e5),
    "mask look-alike": lambda: MaskLookalike(10.0),
    "sink": lambda: Sink(),
    "taking sink": lambda: TakingSink(0.01),
    "creep inside the radius": lambda: Creeper(per_round=1),
    "fast creep": lambda: Creeper(per_round=20),
    "random kicks inside the radius": lambda: RandomKicker(per_round=1),
}


def run(attack: str, defences: bool, n: int, dim: int, rounds: int, seed: int,
        start: int = 0, spread: float = 1.0, drift: float = 0.0,
        drift_cap: float = 0.0, exchange: str = "push-pull",
        sender_share: float = 0.0) -> dict[str, float]:
    """One run; ``spread``: initial values ``c + spread * N(0, 1)`` around a common
    ``c ~ N(1, 1)`` (1.0: independent starts); ``drift``: each round every honest
    node moves by ``drift * N(0, 1)`` per value, as local training would;
    ``drift_cap``: the guard's creep budget (``GuardSettings.drift_cap``, 0: off);
    ``exchange``: every core's ``exchange`` ("push": one-way pushes);
    ``sender_share``: the guard's bound on one sender's share of merges
    (``GuardSettings.sender_share``, 0: off, as the node's default)."""
    rng = np.random.default_rng(seed)
    common = rng.normal(1.0, 1.0, size=dim)
    initial = common + spread * rng.normal(0.0, 1.0, size=(n + 1, dim))
    inner = ATTACKS[attack]()
    liar = None if inner is None else LateLiar(inner, start)
    # without a liar, node n is left out (it would be an honest holder); a liar
    # that starts late took part honestly before: its initial row is in the target
    holders = n if liar is None else n + 1
    m = initial[:holders if start > 0 else n].mean(axis=0)
    sim = Simulation([ModelSpec("G", tuple(range(holders)), initial[:holders])], seed=seed,
                     adversaries={} if liar is None else {n: liar},
                     guard=GuardSettings(drift_cap=drift_cap, sender_share=sender_share)
                     if defences else None,
                     exchange=exchange)
    if isinstance(inner, Creeper):
        inner.watch({i: sim.cores[(i, "G")] for i in range(n)}, node_id(n))
    lo, hi = float("inf"), 0.0
    steps = np.random.default_rng(seed + 1000)
    for _ in range(rounds):
        if drift:
            for i in sim.honest("G"):
                core = sim.cores[(i, "G")]
                move = drift * steps.standard_normal(dim)
                core.set_values(core.values + move)
                m = m + move / n  # the honest mean moves with the training
        sim.step()
        w = sim.total_weight("G", honest_only=True) / n
        lo, hi = min(lo, w), max(hi, w)
    xs = np.array([sim.cores[(i, "G")].estimate for i in sim.honest("G")])
    norm = float(np.linalg.norm(m))
    counters = [sim.cores[(i, "G")].counters for i in sim.honest("G")]
    return {
        "w_min": lo, "w_max": hi,
        "consensus": float(np.linalg.norm(xs - xs.mean(axis=0), axis=1).max()) / norm,
        "error": float(np.linalg.norm(xs - m, axis=1).max()) / norm,
        "refused": float(sum(c.guard_refused for c in counters)),
        "clipped": float(sum(c.clipped + c.clipped_replies for c in counters)),
        "merged": float(sum(c.pushes_received + c.replies_received for c in counters)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=16, help="honest holders (default 16)")
    ap.add_argument("--dim", type=int, default=100, help="values per model (default 100)")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--spread", type=float, default=1.0,
                    help="initial spread around a common start (1: independent N(1, 1))")
    ap.add_argument("--drift", type=float, default=0.0,
                    help="per-round training drift per value (0: no training)")
    ap.add_argument("--drift-cap", type=float, default=0.0,
                    help="the guard's creep budget in radii (GuardSettings.drift_cap; "
                         "default 0: off, as the node's default; 4 stops the creep)")
    ap.add_argument("--sender-share", type=float, default=0.0,
                    help="the guard's bound on one sender's share of the merges "
                         "(GuardSettings.sender_share; default 0: off, as the node's "
                         "default; 3 stops the one-identity random kicker)")
    ap.add_argument("--exchange", choices=("push-pull", "push"), default="push-pull",
                    help="gossip.exchange of every holder (default push-pull; push: one-way)")
    ap.add_argument("--start", type=int, default=10,
                    help="round the liar starts lying (before: an honest responder)")
    ap.add_argument("--attacks", default=",".join(ATTACKS),
                    help="comma-separated, of: " + ", ".join(ATTACKS))
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)  # one line per refused push otherwise
    print(f"{args.nodes} honest + 1 liar from round {args.start}, {args.rounds} rounds, "
          f"dim {args.dim}, exchange {args.exchange}, spread {args.spread:g}, "
          f"drift {args.drift:g}, "
          f"creep budget {args.drift_cap:g} radii, sender share {args.sender_share:g}, "
          f"medians of {args.seeds} seeds; errors relative to ||honest mean||")
    print("| attack | defences | honest weight / N, min-max | consensus error | "
          "error vs honest mean | refused | clipped / merged (honest) |")
    print("|---|---|---|---|---|---|---|")
    for attack in args.attacks.split(","):
        for defences in (False, True):
            runs = [run(attack, defences, args.nodes, args.dim, args.rounds, s, args.start,
                        args.spread, args.drift, args.drift_cap, args.exchange,
                        args.sender_share)
                    for s in range(args.seeds)]

            def med(key: str, runs: list[dict[str, float]] = runs) -> float:
                return statistics.median(r[key] for r in runs)

            def span(key: str, fmt: str, runs: list[dict[str, float]] = runs) -> str:
                # the median and, over several seeds, the run-to-run spread (min-max)
                values = [r[key] for r in runs]
                text = format(statistics.median(values), fmt)
                if len(values) > 1:
                    text += f" ({min(values):{fmt}}-{max(values):{fmt}})"
                return text

            print(f"| {attack} | {'on' if defences else 'off'} | "
                  f"{med('w_min'):.3g}-{med('w_max'):.3g} | {med('consensus'):.2g} | "
                  f"{span('error', '.2g')} | {span('refused', '.0f')} | "
                  f"{med('clipped'):.0f} / {med('merged'):.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
