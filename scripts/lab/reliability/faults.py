"""Message loss and delay injected at the transport layer: accuracy and push-sum weight.

Runs real nodes (full transport, handshake, codec, node runtime) over the
in-memory network of :mod:`p2p.testing` twice with the same seed:
no faults, then each write delayed up to ``--delay`` seconds and lost with
probability ``--loss`` (a lost write darkens its connection, so the requester
times out and retransmits). Prints median accuracy, the live total push-sum
weight range (per node) during the run, the total once in-flight exchanges
settled, and the retransmission counters; ``--json PATH`` writes them.

    .venv/bin/python scripts/reliability/faults.py --json faults.json    # ~1-2 min
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import trio

from lab.faults import run_with_faults


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=6)
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--round-interval", type=float, default=0.2,
                   help="pause between rounds (s): lets gossip keep up with training")
    p.add_argument("--loss", type=float, default=0.10)
    p.add_argument("--delay", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=0.5,
                   help="connect/read/push timeout and shuffle period (s); must exceed a few "
                        "delays, or no exchange ever completes")
    p.add_argument("--json", type=Path, metavar="PATH")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # one warning per dropped connection otherwise
    results: dict[str, Any] = {}
    for label, loss, delay in (("clean", 0.0, 0.0), ("faults", args.loss, args.delay)):
        with tempfile.TemporaryDirectory(prefix="p2p-faults-") as tmp:
            report = trio.run(partial(run_with_faults, Path(tmp), nodes=args.nodes,
                                      rounds=args.rounds, loss=loss, delay=delay,
                                      seed=args.seed, timeout=args.timeout,
                                      shuffle_period=args.timeout,
                                      round_interval=args.round_interval))
        accs = [a for a in report.accuracy if a is not None]
        r = report.as_dict()
        r["accuracy_median"] = statistics.median(accs)
        r["loss"], r["max_delay"] = loss, delay
        results[label] = r
        print(f"{label:>6}: loss {loss:.0%} delay <= {delay * 1000:.0f} ms | accuracy median "
              f"{r['accuracy_median']:.3f} [{min(accs):.3f}-{max(accs):.3f}] | weight/node "
              f"live {r['weight_min']:.3f}-{r['weight_max']:.3f}, settled {r['settled']:.12f} | "
              f"writes lost {r['dropped']}, retransmissions {r['retransmissions']}, "
              f"duplicates {r['duplicates']}, failures {r['failures']}, "
              f"pushes merged {r['pushes']}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
