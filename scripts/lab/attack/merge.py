"""One lying member against real daemons' merges, with and without ``gossip.merge_guard``.

Each run starts ``--honest`` honest daemons plus one member (``p2p.swarm.Swarm``,
a shared swarm key, scheme "full": one shared model).  The member is a real
daemon (its own identity, the swarm key, peer sampling, training) whose
push-sum core is patched in its own process to lie once the run says so
(``--warmup`` seconds after every honest node was first evaluated), with the
simulator's attackers (:mod:`lab.sim.adversaries`):

- ``poison``: push-pull requests of 1e5 x N(0, 1) values (inside the 1e6
  bound) to every holder each wave (:class:`~lab.sim.adversaries.Poisoner`);
- ``zeros``: one-way pushes of zeros with the largest weight the receiver
  accepts: 9e5 without the guard (under ``max_weight`` 1e6), 2.9 with it (under
  its share bound 4 and net balance cap 3) (:class:`~lab.sim.adversaries.HeavyPusher`);
- ``mask``: 10 x N(0, 1) values flagged ``masked``/``noisy``
  (:class:`~lab.sim.adversaries.MaskLookalike`);
- ``sink``: never pushes, answers every push with a plain ack
  (:class:`~lab.sim.adversaries.Sink`); ``taking-sink``: a token reply of 1 % of
  the share (:class:`~lab.sim.adversaries.TakingSink`).

Except for the sinks the member answers pushes honestly, so each row shows one
attack.  The run goes on ``--after`` seconds after the attack starts (60 for
the sinks).  Printed per (attack, guard): the honest nodes' accuracies at the
end next to the no-attack run's (same guard, same invocation), the honest
total weight's min and max over the attack window in units of N (target
[0.5, 2]), and the honest nodes' guard refusals, clipped merges and
unreciprocated requests.  The ``none`` rows are also the guard's honest cost.

    .venv/bin/python scripts/attack/merge.py                 # ~20-25 min on 2 shared cores
    .venv/bin/python scripts/attack/merge.py --attacks none,sink --guard on
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ATTACKS = ("none", "poison", "zeros", "mask", "sink", "taking-sink")
DEFAULT_ATTACKS = ("none", "poison", "zeros", "mask", "sink")
SINKS = ("sink", "taking-sink")
_REFUSAL = re.compile(r"rejected push from \S+ for model \S+: (weight_share|weight_balance|clip_debt|"
                      r"flag_mode|flag_budget|clip):")


# ------------------------------------------------------------------ the member


def _liar(attack: str, weight: float) -> Any:
    from lab.sim.adversaries import HeavyPusher, MaskLookalike, Poisoner, Sink, TakingSink

    return {"poison": lambda: Poisoner(1e5), "zeros": lambda: HeavyPusher(weight),
            "mask": lambda: MaskLookalike(10.0), "sink": Sink,
            "taking-sink": lambda: TakingSink(0.01)}[attack]()


def install_liar(attack: str, weight: float, flag: Path) -> None:
    """Patch :class:`gossip.pushsum.PushSum` in this process: honest until ``flag`` exists."""
    import numpy as np

    from gossip.pushsum import PushSum

    liar = _liar(attack, weight)
    honest_make, honest_push, honest_ack = PushSum.make_pushes, PushSum.on_push, PushSum.on_ack
    rng = np.random.default_rng()
    rounds = [0]

    def make_pushes(self: PushSum, peers: Sequence[bytes], now: float) -> Any:
        if not flag.exists():
            return honest_make(self, peers, now)
        rounds[0] += 1
        return liar.pushes(rounds[0], self, list(peers), rng)

    def on_push(self: PushSum, sender: bytes, push: Any, now: float) -> Any:
        if attack in SINKS and flag.exists():
            return liar.answer(self, sender, push)
        return honest_push(self, sender, push, now)

    def on_ack(self: PushSum, sender: bytes, ack: Any, now: float) -> None:
        if ack.push_id not in self._outstanding:  # the ack of a lie: nothing to do
            return None
        return honest_ack(self, sender, ack, now)

    PushSum.make_pushes = make_pushes  # type: ignore[method-assign]
    PushSum.on_push = on_push  # type: ignore[method-assign]
    PushSum.on_ack = on_ack  # type: ignore[method-assign]
    # offered every holder it knows, it lies to all of them each wave
    PushSum.holders_wanted = property(lambda self: 16)  # type: ignore[assignment, method-assign]


# ------------------------------------------------------------------ the runs


def _swarm_class() -> Any:
    from p2p.swarm import Daemon, Swarm

    class AttackSwarm(Swarm):
        """A swarm whose last daemon runs this script's member (``attack`` "none": honest)."""

        attack = "none"
        weight = 0.0
        flag = Path("/nonexistent")

        def _spawn(self, d: Daemon, bootstrap: Sequence[str]) -> None:
            if d.index != self.spec.nodes - 1 or self.attack == "none":
                super()._spawn(d, bootstrap)
                return
            import subprocess

            cmd = [sys.executable, "-m", "lab.attack.merge", "--member", self.attack,
                   "--weight", repr(self.weight), "--flag", str(self.flag),
                   "run", "--config", str(d.config_path), "--data-dir", str(d.data_dir),
                   "--listen", "127.0.0.1:0"]
            if bootstrap:
                cmd += ["--bootstrap", ",".join(bootstrap)]
            env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
            with open(d.log_path, "ab") as log:
                d.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                             env=env, start_new_session=True)

    return AttackSwarm


def _honest_weight(swarm: Any, honest: int) -> float | None:
    """The honest nodes' total weight, summed per shared model, the smallest model's."""
    totals: dict[str, float] = {}
    for d in swarm.daemons[:honest]:
        for m in d.models.get("models", []):
            if m.get("kind") != "local" and m.get("weight") is not None:
                totals[m["name"]] = totals.get(m["name"], 0.0) + float(m["weight"])
    return min(totals.values()) if totals else None


def run(attack: str, guard: bool, args: argparse.Namespace, workdir: Path,
        index: int = 0) -> dict[str, Any]:
    """One swarm run (``index``: which of ``--runs``, seed ``--seed + index``); its figures."""
    from p2p.swarm import SwarmSpec

    template = workdir / f"template-{'on' if guard else 'off'}.toml"
    extra = "".join(f"{item}\n" for item in args.set)
    template.write_text(f"[gossip]\nmerge_guard = {'true' if guard else 'false'}\n{extra}")
    spec = SwarmSpec(nodes=args.honest + 1, rounds=10**6, scheme="full", swarm_key=True,
                     seed=args.seed + index, eval_every=5, template=str(template))
    cls = _swarm_class()
    flag = workdir / f"attack-{attack}-{guard}-{index}"
    home = workdir / f"{attack}-{'on' if guard else 'off'}-{index}"
    home.mkdir(mode=0o700)
    swarm = cls(spec, workdir=home, startup_timeout=300.0)  # torch imports on shared cores
    swarm.attack, swarm.flag = attack, flag
    swarm.weight = 2.9 if guard else 9e5
    after = max(args.after, 60.0) if attack in SINKS else args.after
    honest = args.honest
    with swarm:
        swarm.start()
        deadline = time.monotonic() + 180.0
        while True:  # every honest node trained and was evaluated once
            swarm.poll()
            if all(d.status.get("accuracy") is not None for d in swarm.daemons[:honest]):
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"{attack}/{guard}: the swarm did not start training")
            time.sleep(1.0)
        time.sleep(args.warmup)
        swarm.poll()
        before = [d.status.get("accuracy") for d in swarm.daemons[:honest]]
        flag.touch()
        started = time.monotonic()
        weights: list[float] = []
        trace: list[tuple[float, float]] = []  # (seconds into the attack, weight / N)
        while time.monotonic() - started < after:
            time.sleep(1.0)
            swarm.poll()
            w = _honest_weight(swarm, honest)
            if w is not None:
                weights.append(w / honest)
                trace.append((round(time.monotonic() - started, 1), w / honest))
        counters = {c: sum(swarm._counter_sum(d, c) for d in swarm.daemons[:honest])
                    for c in ("guard_refused", "guard_held", "clipped", "clipped_replies", "unreciprocated",
                              "pushes_received", "replies_received")}
        accuracy = [d.status.get("accuracy") for d in swarm.daemons[:honest]]
    rules: set[str] = set()  # which guard rules refused (log lines are rate-limited: names only)
    for d in swarm.daemons[:honest]:
        for line in d.log_path.read_text(errors="replace").splitlines():
            match = _REFUSAL.search(line)
            if match:
                rules.add(match.group(1))
    return {"attack": attack, "guard": guard, "run": index, "seed": args.seed + index,
            "after_s": after, "accuracy_before": before, "weight_trace": trace,
            "refusal_rules": sorted(rules),
            "accuracy": accuracy, "w_min": min(weights, default=float("nan")),
            "w_max": max(weights, default=float("nan")), **counters}


def _fmt(accs: Sequence[float | None]) -> str:
    return "/".join("-" if a is None else f"{a:.3f}" for a in accs)


def _spread(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def summarise(rows: Sequence[dict[str, Any]], guards: Sequence[bool],
              attacks: Sequence[str]) -> list[dict[str, Any]]:
    """Per (attack, guard): medians over the runs, read against the no-attack runs."""
    out = []
    for guard in guards:
        base_runs = [r for r in rows if r["guard"] == guard and r["attack"] == "none"]
        base_all = [a for r in base_runs for a in r["accuracy"] if a is not None]
        for attack in attacks:
            runs = [r for r in rows if r["guard"] == guard and r["attack"] == attack]
            worst = [min(a for a in r["accuracy"] if a is not None) for r in runs
                     if any(a is not None for a in r["accuracy"])]
            drop = (f"{100 * (statistics.median(base_all) - statistics.median(worst)):.1f}"
                    if worst and base_all else "-")
            out.append({
                "attack": attack, "guard": "on" if guard else "off", "runs": len(runs),
                "worst": _spread(worst), "drop": drop, "baseline": _spread(base_all),
                "weight": (f"{min(r['w_min'] for r in runs):.3g}-"
                           f"{max(r['w_max'] for r in runs):.3g}" if runs else "-"),
                "refused": (statistics.median(r["guard_refused"] for r in runs)
                            if runs else "-"),
                "worst_values": worst})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--member", choices=ATTACKS[1:], help=argparse.SUPPRESS)
    ap.add_argument("--weight", type=float, default=1.0, help=argparse.SUPPRESS)
    ap.add_argument("--flag", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--honest", type=int, default=3, help="honest daemons (default 3)")
    ap.add_argument("--attacks", default=",".join(DEFAULT_ATTACKS),
                    help="comma-separated, of: " + ", ".join(ATTACKS))
    ap.add_argument("--guard", choices=["off", "on", "both"], default="both")
    ap.add_argument("--warmup", type=float, default=10.0,
                    help="seconds of honest training after the first evaluation (default 10)")
    ap.add_argument("--after", type=float, default=40.0,
                    help="seconds the attack lasts before the accuracies are read (default 40; "
                         "the sinks at least 60)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="another [gossip] setting for every daemon (TOML, repeatable), "
                         "e.g. clip_factor=4.0")
    ap.add_argument("--seed", type=int, default=0, help="first run's seed (default 0)")
    ap.add_argument("--runs", type=int, default=1,
                    help="runs per attack, seeds --seed.. (default 1); with several, "
                         "read the medians printed at the end")
    ap.add_argument("--json", type=Path, help="also write every figure here")
    args, rest = ap.parse_known_args(argv)
    if args.member is not None:  # the lying member's process
        install_liar(args.member, args.weight, args.flag)
        from p2p.cli.main import main as p2p_main

        return p2p_main(rest)
    from p2p.swarm import SwarmError

    attacks = args.attacks.split(",")
    unknown = [a for a in attacks if a not in ATTACKS]
    if unknown:
        ap.error(f"--attacks: unknown {unknown}; expected some of {', '.join(ATTACKS)}")
    guards = {"off": [False], "on": [True], "both": [False, True]}[args.guard]
    if "none" not in attacks:
        attacks = ["none", *attacks]  # the baseline each row is read against
    rows: list[dict[str, Any]] = []
    print(f"{args.honest} honest daemons + 1 member, attack from {args.warmup:g} s after the "
          f"first evaluation, accuracies {args.after:g} s later (sinks >= 60 s); "
          f"{args.runs} run(s) each, seeds {args.seed}-{args.seed + args.runs - 1}")
    print("| attack | guard | run | honest accuracy at the end | "
          "honest weight / N, min-max | refused | clipped | unreciprocated |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="attack-merge-") as tmp:
        for guard in guards:
            # runs interleaved: the no-attack spread is measured alongside the attacks
            for index in range(args.runs):
                for attack in attacks:
                    try:
                        r = run(attack, guard, args, Path(tmp), index)
                    except (SwarmError, SystemExit) as exc:
                        print(f"| {attack} | {'on' if guard else 'off'} | {index} | "
                              f"failed: {exc} |", flush=True)
                        continue
                    rows.append(r)
                    print(f"| {attack} | {'on' if guard else 'off'} | {index} | "
                          f"{_fmt(r['accuracy'])} | {r['w_min']:.3g}-{r['w_max']:.3g} | "
                          f"{r['guard_refused']} {','.join(r['refusal_rules'])} | "
                          f"{r['clipped'] + r['clipped_replies']} | "
                          f"{r['unreciprocated']} |", flush=True)
    summary = summarise(rows, guards, attacks)
    print()
    print("Over the runs: the worst honest node's accuracy per run, median [min-max]; the "
          "no-attack accuracy over every honest node of its runs, median [min-max]")
    print("| attack | guard | runs | worst honest accuracy | drop vs no-attack median "
          "(points) | no-attack accuracy | weight / N, min-max over runs | refused (median) |")
    print("|---|---|---|---|---|---|---|---|")
    for row in summary:
        print(f"| {row['attack']} | {row['guard']} | {row['runs']} | {row['worst']} | "
              f"{row['drop']} | {row['baseline']} | {row['weight']} | {row['refused']} |")
    if args.json:
        args.json.write_text(json.dumps({"runs": rows, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
