"""Live reply poisoning against 3 honest daemons: the attacks of issue 31, as a grid.

Starts ``--honest`` daemons sharing a swarm key (digits, one shared model,
``scheme = "full"``) and trains them ``--warmup`` seconds; then, one after the
other, each attack of the grid: an attacking process with ``identities`` fresh
identities (each a listening socket on 127.0.1.k with the swarm key) injects
them into the honest views through shuffles (``--rate`` per second; each fake
answers shuffles with its own signed descriptor and other fakes) and answers
every push-pull request it gets

- ``poison``: with a reply ``norm`` away from the request along one direction
  (``fixed``, or ``rotating`` a full turn per minute), the whole share back;
- ``echo``: with a zero delta and the whole share back (a generous fake);
- ``late``: honestly (a real push-sum core) for its first ``--honest-for``
  requests, then as ``poison``;

for ``--attack`` seconds, then leaves; the honest accuracies are read at the
attack's end and ``--after`` seconds later.  A no-attack swarm with the same
schedule runs in the same session first: every row is read against its
accuracies at the same points.  Per row: the honest nodes' accuracies during
and after (median over runs of each node's, and the worst), the difference
from the no-attack run, guard refusals, clipped replies and roll-backs.

    .venv/bin/python scripts/attack/reply.py                       # the whole grid
    .venv/bin/python scripts/attack/reply.py --identities 1 --norms 30 --directions fixed
    .venv/bin/python scripts/attack/reply.py --modes echo --identities 20 --after 30
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import trio

from gossip import Push, PushAck, PushSum, RejectedPush, decode, encode
from lab.attack.sybil import Fakes, GossipSwarm, views
from p2p.config import load_swarm_key
from p2p.runtime.protocol import register_node_messages
from p2p.swarm import SwarmSpec
from p2p.wire.codec import Message
from p2p.wire.handshake import PeerInfo
from p2p.wire.messages import ERROR_BAD_REQUEST, Error
from peersampling import ShuffleReply, ShuffleRequest

SHUFFLE_LENGTH = 5  # the daemons' default peer_sampling.shuffle_length
TURN_PER_SECOND = 2 * np.pi / 60.0  # a rotating direction turns once a minute
COUNTERS = ("guard_refused", "clipped", "clipped_replies", "rolled_back", "pushes_sent",
            "pushes_received", "replies_received")


@dataclasses.dataclass(frozen=True)
class Attack:
    """One row of the grid."""

    mode: str  # poison, echo, late
    identities: int
    norm: float
    direction: str  # fixed, rotating

    @property
    def label(self) -> str:
        if self.mode == "echo":
            return f"echo, {self.identities} id"
        return (f"{self.mode} {self.norm:g} {self.direction}, {self.identities} id"
                + (", honest first" if self.mode == "late" else ""))


class Liars(Fakes):
    """The attacker: ``count`` identities on 127.0.1.(first_host+k), answering as
    ``attack`` says."""

    def __init__(self, attack: Attack, key: bytes, model: bytes, length: int, seed: int,
                 honest_for: int, first_host: int) -> None:
        super().__init__(attack.identities, key, model, random.Random(seed),
                         first_host=first_host)
        self.attack, self.length = attack, length
        gen = np.random.default_rng(seed)
        u, v = gen.standard_normal(length), gen.standard_normal(length)
        u /= np.linalg.norm(u)
        v -= (v @ u) * u
        self.u, self.v = u, v / np.linalg.norm(v)
        self.honest_for = honest_for
        self.started = time.monotonic()
        self.cores: dict[int, PushSum] = {}  # honest answers ("late"), per identity
        self.answered = self.lies = self.shuffles = 0

    def direction(self) -> np.ndarray:
        if self.attack.direction == "fixed":
            return self.u
        angle = TURN_PER_SECOND * (time.monotonic() - self.started)
        out: np.ndarray = np.cos(angle) * self.u + np.sin(angle) * self.v
        return out

    def answer(self, k: int, peer: PeerInfo, push: Push) -> Message:
        self.answered += 1
        if not push.want_reply:
            return PushAck(push.model, push.push_id)
        if self.attack.mode == "late" and self.answered <= self.honest_for:
            core = self.cores.get(k)
            if core is None:  # a holder of its own, from the first request's values
                if push.base:
                    return Error(code=ERROR_BAD_REQUEST, reason="no reference")
                core = self.cores[k] = PushSum(self.model, decode(push.values, self.length))
            try:
                return core.on_push(peer.node_id, push, time.monotonic())
            except RejectedPush as exc:
                return Error(code=ERROR_BAD_REQUEST, reason=str(exc))
        self.lies += 1
        norm = 0.0 if self.attack.mode == "echo" else self.attack.norm
        return PushAck(push.model, push.push_id,
                       reply=encode(norm * self.direction(), "f32"), reply_weight=push.weight)

    def _handler(self, k: int) -> Any:
        async def handle(peer: PeerInfo, msg: Message) -> Message | None:
            if isinstance(msg, ShuffleRequest):
                self.shuffles += 1
                return ShuffleReply((self.descriptors[k], *self.others(k, SHUFFLE_LENGTH - 1)),
                                    msg.view)
            if isinstance(msg, Push):
                return self.answer(k, peer, msg)
            return Error(code=ERROR_BAD_REQUEST, reason="no")
        return handle


def _accuracies(swarm: GossipSwarm) -> list[float | None]:
    return [d.client.request("status").get("accuracy") for d in swarm.daemons]


def _counters(swarm: GossipSwarm) -> dict[str, int]:
    return {c: sum(swarm._counter_sum(d, c) for d in swarm.daemons) for c in COUNTERS}


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


async def session(args: argparse.Namespace, grid: list[Attack | None],
                  seed: int) -> list[dict[str, Any]]:
    """One swarm: warm-up, then each attack of ``grid`` (None: a quiet window of the same
    length, the no-attack reference) with its reading points."""
    register_node_messages()
    spec = SwarmSpec(nodes=args.honest, rounds=100_000, scheme="full", swarm_key=True,
                     round_interval=args.round_interval, eval_every=args.eval_every, seed=seed)
    changes = dict(item.split("=", 1) for item in args.set)
    typed: dict[str, Any] = {k: json.loads(v) for k, v in changes.items()}
    swarm = GossipSwarm(spec, changes=typed, startup_timeout=300)
    rows: list[dict[str, Any]] = []
    with swarm:
        await trio.to_thread.run_sync(swarm.start)
        key = load_swarm_key(swarm.workdir / "swarm.key")
        models = swarm.daemons[0].client.request("models")["models"]
        shared = next(m for m in models if m.get("kind") != "local")
        fp, length = bytes.fromhex(shared["fingerprint"]), int(shared["size"])
        honest = [d.address or "" for d in swarm.daemons]
        await trio.sleep(args.warmup)
        for index, attack in enumerate(grid):
            before = await trio.to_thread.run_sync(_accuracies, swarm)
            c0 = await trio.to_thread.run_sync(_counters, swarm)
            row: dict[str, Any] = {"seed": seed, "attack": None if attack is None
                                   else dataclasses.asdict(attack), "before": before}
            liars = None
            async with trio.open_nursery() as nursery:
                if attack is not None:
                    liars = Liars(attack, key, fp, length, seed * 1000 + index,
                                  args.honest_for, 1 + 20 * (index % 12))
                    await liars.serve(nursery)
                    await liars.inject(honest, args.rate, args.attack)
                else:
                    await trio.sleep(args.attack)
                row["during"] = await trio.to_thread.run_sync(_accuracies, swarm)
                fake_ids = ({i.node_id.hex() for i in liars.identities} if liars is not None
                            else set())
                row["views_during"] = await trio.to_thread.run_sync(views, swarm, fake_ids)
                c1 = await trio.to_thread.run_sync(_counters, swarm)
                nursery.cancel_scope.cancel()  # the attacker leaves
            await trio.sleep(args.after)
            row["after"] = await trio.to_thread.run_sync(_accuracies, swarm)
            c2 = await trio.to_thread.run_sync(_counters, swarm)
            row["counters_during"], row["counters_after"] = _delta(c1, c0), _delta(c2, c1)
            if liars is not None:
                row.update(answered=liars.answered, lies=liars.lies, shuffles=liars.shuffles)
            rows.append(row)
            print(f"  seed {seed}: {attack.label if attack else 'no attack'}: during "
                  f"{row['during']}, after {row['after']}, refused "
                  f"{row['counters_during']['guard_refused']}+"
                  f"{row['counters_after']['guard_refused']}, rolled back "
                  f"{row['counters_during']['rolled_back']}, lies {row.get('lies', 0)}",
                  flush=True)
        row = rows[-1]
        row["exit_codes"] = swarm.stop()
    return rows


def _grid(args: argparse.Namespace) -> list[Attack]:
    out: list[Attack] = []
    for mode in args.modes.split(","):
        if mode == "echo":
            out += [Attack("echo", int(i), 0.0, "fixed") for i in args.identities.split(",")]
            continue
        for ids, norm, direction in itertools.product(
                args.identities.split(","), args.norms.split(","), args.directions.split(",")):
            out.append(Attack(mode, int(ids), float(norm), direction))
    return out


def _cell(values: list[float]) -> str:
    return "-" if not values else f"{100 * statistics.median(values):.1f}"


def summarise(results: list[dict[str, Any]], grid: list[Attack]) -> None:
    """One line per attack: medians over runs against the no-attack windows."""
    quiet = [r for r in results if r["attack"] is None]
    base_during = [a for r in quiet for a in r["during"] if a is not None]
    base_after = [a for r in quiet for a in r["after"] if a is not None]
    print(f"\nno-attack reference: during {_cell(base_during)}, after {_cell(base_after)} "
          f"(median over {len(quiet)} windows of every honest node)")
    print("| attack | runs | honest during (worst) | vs no attack | honest after (worst) "
          "| vs no attack | refused during / after | clipped replies | roll-backs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for attack in grid:
        rows = [r for r in results if r["attack"] == dataclasses.asdict(attack)]
        if not rows:
            continue
        during = [statistics.median(a for a in r["during"] if a is not None) for r in rows]
        after = [statistics.median(a for a in r["after"] if a is not None) for r in rows]
        worst_d = min(a for r in rows for a in r["during"] if a is not None)
        worst_a = min(a for r in rows for a in r["after"] if a is not None)
        ref_d = statistics.median(base_during) if base_during else float("nan")
        ref_a = statistics.median(base_after) if base_after else float("nan")
        print(f"| {attack.label} | {len(rows)} | {_cell(during)} ({100 * worst_d:.1f}) | "
              f"{100 * (statistics.median(during) - ref_d):+.1f} | {_cell(after)} "
              f"({100 * worst_a:.1f}) | {100 * (statistics.median(after) - ref_a):+.1f} | "
              f"{statistics.median(r['counters_during']['guard_refused'] for r in rows):g} / "
              f"{statistics.median(r['counters_after']['guard_refused'] for r in rows):g} | "
              f"{statistics.median(r['counters_during']['clipped_replies'] for r in rows):g} | "
              f"{statistics.median(r['counters_during']['rolled_back'] for r in rows):g} |")
    print("\n| attack | runs | fakes' share of view entries, end of attack | honest pushes merged "
          "by honest nodes, during / after | refused during / after |")
    print("|---|---|---|---|---|")
    plan: list[Attack | None] = [None, *grid]
    for each in plan:
        rows = [r for r in results
                if r["attack"] == (None if each is None else dataclasses.asdict(each))]
        if rows:
            print(f"| {each.label if each else 'no attack'} | {len(rows)} | "
                  f"{_median_cell([_fake_share(r['views_during']) for r in rows])} | "
                  f"{_median_cell([_push_share(r['counters_during']) for r in rows])} / "
                  f"{_median_cell([_push_share(r['counters_after']) for r in rows])} | "
                  f"{_spread([r['counters_during']['guard_refused'] for r in rows])} / "
                  f"{_spread([r['counters_after']['guard_refused'] for r in rows])} |")


def _fake_share(views_: list[dict[str, Any]]) -> float:
    """Fakes' share of all the entries of every honest node's main and model views."""
    entries = [v for row in views_ for v in row.values() if isinstance(v, dict)]
    total = sum(v["entries"] for v in entries)
    return sum(v["fakes"] for v in entries) / total if total else float("nan")


def _push_share(counters: dict[str, int]) -> float:
    """Pushes the honest nodes merged over the pushes they sent (the rest went to fakes,
    were refused or lost)."""
    sent = counters["pushes_sent"]
    return counters["pushes_received"] / sent if sent else float("nan")


def _median_cell(values: list[float]) -> str:
    text = f"{100 * statistics.median(values):.0f} %"
    return text + (f" ({100 * min(values):.0f}-{100 * max(values):.0f})" if len(values) > 1
                   else "")


def _spread(values: list[int]) -> str:
    text = f"{statistics.median(values):g}"
    return text + (f" ({min(values)}-{max(values)})" if len(values) > 1 else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--honest", type=int, default=3, help="honest daemons (default 3)")
    p.add_argument("--modes", default="poison", help="poison, echo, late (comma-separated)")
    p.add_argument("--identities", default="1,5,20")
    p.add_argument("--norms", default="3,30,300")
    p.add_argument("--directions", default="fixed,rotating")
    p.add_argument("--honest-for", type=int, default=100,
                   help="with late: requests answered honestly first (default 100)")
    p.add_argument("--runs", type=int, default=3, help="sessions, seeds --seed.. (default 3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=float, default=60.0,
                   help="seconds of honest training before the first attack (default 60)")
    p.add_argument("--attack", type=float, default=30.0, help="seconds each attack lasts")
    p.add_argument("--after", type=float, default=60.0,
                   help="seconds after it before the accuracies are read again (default 60)")
    p.add_argument("--rate", type=float, default=10.0, help="injected shuffles per second")
    p.add_argument("--round-interval", type=float, default=0.3)
    p.add_argument("--eval-every", type=int, default=5)
    p.add_argument("--quiet-windows", type=int, default=2,
                   help="no-attack windows in each session, before the attacks (default 2)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                   help="a [gossip] setting for every daemon, e.g. drift_cap=1 (repeatable)")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write every row here")
    p.add_argument("--summarise", type=Path, nargs="+", metavar="JSON",
                   help="print the tables of earlier runs' --json files (same grid) and exit")
    args = p.parse_args(argv)
    grid = _grid(args)
    if args.summarise:
        summarise([r for path in args.summarise for r in json.loads(path.read_text())], grid)
        return 0
    plan: list[Attack | None] = [None] * args.quiet_windows + list(grid)
    print(f"{args.honest} honest daemons; per session {args.quiet_windows} quiet windows then "
          f"{len(grid)} attacks of {args.attack:g} s, each read at its end and {args.after:g} s "
          f"later; {args.runs} session(s); gossip changes {args.set or 'none'}", flush=True)
    results: list[dict[str, Any]] = []
    for k in range(args.runs):
        results += trio.run(session, args, plan, args.seed + k)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1, default=str))
    summarise(results, grid)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
