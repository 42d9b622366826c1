"""How often the merge guard bites honest nodes: an in-memory swarm of real nodes, no attacker.

Runs ``--nodes`` nodes (``p2p.testing.memory_swarm``: the daemon's code over
an in-memory network, optional message loss and delay) for ``--rounds``
rounds with the config's defaults (``gossip.merge_guard`` on), then prints,
summed over the nodes: pushes merged, guard refusals (by rule), candidates held
back by the net balance, clipped merges and clipped replies, and the largest
net balance any node held with any peer at the end (the cap is
``gossip.balance_cap``).  One line per seed.

    .venv/bin/python scripts/bench/guard_honest.py --nodes 4 --rounds 60 --seeds 3
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import trio

from p2p.swarm import SwarmSpec
from p2p.testing import MemoryNetwork, memory_swarm, wait_until

_RULE = re.compile(r"rejected push from \S+ for model \S+: (\w+):")


class _Rules(logging.Handler):
    """Counts the guard rules named in the core's rejection lines."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.rules: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        match = _RULE.search(record.getMessage())
        if match:
            self.rules[match.group(1)] += 1


async def one_run(root: Path, nodes: int, rounds: int, seed: int, loss: float,
                  delay: float) -> dict[str, Any]:
    """One swarm run; returns the summed counters and the largest balance."""
    spec = SwarmSpec(nodes=nodes, rounds=rounds, scheme="full", round_interval=0.02,
                     shuffle_period=0.1, eval_every=rounds, steps_per_round=5, seed=seed)
    net = MemoryNetwork(seed=seed, message_loss=loss, max_delay=delay)
    swarm = memory_swarm(root, net, spec, push_timeout=2.0)
    async with trio.open_nursery() as nursery:
        for node in swarm:
            await nursery.start(node.run)
        await wait_until(lambda: all(n.progress.finished for n in swarm), 600,
                         what="all nodes finished training")
        now = trio.current_time()
        worst = 0.0
        for node in swarm:
            guard = node.cores["global"]._guard
            if guard is not None:
                low, high = guard.balances.extremes(now)
                worst = max(worst, -low, high)
        for node in swarm:
            node.request_stop()
        nursery.cancel_scope.cancel()
    counters = [n.model_counters("global") for n in swarm]
    keys = ("pushes_received", "replies_received", "guard_refused", "guard_held", "clipped",
            "clipped_replies", "unreciprocated")
    return {"seed": seed, **{k: sum(c.get(k, 0) for c in counters) for k in keys},
            "largest_balance": worst,
            "accuracy": [n.progress.accuracy for n in swarm]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--loss", type=float, default=0.0, help="message loss probability")
    ap.add_argument("--delay", type=float, default=0.0, help="largest message delay, seconds")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rules = _Rules()
    logging.getLogger("gossip").addHandler(rules)
    logging.getLogger().setLevel(logging.ERROR)
    logging.getLogger("gossip").setLevel(logging.WARNING)
    logging.getLogger("gossip").propagate = False
    rows = []
    for seed in range(args.seeds):
        rules.rules.clear()
        with tempfile.TemporaryDirectory(prefix="guard-honest-") as tmp:
            row = trio.run(one_run, Path(tmp), args.nodes, args.rounds, seed, args.loss,
                           args.delay)
        row["rules"] = dict(rules.rules)
        rows.append(row)
        print(f"seed {seed}: {row['pushes_received']} merged, {row['replies_received']} replies, "
              f"refused {row['guard_refused']} {row['rules']}, held {row['guard_held']}, "
              f"clipped {row['clipped']} + {row['clipped_replies']} replies, largest |balance| "
              f"{row['largest_balance']:.2f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
