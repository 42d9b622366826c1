"""20 live fake identities against 3 honest daemons (issue 11, items 2 and 4).

Starts 3 daemons sharing a swarm key (one shared model, ``scheme = "full"``),
then one attacking process holding ``--fakes`` identities, each with a real
listening socket on a loopback address of its own (127.0.1.k, as separate
hosts would be) and the swarm key. Every fake

- answers a shuffle (a probe included) with its own signed descriptor plus
  ``l - 1`` other fakes, all claiming to hold the model, and never passes on
  an honest descriptor;
- acknowledges every push without giving weight back (a sink);
- and the adversary injects unsolicited shuffles: ``--rate`` requests per
  second, each from a random fake to a random honest node, offering ``l - 1``
  other fakes to its main view or its model view (half each).

After ``--warmup`` s the injection runs for ``--inject`` s, then stops; the
views are read ``--after`` s later. Reported: per honest node and view, the
entries that are fakes and whether an honest holder is left; the pushes the
honest nodes sent, merged from each other, and that reached fakes, during the
injection and after it. ``--runs N`` repeats the run (seeds ``seed`` ..
``seed + N - 1``) and prints the medians; ``--fakes 0`` is the no-attack
baseline with the same timing.

    .venv/bin/python scripts/attack/sybil.py --runs 3 --json sybil.json     # ~1.5 min a run
    .venv/bin/python scripts/attack/sybil.py --runs 3 --fakes 0             # no attacker
    .venv/bin/python scripts/attack/sybil.py --partner-choice uniform       # the old choice

Acceptance (issue 11): every model view keeps an honest holder and >= 50 % of
honest pushes reach honest nodes. With the Sybil rules a view holds fakes in
proportion to the identities it has heard of (here 20 fakes vs 2 honest
peers): a uniform pick of push targets sends most pushes to fakes. The
daemons' default ``gossip.partner_choice = "reciprocity"`` pushes mostly to
holders that gave weight back and drops a holder that answers a push-pull
request without a reply from its views for a while (docs/design/peer-sampling.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import trio

from gossip import Push, PushAck
from p2p.cli.admin_client import AdminClientError
from p2p.config import NodeConfig, load_swarm_key, render_config_toml
from p2p.runtime.protocol import register_node_messages
from p2p.swarm import Swarm, SwarmSpec, node_config
from p2p.testing.wire_client import connect_from
from p2p.wire.codec import Message
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.messages import ERROR_BAD_REQUEST, Error
from p2p.wire.transport import Transport, TransportError
from peersampling import Descriptor, PeerUnreachable, ShuffleReply, ShuffleRequest, sign_descriptor

SHUFFLE_LENGTH = 5  # the daemons' default peer_sampling.shuffle_length


class GossipSwarm(Swarm):
    """A :class:`Swarm` whose daemons' ``[gossip]`` settings get ``changes``."""

    def __init__(self, spec: SwarmSpec, *, changes: dict[str, Any], **kw: Any) -> None:
        super().__init__(spec, **kw)
        self.changes = changes

    def _write_configs(self) -> None:
        super()._write_configs()
        if not self.changes:
            return
        key_file = self.workdir / "swarm.key" if self.spec.swarm_key else None
        for d in self.daemons:
            cfg: NodeConfig = node_config(self.spec, d.index, d.data_dir, key_file)
            cfg = dataclasses.replace(cfg, gossip=dataclasses.replace(cfg.gossip,
                                                                      **self.changes))
            d.config_path.write_text(render_config_toml(cfg))


class Fakes:
    """The adversary: ``count`` identities, listening on 127.0.1.(first_host + k).
    ``serve`` starts them, each answering through ``_handler(k)``."""

    def __init__(self, count: int, key: bytes, model: bytes, rng: random.Random, *,
                 first_host: int = 1) -> None:
        self.key = key
        self.model = model
        self.rng = rng
        self.identities = [Identity.generate() for _ in range(count)]
        hosts = [f"127.0.1.{first_host + k}" for k in range(count)]
        self.transports = [
            Transport(ident, host, 0, frozenset({model}), key, connector=self._connector(host),
                      connect_timeout=5.0, read_timeout=5.0)
            for ident, host in zip(self.identities, hosts, strict=True)]
        self.descriptors: list[Descriptor] = []
        self.pushes_taken = 0
        self.shuffles_answered = 0
        self.sent = 0
        self.failed = 0

    @staticmethod
    def _connector(source: str) -> Any:
        async def connect(address: str) -> trio.abc.Stream:
            return await connect_from(address, source)
        return connect

    async def serve(self, nursery: trio.Nursery) -> None:
        epoch = time.time_ns() // 1_000_000
        for k, t in enumerate(self.transports):
            address = await nursery.start(t.serve, self._handler(k))
            d = Descriptor(self.identities[k].node_id, address, 0, frozenset({self.model}), epoch)
            self.descriptors.append(sign_descriptor(d, self.identities[k].sign))

    def others(self, k: int, n: int) -> tuple[Descriptor, ...]:
        picks = self.rng.sample(range(len(self.descriptors)), min(n + 1, len(self.descriptors)))
        return tuple(self.descriptors[i] for i in picks if i != k)[:n]

    def _handler(self, k: int) -> Any:
        async def handle(peer: PeerInfo, msg: Message) -> Message | None:
            if isinstance(msg, ShuffleRequest):
                self.shuffles_answered += 1
                return ShuffleReply((self.descriptors[k], *self.others(k, SHUFFLE_LENGTH - 1)),
                                    msg.view)
            if isinstance(msg, Push):
                self.pushes_taken += 1
                return PushAck(msg.model, msg.push_id)  # weight taken, none given back
            return Error(code=ERROR_BAD_REQUEST, reason="no")
        return handle

    async def inject(self, honest: list[str], rate: float, seconds: float) -> None:
        async def one(address: str, k: int, view: bytes | None) -> None:
            req = ShuffleRequest(self.descriptors[k], self.others(k, SHUFFLE_LENGTH - 1), view)
            try:
                await self.transports[k].request(address, req, 5.0)
                self.sent += 1
            except (TransportError, PeerUnreachable, OSError):
                self.failed += 1

        end = trio.current_time() + seconds
        async with trio.open_nursery() as nursery:
            while trio.current_time() < end:
                k = self.rng.randrange(len(self.descriptors))
                view = self.model if self.rng.random() < 0.5 else None
                nursery.start_soon(one, self.rng.choice(honest), k, view)
                await trio.sleep(1.0 / rate)


def views(swarm: Swarm, fake_ids: set[str]) -> list[dict[str, Any]]:
    """Per honest node: entries and fakes of its main view and each model view."""
    out = []
    for d in swarm.daemons:
        try:
            peers = d.client.request("peers")
        except AdminClientError:
            out.append({"node": d.index, "error": "no answer"})
            continue
        row: dict[str, Any] = {"node": d.index}
        main = [e["id"] for e in peers.get("view", [])]
        row["main"] = {"entries": len(main), "fakes": sum(i in fake_ids for i in main)}
        for name, entries in (peers.get("models") or {}).items():
            ids = [e["id"] for e in entries]
            row[name] = {"entries": len(ids), "fakes": sum(i in fake_ids for i in ids),
                         "honest": len(ids) - sum(i in fake_ids for i in ids)}
        out.append(row)
    return out


def pushes(swarm: Swarm) -> dict[str, int]:
    return {"sent": sum(swarm._counter_sum(d, "pushes_sent") for d in swarm.daemons),
            "received": sum(swarm._counter_sum(d, "pushes_received") for d in swarm.daemons)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    register_node_messages()
    spec = SwarmSpec(nodes=3, rounds=100_000, scheme="full", swarm_key=True,
                     round_interval=args.round_interval, eval_every=20, seed=args.seed)
    changes: dict[str, Any] = {}
    if args.merge_guard is not None:
        changes["merge_guard"] = args.merge_guard == "on"
    if args.partner_choice is not None:
        changes["partner_choice"] = args.partner_choice
    swarm = GossipSwarm(spec, changes=changes, startup_timeout=300)
    result: dict[str, Any] = {"seed": args.seed, "fakes": args.fakes, "gossip_changes": changes}
    with swarm:
        await trio.to_thread.run_sync(swarm.start)
        started = time.monotonic()
        key = load_swarm_key(swarm.workdir / "swarm.key")
        models = swarm.daemons[0].client.request("models")["models"]
        fp = bytes.fromhex(next(m for m in models if m.get("kind") != "local")["fingerprint"])
        fakes = Fakes(args.fakes, key, fp, random.Random(args.seed))
        fake_ids = {ident.node_id.hex() for ident in fakes.identities}
        honest = [d.address or "" for d in swarm.daemons]
        async with trio.open_nursery() as nursery:
            await fakes.serve(nursery)
            await trio.sleep(args.warmup)
            p0 = await trio.to_thread.run_sync(pushes, swarm)
            t0 = trio.current_time()
            taken0 = fakes.pushes_taken
            if args.fakes:
                await fakes.inject(honest, args.rate, args.inject)
            else:
                await trio.sleep(args.inject)  # the no-attack baseline: same timing
            p1 = await trio.to_thread.run_sync(pushes, swarm)
            t1 = trio.current_time()
            taken1 = fakes.pushes_taken
            during_views = await trio.to_thread.run_sync(views, swarm, fake_ids)
            await trio.sleep(args.after)
            p2 = await trio.to_thread.run_sync(pushes, swarm)
            t2 = trio.current_time()
            taken2 = fakes.pushes_taken
            after_views = await trio.to_thread.run_sync(views, swarm, fake_ids)
            accuracy = [d.client.request("status").get("accuracy") for d in swarm.daemons]
            weight = sum(float(m["weight"]) for d in swarm.daemons
                         for m in d.client.request("models")["models"]
                         if m.get("kind") != "local")
            stats = [swarm._metrics(d) for d in swarm.daemons]
            nursery.cancel_scope.cancel()
        result.update(
            views_end_of_injection=during_views, views_after=after_views,
            pushes_during={"sent": p1["sent"] - p0["sent"],
                           "merged_by_honest": p1["received"] - p0["received"],
                           "taken_by_fakes": taken1 - taken0},
            pushes_after={"sent": p2["sent"] - p1["sent"],
                          "merged_by_honest": p2["received"] - p1["received"],
                          "taken_by_fakes": taken2 - taken1},
            injected=fakes.sent, injection_failures=fakes.failed,
            fake_shuffles_answered=fakes.shuffles_answered, accuracy=accuracy,
            honest_weight=weight,
            sampler_counters=[{k.split(".", 1)[1]: v for k, v in s.items()
                               if k.startswith("peer_sampling.")} for s in stats],
            inject_seconds=t1 - t0, after_seconds=t2 - t1,
            daemon_seconds=time.monotonic() - started)
        result["exit_codes"] = swarm.stop()
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fakes", type=int, default=20)
    p.add_argument("--rate", type=float, default=10.0,
                   help="injected shuffles per second (the honest nodes send about "
                        "2 per shuffle period each)")
    p.add_argument("--warmup", type=float, default=8.0)
    p.add_argument("--inject", type=float, default=20.0, help="seconds of injection")
    p.add_argument("--after", type=float, default=15.0,
                   help="seconds after the injection before the views are read again")
    p.add_argument("--round-interval", type=float, default=0.3)
    p.add_argument("--merge-guard", choices=["on", "off"],
                   help="gossip.merge_guard (default: the node's)")
    p.add_argument("--partner-choice", choices=["reciprocity", "uniform"],
                   help="gossip.partner_choice (default: the node's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runs", type=int, default=1, help="runs (seeds seed, seed+1, ...)")
    p.add_argument("--json", type=Path, metavar="PATH")
    args = p.parse_args(argv)
    results = []
    for k in range(args.runs):
        one = argparse.Namespace(**{**vars(args), "seed": args.seed + k})
        results.append(report(trio.run(run, one)))
    if args.runs > 1:
        summarize(results)
    if args.json:
        args.json.write_text(json.dumps(results if args.runs > 1 else results[0], indent=2,
                                        default=str))
    return 0


def summarize(results: list[dict[str, Any]]) -> None:
    """Medians over runs of the push shares; model views' honest holders over all runs."""
    def med(key: str, field: str) -> float:
        return statistics.median(r[key][field] for r in results)

    print(f"--- {len(results)} runs (seeds {[r['seed'] for r in results]}), medians:")
    for label, key in (("during injection", "pushes_during"), ("after", "pushes_after"),
                       ("whole attack", "pushes_total")):
        shares = sorted(round(r[key]["honest_share"], 3) for r in results)
        print(f"  honest pushes merged by honest nodes, {label}: {med(key, 'honest_share'):.0%} "
              f"(runs {shares}); sent per second {med(key, 'per_second'):.1f}")
    holders = [v["honest"] for r in results for row in r["views_after"]
               for name, v in row.items() if isinstance(v, dict) and name != "main"]
    print(f"  every model view keeps an honest holder in every run: "
          f"{all(r['every_model_view_has_honest'] for r in results)} "
          f"(honest holders per model view: min {min(holders, default=0)}, "
          f"max {max(holders, default=0)})")
    accs = [a for r in results for a in r["accuracy"] if a is not None]
    if accs:
        print(f"  final accuracy median {statistics.median(accs):.3f} "
              f"[{min(accs):.3f}-{max(accs):.3f}]")


def report(result: dict[str, Any]) -> dict[str, Any]:
    """Print one run's figures; adds the shares and rates to ``result``."""
    for label, key in (("end of injection", "views_end_of_injection"),
                       ("after", "views_after")):
        print(f"views ({label}):")
        for row in result[key]:
            print(f"  node {row['node']}: " + ", ".join(
                f"{name} {v['fakes']}/{v['entries']} fakes" for name, v in row.items()
                if isinstance(v, dict)))
    d, a = result["pushes_during"], result["pushes_after"]
    result["pushes_total"] = {k: d[k] + a[k] for k in d}
    seconds = {"pushes_during": result["inject_seconds"], "pushes_after": result["after_seconds"],
               "pushes_total": result["inject_seconds"] + result["after_seconds"]}
    for label, key in (("during injection", "pushes_during"), ("after", "pushes_after"),
                       ("whole attack", "pushes_total")):
        c = result[key]
        share = c["merged_by_honest"] / c["sent"] if c["sent"] else float("nan")
        print(f"pushes {label}: honest sent {c['sent']}, merged by honest {c['merged_by_honest']} "
              f"({share:.0%}), taken by fakes {c['taken_by_fakes']}")
        c["honest_share"] = share
        c["per_second"] = c["sent"] / seconds[key]
    model_views = [v for key in ("views_end_of_injection", "views_after")
                   for row in result[key] for name, v in row.items()
                   if isinstance(v, dict) and name != "main"]
    result["every_model_view_has_honest"] = all(v["honest"] > 0 for v in model_views)
    print(f"every model view keeps an honest holder: {result['every_model_view_has_honest']}; "
          f"honest total weight at the end {result['honest_weight']:.3g} (N = 3)")
    print(f"injected {result['injected']} shuffles ({result['injection_failures']} failed); "
          f"fakes answered {result['fake_shuffles_answered']}; accuracy {result['accuracy']}; "
          f"gossip changes {result['gossip_changes']}; exit codes {result['exit_codes']}; "
          f"{result['daemon_seconds']:.0f} s of daemon time after start")
    distrusted = [c.get("distrusted") for c in result["sampler_counters"]]
    print(f"peers distrusted (out of the views after taking a push): {distrusted}")
    return result


if __name__ == "__main__":
    raise SystemExit(main())
