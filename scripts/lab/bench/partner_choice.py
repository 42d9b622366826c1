"""The honest cost of choosing push targets by reciprocity (gossip.partner_choice).

Runs the same in-memory swarm (real nodes over :class:`p2p.testing.MemoryNetwork`:
framing, handshake, codec, training and gossip as in the daemon, no sockets)
with ``gossip.partner_choice = "uniform"`` and ``"reciprocity"``, no attacker,
for each seed, and prints per setting the medians over seeds of: the mean final
accuracy, the pushes sent and acknowledged per node and round, and the share
of pushes that went to a peer the node had not exchanged with before.

    .venv/bin/python scripts/bench/partner_choice.py                 # 3 seeds, 8 nodes
    .venv/bin/python scripts/bench/partner_choice.py --seeds 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from p2p.runtime.protocol import register_node_messages
from p2p.swarm import SwarmSpec
from p2p.testing import MemoryNetwork, memory_swarm, running, wait_until

CHOICES = ("uniform", "reciprocity")


async def one_run(choice: str, seed: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    template = root / f"{choice}-{seed}.toml"
    template.write_text(f'[gossip]\npartner_choice = "{choice}"\n')
    spec = SwarmSpec(nodes=args.nodes, rounds=args.rounds, scheme=args.scheme,
                     round_interval=0.0, shuffle_period=0.05, eval_every=args.rounds,
                     steps_per_round=args.steps, seed=seed, template=str(template))
    nodes = memory_swarm(root / f"{choice}-{seed}", MemoryNetwork(seed=seed), spec)
    started = time.monotonic()
    async with running(nodes):
        await wait_until(lambda: all(n.progress.finished for n in nodes), timeout=args.timeout,
                         interval=0.1, what="every node finished its rounds")
        elapsed = time.monotonic() - started
        accuracy = [n.progress.accuracy or 0.0 for n in nodes]
        sent = sum(c.counters.pushes_sent for n in nodes for c in n.cores.values())
        acks = sum(c.counters.acks for n in nodes for c in n.cores.values())
        unproven = proven = 0
        for n in nodes:
            p = n.gossip.partners
            if p is not None:
                unproven += p.counters["unproven_picks"]
                proven += p.counters["proven_picks"]
    per = args.nodes * args.rounds
    return {"choice": choice, "seed": seed, "mean_accuracy": statistics.fmean(accuracy),
            "pushes_per_node_round": sent / per, "acks_per_node_round": acks / per,
            "unproven_pick_share": unproven / (unproven + proven) if proven + unproven else None,
            "seconds": elapsed}


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    register_node_messages()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-partners-") as tmp:
        for seed in range(1, args.seeds + 1):
            for choice in CHOICES:
                row = await one_run(choice, seed, args, Path(tmp))
                print(f"seed {seed} {choice:11s} accuracy {row['mean_accuracy']:.3f} "
                      f"pushes/node/round {row['pushes_per_node_round']:.2f} "
                      f"acks {row['acks_per_node_round']:.2f} ({row['seconds']:.0f} s)",
                      flush=True)
                rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--steps", type=int, default=10, help="SGD steps per round")
    p.add_argument("--scheme", choices=["partial", "full"], default="partial")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--json", type=Path, metavar="PATH")
    args = p.parse_args(argv)
    rows = trio.run(run, args)
    summary = {}
    for choice in CHOICES:
        mine = [r for r in rows if r["choice"] == choice]
        summary[choice] = {k: statistics.median(r[k] for r in mine)
                           for k in ("mean_accuracy", "pushes_per_node_round",
                                     "acks_per_node_round")}
        accs = [r["mean_accuracy"] for r in mine]
        print(f"{choice:11s}: accuracy median {summary[choice]['mean_accuracy']:.3f} "
              f"[{min(accs):.3f}-{max(accs):.3f}], pushes/node/round "
              f"{summary[choice]['pushes_per_node_round']:.2f}, acks/node/round "
              f"{summary[choice]['acks_per_node_round']:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"runs": rows, "medians": summary}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
