"""Lying holders against push-sum gossip, with and without the merge defences.

Simulator only (the same cores the daemon runs): N honest holders of one model
(N(1, 1) initial values) and ``--liars`` lying identities of one attacker, the
default exchange (push-pull, f32 requests, int8 replies; ``--exchange push``:
one-way pushes), ``--rounds`` rounds.  For each attack it prints, over the
honest nodes: the total weight's min and max over time (in units of N), the
consensus error at the end (largest ||x_i - mean_j x_j|| / ||m||) and the
estimate error (largest ||x_i - m|| / ||m||, m the mean of the initial values
of the nodes that were honest at first, moved by the training drift), as
medians over ``--seeds`` (the error and the refusals with their min-max over
the seeds, the run-to-run spread); and how often the defences fired.  The
defences are the node's defaults unless ``--drift-cap`` or ``--sender-share``
say otherwise ("hardened": ``--sender-share 3``, with the default ``drift_cap`` 1).

    .venv/bin/python scripts/bench/attacks.py            # the results table
    .venv/bin/python scripts/bench/attacks.py --rounds 60 --seeds 5
    .venv/bin/python scripts/bench/attacks.py --attacks none,"reply poison 30" \
        --liars 20 --drift 0.01 --spread 0.1            # issue 31: 20 identities, training
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gossip.merge_guard import GuardSettings
from lab.sim.adversaries import (
    Creeper,
    Direction,
    HeavyPusher,
    LateLiar,
    MaskLookalike,
    Poisoner,
    RandomKicker,
    ReplyPoisoner,
    Sink,
    TakingSink,
    WeightInjector,
)
from lab.sim.pushsum import Adversary, ModelSpec, Simulation, node_id

#: Rotating directions turn this many radians a round (a full turn in ~125 rounds).
TURN = 0.05


def _replies(norm: float, turn: float = 0.0, honest_for: int = 0
             ) -> Callable[[int, int], Adversary]:
    def make(dim: int, seed: int) -> Adversary:
        # one direction per attacker, shared by its identities (made once per run)
        return ReplyPoisoner(_direction(dim, seed, turn), norm, honest_for)
    return make


_DIRECTIONS: dict[tuple[int, int, float], Direction] = {}


def _direction(dim: int, seed: int, turn: float) -> Direction:
    key = (dim, seed, turn)
    if key not in _DIRECTIONS:
        _DIRECTIONS[key] = Direction(dim, 10_000 + seed, turn)
    return _DIRECTIONS[key]


def _plain(factory: Callable[[], Adversary]) -> Callable[[int, int], Adversary]:
    return lambda dim, seed: factory()


ATTACKS: dict[str, Callable[[int, int], Adversary | None]] = {
    "none": lambda dim, seed: None,
    "weight 9e5": _plain(lambda: HeavyPusher(9e5)),
    "zeros weight 1": _plain(lambda: HeavyPusher(1.0)),
    "own values weight 1": _plain(lambda: WeightInjector(1.0)),
    "poison 1e5 x gaussian": _plain(lambda: Poisoner(1e5)),
    "mask look-alike": _plain(lambda: MaskLookalike(10.0)),
    "sink": _plain(lambda: Sink()),
    "taking sink": _plain(lambda: TakingSink(0.01)),
    "creep inside the radius": _plain(lambda: Creeper(per_round=1)),
    "fast creep": _plain(lambda: Creeper(per_round=20)),
    "random kicks inside the radius": _plain(lambda: RandomKicker(per_round=1)),
    "reply poison 3": _replies(3.0),
    "reply poison 30": _replies(30.0),
    "reply poison 300": _replies(300.0),
    "reply poison 30 rotating": _replies(30.0, TURN),
    "reply poison 30 after 100 honest": _replies(30.0, 0.0, 100),
    "echo replies": _replies(0.0),
}


def run(attack: str, defences: bool, n: int, dim: int, rounds: int, seed: int,
        start: int = 0, spread: float = 1.0, drift: float = 0.0,
        drift_cap: float | None = None, exchange: str = "push-pull",
        sender_share: float = 0.0, liars: int = 1) -> dict[str, float]:
    """One run; ``spread``: initial values ``c + spread * N(0, 1)`` around a common
    ``c ~ N(1, 1)`` (1.0: independent starts); ``drift``: each round every honest
    node moves by ``drift * N(0, 1)`` per value, as local training would;
    ``drift_cap``: the guard's creep budget (``GuardSettings.drift_cap``; None: the
    default, 0: off); ``exchange``: every core's ``exchange`` ("push": one-way
    pushes); ``sender_share``: the guard's bound on one sender's share of merges
    (``GuardSettings.sender_share``, 0: off, as the node's default); ``liars``:
    identities of the attacker (each a holder of its own)."""
    rng = np.random.default_rng(seed)
    common = rng.normal(1.0, 1.0, size=dim)
    initial = common + spread * rng.normal(0.0, 1.0, size=(n + liars, dim))
    made = [ATTACKS[attack](dim, seed) for _ in range(liars)]
    inner = made[0]
    lying = {} if inner is None else {n + k: LateLiar(made[k], start)  # type: ignore[arg-type]
                                      for k in range(liars)}
    # without a liar, nodes n.. are left out (they would be honest holders); liars that
    # start late took part honestly before: their initial rows are in the target
    holders = n if inner is None else n + liars
    m = initial[:holders if start > 0 else n].mean(axis=0)
    guard = GuardSettings(sender_share=sender_share) if drift_cap is None else \
        GuardSettings(drift_cap=drift_cap, sender_share=sender_share)
    sim = Simulation([ModelSpec("G", tuple(range(holders)), initial[:holders])], seed=seed,
                     adversaries=lying, guard=guard if defences else None, exchange=exchange)
    for k, liar in enumerate(made):
        if isinstance(liar, Creeper):
            liar.watch({i: sim.cores[(i, "G")] for i in range(n)}, node_id(n + k))
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


#: --learning: the reply attacks in the product simulator (name -> norm, turn, honest_for)
LEARNING_ATTACKS: dict[str, tuple[float, float, int] | None] = {
    "none": None,
    "reply poison 3": (3.0, 0.0, 0), "reply poison 30": (30.0, 0.0, 0),
    "reply poison 300": (300.0, 0.0, 0), "reply poison 30 rotating": (30.0, 0.5, 0),
    "reply poison 30 after 100 honest": (30.0, 0.0, 100), "echo replies": (0.0, 0.0, 0),
}


def learning_main(args: argparse.Namespace) -> int:
    """``--learning``: real learners in the product simulator, a share of liars."""
    from lab.sim.learning import run as run_learning

    gossip: dict[str, object] = {}
    if args.drift_cap is not None:
        gossip["drift_cap"] = args.drift_cap
    if args.sender_share:
        gossip["sender_share"] = args.sender_share
    for item in args.set:  # e.g. recovery=false drift_cap=0: the defences before issue 31
        key, _, value = item.partition("=")
        gossip[key] = json.loads(value)
    flags = ["--nodes", str(args.nodes), "--rounds", str(args.rounds), *args.sim_flags.split()]
    print(f"{args.nodes} simulated learners, {args.liar_share:.0%} of them liars from mean "
          f"honest round {args.start} to {args.stop}, {args.rounds} rounds, gossip changes "
          f"{gossip or 'none'}, medians over {args.seeds} seeds of the median honest node "
          "(min-max over seeds); accuracies at the attack's start, its end and the run's end")
    print("| attack | at start | at its end | at the end | worst node at the end | "
          "roll-backs | refused | clipped replies |")
    print("|---|---|---|---|---|---|---|---|")
    for attack in args.attacks.split(","):
        spec = LEARNING_ATTACKS[attack]
        runs = []
        for seed in range(args.seed, args.seed + args.seeds):
            one = run_learning([*flags, "--seed", str(seed)],
                               liars=args.liar_share if spec is not None else 0.0,
                               norm=spec[0] if spec else 0.0, turn=spec[1] if spec else 0.0,
                               honest_for=spec[2] if spec else 0, start=args.start,
                               stop=args.stop, gossip=gossip)
            runs.append(one)
            print(f"  {attack}, seed {seed}: median honest accuracy at start / its end / "
                  f"the end {_median_pct(one['accuracy_at_start'])} / "
                  f"{_median_pct(one['accuracy_at_stop'])} / "
                  f"{_median_pct(one['accuracy_end'])}; counters {one['counters']}, "
                  f"roll-backs {one['rollbacks']}, {one['wall_seconds']:.0f} s", flush=True)
            if args.json:  # one line per run: a long grid keeps what it measured
                with args.json.open("a") as out:
                    out.write(json.dumps({"attack": attack, "runs": [one]}) + "\n")

        def med(key: str, runs: list[dict[str, Any]] = runs) -> str:
            values = [statistics.median(r[key]) for r in runs if r[key]]
            if not values:
                return "-"
            return (f"{100 * statistics.median(values):.1f} "
                    f"({100 * min(values):.1f}-{100 * max(values):.1f})")

        worst = [min(r["accuracy_end"]) for r in runs if r["accuracy_end"]]
        print(f"| {attack} | {med('accuracy_at_start')} | {med('accuracy_at_stop')} | "
              f"{med('accuracy_end')} | {100 * statistics.median(worst):.1f} | "
              f"{statistics.median(r['rollbacks'] for r in runs):g} | "
              f"{statistics.median(r['counters']['guard_refused'] for r in runs):g} | "
              f"{statistics.median(r['counters']['clipped_replies'] for r in runs):g} |",
              flush=True)
    return 0


#: what --compare reads of each evaluation (node_differences' keys) and calls it
_READINGS = (("median", "median node"), ("worst", "worst node"),
             ("drop", "largest drop of one node"))


def node_differences(run: dict[str, Any], base: dict[str, Any]) -> list[dict[str, float]]:
    """Each honest node of ``run`` against itself in ``base`` (another run of the same
    seed), per evaluation, in points: the median nodes' difference, the worst nodes'
    (min against min) and the largest single node's drop (min over nodes of its own
    difference: "every honest node within 2 points" reads this one)."""
    mine = {p["index"]: p["accuracy"] for p in base["per_node"]}
    out = []
    for k in range(max((len(p["accuracy"]) for p in run["per_node"]), default=0)):
        pairs = [(p["accuracy"][k], mine[p["index"]][k]) for p in run["per_node"]
                 if len(p["accuracy"]) > k and len(mine.get(p["index"], [])) > k]
        if not pairs:
            break
        out.append({"median": 100 * (statistics.median(a for a, _ in pairs)
                                     - statistics.median(b for _, b in pairs)),
                    "worst": 100 * (min(a for a, _ in pairs) - min(b for _, b in pairs)),
                    "drop": 100 * min(a - b for a, b in pairs)})
    return out


def compare_main(path: Path, null: Path | None = None,
                 null_label: str = "none again (noise floor)") -> int:
    """``--compare``: every honest node against itself in the no-attack run of the same
    seed, at the same evaluation (``--json`` lines with per-node records), in points;
    ``null``: other no-attack runs of the same seeds (a second run: the noise floor, what
    two runs without an attack differ by; or other settings), called ``null_label``."""
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        for one in record["runs"]:
            runs[(record["attack"], one["seed"])] = one
    if null is not None:
        for line in null.read_text().splitlines():
            for one in json.loads(line)["runs"]:
                runs[(null_label, one["seed"])] = one
    print("| attack | seed | median honest node, attack - none, per evaluation | "
          "worst honest node | largest drop of one node | roll-backs (none / attack) |")
    print("|---|---|---|---|---|---|")
    every: dict[str, list[list[dict[str, float]]]] = {}  # attack -> each seed's diffs
    for (attack, seed), one in sorted(runs.items()):
        base = runs.get(("none", seed))
        if attack == "none" or base is None or "per_node" not in one:
            continue
        diffs = node_differences(one, base)
        if not diffs:
            continue
        every.setdefault(attack, []).append(diffs)
        cells = [" / ".join(f"{d[key]:+.1f}" for d in diffs) for key, _ in _READINGS]
        print(f"| {attack} | {seed} | {' | '.join(cells)} | {base['rollbacks']} / "
              f"{one['rollbacks']} |")
    for attack, seeds in every.items():
        last = [d[-1] for d in seeds]
        print(f"{attack}: at the last evaluation, median of {len(last)} seeds: " + ", ".join(
            f"{name} {_points([d[key] for d in last])}" for key, name in _READINGS))
        for key, name in _READINGS:
            cells = [_points([d[k][key] for d in seeds]) for k in range(min(map(len, seeds)))]
            print(f"{attack}: {name}, per evaluation, median of the seeds (min to max): "
                  + " / ".join(cells))
    return 0


def _points(values: list[float]) -> str:
    """``median (min to max)`` of differences in points."""
    return f"{statistics.median(values):+.1f} ({min(values):+.1f} to {max(values):+.1f})"


def _median_pct(values: list[float]) -> str:
    return "-" if not values else f"{100 * statistics.median(values):.1f}"


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
    ap.add_argument("--drift-cap", type=float, default=None,
                    help="the guard's creep budget, times own training (GuardSettings."
                         f"drift_cap; default: the node's, {GuardSettings().drift_cap:g}; 0: off)")
    ap.add_argument("--sender-share", type=float, default=0.0,
                    help="the guard's bound on one sender's share of the merges "
                         "(GuardSettings.sender_share; default 0: off, as the node's "
                         "default; 3 stops the one-identity random kicker)")
    ap.add_argument("--exchange", choices=("push-pull", "push"), default="push-pull",
                    help="gossip.exchange of every holder (default push-pull; push: one-way)")
    ap.add_argument("--liars", type=int, default=1,
                    help="identities of the attacker, each a holder (default 1)")
    ap.add_argument("--start", type=int, default=10,
                    help="round the liar starts lying (before: an honest responder)")
    ap.add_argument("--attacks", default=None,
                    help="comma-separated, of: " + ", ".join(ATTACKS) + " (default all); "
                         "with --learning: " + ", ".join(LEARNING_ATTACKS))
    ap.add_argument("--learning", action="store_true",
                    help="real learners in the product simulator (p2p.simulation): "
                         "--nodes of them, --liar-share lying, --rounds rounds")
    ap.add_argument("--liar-share", type=float, default=0.1,
                    help="with --learning: the share of the nodes that lie (default 0.1)")
    ap.add_argument("--stop", type=int, default=None,
                    help="with --learning: the mean honest round the liars stop at "
                         "(default: they never stop)")
    ap.add_argument("--seed", type=int, default=0, help="with --learning: the first seed")
    ap.add_argument("--sim-flags", default="",
                    help="with --learning: more flags of scripts/simulate.py")
    ap.add_argument("--json", type=Path, help="with --learning: append every run here")
    ap.add_argument("--compare", type=Path, metavar="JSONL",
                    help="print each honest node against itself in the no-attack run of "
                         "the same seed, per evaluation, from --json lines (runs nothing)")
    ap.add_argument("--null", type=Path, metavar="JSONL",
                    help="with --compare: second no-attack runs of the same seeds, compared "
                         "with the first the same way (the noise floor)")
    ap.add_argument("--null-label", default="none again (noise floor)",
                    help="with --null: what its runs are called (e.g. the defences before)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="with --learning: a [gossip] setting of every node, e.g. "
                         "recovery=false (repeatable)")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)  # one line per refused push otherwise
    if args.compare:
        return compare_main(args.compare, args.null, args.null_label)
    if args.learning:
        args.attacks = args.attacks or ",".join(LEARNING_ATTACKS)
        return learning_main(args)
    args.attacks = args.attacks or ",".join(ATTACKS)
    cap = GuardSettings().drift_cap if args.drift_cap is None else args.drift_cap
    print(f"{args.nodes} honest + {args.liars} lying identities from round {args.start}, "
          f"{args.rounds} rounds, dim {args.dim}, exchange {args.exchange}, spread "
          f"{args.spread:g}, drift {args.drift:g}, creep budget {cap:g} x own training, "
          f"sender share {args.sender_share:g}, medians of {args.seeds} seeds; errors "
          "relative to ||honest mean||")
    print("| attack | defences | honest weight / N, min-max | consensus error | "
          "error vs honest mean | refused | clipped / merged (honest) |")
    print("|---|---|---|---|---|---|---|")
    for attack in args.attacks.split(","):
        for defences in (False, True):
            runs = [run(attack, defences, args.nodes, args.dim, args.rounds, s, args.start,
                        args.spread, args.drift, args.drift_cap, args.exchange,
                        args.sender_share, args.liars)
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
