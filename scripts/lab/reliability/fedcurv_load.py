"""FedCurv on real daemons of a loaded machine, over many seeds: no node may die.

Starts two CPU burners (``python3 -c "while True: pass"``) beside the swarm,
then runs ``scripts/swarm.py --strategy fedcurv --nodes 6 --rounds 40 --seed S``
(the command of the reported failure) for each seed, keeping the daemons'
logs. Per seed it reports the swarm's exit status, each daemon's exit status,
the median and worst accuracy, and what the logs say: tracebacks, rounds
skipped for non-finite values, training stopped, the strategy switched off.

    .venv/bin/python scripts/reliability/fedcurv_load.py                 # 10 seeds, ~20 min
    .venv/bin/python scripts/reliability/fedcurv_load.py --seeds 1 --nodes 3 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
#: What a daemon's log says that matters here: pattern -> the column it counts in.
SIGNS = {"Traceback": "tracebacks", " skipped: ": "rounds_skipped",
         "training stopped:": "training_stopped", "failed in": "strategy_switched_off"}


def burners(count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` busy-looping processes (stopped by the caller)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def one_seed(seed: int, nodes: int, rounds: int, workdir: Path) -> dict[str, Any]:
    """One swarm run of the reported command; what it and its daemons' logs say."""
    out = workdir / f"seed{seed}.json"
    command = [sys.executable, str(ROOT / "scripts" / "swarm.py"), "--strategy", "fedcurv",
               "--nodes", str(nodes), "--rounds", str(rounds), "--seed", str(seed),
               "--quiet", "--keep", "--workdir", str(workdir / f"seed{seed}"),
               "--json", str(out), "--startup-timeout", "300"]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    row: dict[str, Any] = {"seed": seed, "exit": proc.returncode,
                           **{column: 0 for column in SIGNS.values()}}
    for log in sorted((workdir / f"seed{seed}").glob("node*.log")):
        text = log.read_text(errors="replace")
        for pattern, column in SIGNS.items():
            row[column] += text.count(pattern)
    if out.exists():
        summary = json.loads(out.read_text())
        accs = [n["accuracy"] for n in summary["nodes"] if n["accuracy"] is not None]
        row.update(daemon_exits=summary.get("exit_codes"),
                   median_accuracy=statistics.median(accs) if accs else None,
                   worst_accuracy=min(accs) if accs else None)
    else:
        row["error"] = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    # a daemon that died makes the swarm exit non-zero and shows in its exit status; a
    # traceback alone is a strategy switched off (the node lived on without it)
    row["died"] = row["exit"] != 0 or any(code != 0 for code in row.get("daemon_exits") or [1])
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=10, help="seeds 1..N (default 10)")
    p.add_argument("--nodes", type=int, default=6, help="daemons per swarm (default 6)")
    p.add_argument("--rounds", type=int, default=40, help="rounds per daemon (default 40)")
    p.add_argument("--burners", type=int, default=2, help="CPU burners beside (default 2)")
    p.add_argument("--json", type=Path, metavar="PATH", help="write the rows as JSON")
    args = p.parse_args(argv)
    rows = []
    load = burners(args.burners)
    try:
        with tempfile.TemporaryDirectory(prefix="fedcurv-load-") as tmp:
            for seed in range(1, args.seeds + 1):
                row = one_seed(seed, args.nodes, args.rounds, Path(tmp))
                rows.append(row)
                acc = row.get("median_accuracy")
                print(f"seed {seed}: exit {row['exit']}, daemons {row.get('daemon_exits')}, "
                      f"median accuracy {'-' if acc is None else f'{100 * acc:.1f}%'}, "
                      + ", ".join(f"{c} {row[c]}" for c in SIGNS.values()), flush=True)
    finally:
        for burner in load:
            burner.kill()
            burner.wait()
    died = sum(row["died"] for row in rows)
    off = sum(row["strategy_switched_off"] > 0 for row in rows)
    accs = [r["median_accuracy"] for r in rows if r.get("median_accuracy") is not None]
    print(f"{len(rows)} seeds, {args.nodes} daemons each, {args.burners} CPU burners beside: "
          f"swarms with a node that died {died}, with a node whose strategy failed {off}; "
          "median accuracy over seeds "
          + (f"{100 * statistics.median(accs):.1f}% [{100 * min(accs):.1f}-"
             f"{100 * max(accs):.1f}]" if accs else "-"))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0 if died == 0 and off == 0 else 1
