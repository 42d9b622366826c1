#!/usr/bin/env python3
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
injection and after it.

    .venv/bin/python scripts/attack_sybil.py --json sybil.json          # ~1.5 min
    .venv/bin/python scripts/attack_sybil.py --merge-guard              # gossip.merge_guard on

Acceptance (issue 11): every model view keeps an honest holder and >= 50 % of
honest pushes reach honest nodes. With the Sybil rules a view holds fakes in
proportion to the identities it has heard of (here 20 fakes vs 2 honest
peers), so which peers the pushes go to is the merge defences' part
(``gossip.merge_guard`` pauses a peer that never gives weight back).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
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


class GuardedSwarm(Swarm):
    """A :class:`Swarm` whose daemons run with ``gossip.merge_guard`` = ``guard``."""

    def __init__(self, spec: SwarmSpec, *, guard: bool, **kw: Any) -> None:
        super().__init__(spec, **kw)
        self.guard = guard

    def _write_configs(self) -> None:
        super()._write_configs()
        if not self.guard:
            return
        key_file = self.workdir / "swarm.key" if self.spec.swarm_key else None
        for d in self.daemons:
            cfg: NodeConfig = node_config(self.spec, d.index, d.data_dir, key_file)
            cfg = dataclasses.replace(cfg, gossip=dataclasses.replace(cfg.gossip,
                                                                      merge_guard=True))
            d.config_path.write_text(render_config_toml(cfg))


class Fakes:
    """The adversary: ``count`` identities, each listening on 127.0.1.(k+1)."""

    def __init__(self, count: int, key: bytes, model: bytes, rng: random.Random) -> None:
        self.key = key
        self.model = model
        self.rng = rng
        self.identities = [Identity.generate() for _ in range(count)]
        self.transports = [
            Transport(ident, f"127.0.1.{k + 1}", 0, frozenset({model}), key,
                      connector=self._connector(f"127.0.1.{k + 1}"), connect_timeout=5.0,
                      read_timeout=5.0)
            for k, ident in enumerate(self.identities)]
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
    swarm = GuardedSwarm(spec, guard=args.merge_guard, startup_timeout=300)
    result: dict[str, Any] = {"merge_guard": args.merge_guard}
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
            taken0 = fakes.pushes_taken
            await fakes.inject(honest, args.rate, args.inject)
            p1 = await trio.to_thread.run_sync(pushes, swarm)
            taken1 = fakes.pushes_taken
            during_views = await trio.to_thread.run_sync(views, swarm, fake_ids)
            await trio.sleep(args.after)
            p2 = await trio.to_thread.run_sync(pushes, swarm)
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
    p.add_argument("--merge-guard", action="store_true", help="gossip.merge_guard = true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, metavar="PATH")
    args = p.parse_args(argv)
    result = trio.run(run, args)
    for label, key in (("end of injection", "views_end_of_injection"),
                       ("after", "views_after")):
        print(f"views ({label}):")
        for row in result[key]:
            print(f"  node {row['node']}: " + ", ".join(
                f"{name} {v['fakes']}/{v['entries']} fakes" for name, v in row.items()
                if isinstance(v, dict)))
    for label, key in (("during injection", "pushes_during"), ("after", "pushes_after")):
        c = result[key]
        share = c["merged_by_honest"] / c["sent"] if c["sent"] else float("nan")
        print(f"pushes {label}: honest sent {c['sent']}, merged by honest {c['merged_by_honest']} "
              f"({share:.0%}), taken by fakes {c['taken_by_fakes']}")
        c["honest_share"] = share
    model_views = [v for row in result["views_after"] for name, v in row.items()
                   if isinstance(v, dict) and name != "main"]
    result["every_model_view_has_honest"] = all(v["honest"] > 0 for v in model_views)
    print(f"every model view keeps an honest holder: {result['every_model_view_has_honest']}; "
          f"honest total weight at the end {result['honest_weight']:.3g} (N = 3)")
    print(f"injected {result['injected']} shuffles ({result['injection_failures']} failed); "
          f"fakes answered {result['fake_shuffles_answered']}; accuracy {result['accuracy']}; "
          f"merge_guard {result['merge_guard']}; exit codes {result['exit_codes']}; "
          f"{result['daemon_seconds']:.0f} s of daemon time after start")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
