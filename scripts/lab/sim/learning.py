"""Lying holders inside the product simulator: real learners, real nodes (issue 31).

:func:`run` builds a ``p2p.simulation`` swarm from the simulator's own flags,
makes a share of its nodes liars (:class:`lab.sim.adversaries.ReplyPoisoner`
answering every push-pull request once the honest nodes' mean round reaches
``start``, until it reaches ``stop``; honest before and after) and reads every
honest node's accuracy at the attack's start, at its end and at the run's end,
with the merge defences' counters.  Used by ``scripts/bench/attacks.py
--learning``.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import trio

from gossip import Push, PushAck, PushSum
from gossip.recovery import Verdict
from lab.sim.adversaries import Direction, ReplyPoisoner
from p2p.simulation.cli import build_parser, plan_simulation

log = logging.getLogger(__name__)


def _lie(core: PushSum, poisoner: ReplyPoisoner, active: Callable[[], bool]) -> None:
    """Patch ``core`` (a liar's): while ``active()``, answer requests as ``poisoner`` and
    push nothing; honest otherwise."""
    honest_push, honest_make = core.on_push, core.make_pushes

    def on_push(sender: bytes, push: Push, now: float) -> PushAck:
        if not active():
            return honest_push(sender, push, now)
        poisoner.answered += 1
        if poisoner.answered <= poisoner.honest_for or not push.want_reply:
            return honest_push(sender, push, now)
        poisoner.round = int(now * 10)  # a turning direction turns with time
        ack = poisoner.answer(core, 0, push)
        assert ack is not None
        return ack

    def make_pushes(peers: Any, now: float) -> list[tuple[bytes, Push]]:
        return [] if active() else honest_make(peers, now)

    core.on_push = on_push  # type: ignore[method-assign]
    core.make_pushes = make_pushes  # type: ignore[method-assign]


def _watch(node: Any, out: list[tuple[float, Verdict]]) -> None:
    """Record every roll-back verdict of ``node``'s recovery (per-node diagnosis)."""
    recovery = getattr(node, "recovery", None)
    if recovery is None:
        return
    judge = recovery.judge.judge

    def judged(own: float, merged: float, moved: Any) -> Verdict:
        verdict = judge(own, merged, moved)
        if verdict.roll_back:
            out.append((trio.current_time(), verdict))
        return verdict

    recovery.judge.judge = judged


def run(flags: list[str], *, liars: float, norm: float, turn: float = 0.0,
        honest_for: int = 0, start: int = 20, stop: int | None = None,
        gossip: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One simulation of ``flags`` (``scripts/simulate.py``'s); the last ``liars`` share of
    the nodes lie from mean honest round ``start`` to ``stop`` (None: the end), replies
    ``norm`` away along one direction (``turn``: radians per simulated 0.1 s);
    ``gossip``: changes to every node's ``[gossip]``."""
    from p2p.simulation.host import SimProgress, Simulation
    from p2p.testing.clock import virtual_clock

    args = build_parser().parse_args(flags)
    plan = plan_simulation(args)
    n = plan.spec.nodes
    lying = set(range(n - round(liars * n), n)) if norm is not None else set()
    configure = plan.configure

    def configure_gossip(config: Any) -> Any:
        config = configure(config)
        if gossip:
            config = dataclasses.replace(config, gossip=dataclasses.replace(config.gossip,
                                                                          **gossip))
        return config

    state: dict[str, Any] = {"active": False, "started": None, "stopped": None,
                             "installed": False}
    poisoners: dict[str, ReplyPoisoner] = {}
    liar_ids: set[bytes] = set()
    verdicts: dict[int, list[tuple[float, Verdict]]] = {}  # honest node -> its roll-backs
    sim: Simulation | None = None

    def honest_round() -> float:
        assert sim is not None
        rounds = [s.node.progress.round for s in sim.slots
                  if s.index not in lying and s.node is not None]
        return statistics.mean(rounds) if rounds else 0.0

    def on_sample(_: SimProgress) -> None:
        assert sim is not None
        if not state["installed"]:  # the first sample: every node is built
            for slot in sim.slots:
                if slot.index in lying and slot.node is not None:
                    for name, core in slot.node.cores.items():
                        p = poisoners.setdefault(name, ReplyPoisoner(
                            Direction(core.length, args.seed + 1, turn), norm, honest_for))
                        _lie(core, p, lambda: bool(state["active"]))
            liar_ids.update(s.node.identity.node_id for s in sim.slots
                            if s.index in lying and s.node is not None)
            for slot in sim.slots:
                if slot.index not in lying and slot.node is not None:
                    _watch(slot.node, verdicts.setdefault(slot.index, []))
            state["installed"] = True
        # the same reading points without liars: the no-attack reference
        r = honest_round()
        if state["started"] is None and r >= start:
            state["active"], state["started"] = bool(lying), trio.current_time()
        if state["stopped"] is None and stop is not None and r >= stop:
            state["active"], state["stopped"] = False, trio.current_time()

    wall = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="attack-learning-") as tmp:
        sim = Simulation(plan.spec, Path(tmp), plan.network, runner_for=plan.runner_for,
                         sample_every=args.sample_every, max_seconds=plan.max_seconds,
                         on_sample=on_sample, configure=configure_gossip,
                         in_process_peers=plan.in_process_peers)
        trio.run(sim.run, clock=virtual_clock())
        honest = [s for s in sim.slots if s.index not in lying and s.node is not None]

        def accuracy_at(t: float | None) -> list[float]:
            out = []
            for s in honest:
                seen = [a for (when, _, a) in s.history if t is None or when <= t]
                if seen:
                    out.append(seen[-1])
            return out

        counters: dict[str, int] = {}
        for s in honest:
            assert s.node is not None
            for name in s.node.learning.layout.shared_models:
                for key, value in s.node.model_counters(name).items():
                    counters[key] = counters.get(key, 0) + value
        recovery = [getattr(s.node, "recovery", None) for s in honest]

        def per_node(s: Any) -> dict[str, Any]:
            mine = verdicts.get(s.index, [])
            during = [v for t, v in mine if state["started"] is not None and t >= state["started"]
                      and (state["stopped"] is None or t <= state["stopped"])]
            return {"index": s.index, "accuracy": [a for (_, _, a) in s.history],
                    "rollbacks": len(mine), "rollbacks_during": len(during),
                    "blamed_liars": sum(p in liar_ids for _, v in mine for p in v.blamed),
                    "blamed_honest": sum(p not in liar_ids for _, v in mine for p in v.blamed),
                    "struck_liars": sum(p in liar_ids for _, v in mine for p in v.struck),
                    "struck_honest": sum(p not in liar_ids for _, v in mine for p in v.struck),
                    "counters": {k: sum(s.node.model_counters(m).get(k, 0)
                                        for m in s.node.learning.layout.shared_models)
                                 for k in ("replies_received", "clipped_replies", "clipped",
                                           "guard_refused", "rolled_back")}}
        return {
            "nodes": n, "liars": sorted(lying), "norm": norm, "turn": turn,
            "honest_for": honest_for, "start": start, "stop": stop,
            "gossip": dict(gossip or {}), "seed": args.seed,
            "attack_started": state["started"], "attack_stopped": state["stopped"],
            "accuracy_at_start": accuracy_at(state["started"]),
            "accuracy_at_stop": accuracy_at(state["stopped"]),
            "accuracy_end": accuracy_at(None),
            "rollbacks": sum(r.rollbacks for r in recovery if r is not None),
            "struck": sum(r.struck for r in recovery if r is not None),
            "per_node": [per_node(s) for s in honest],
            "counters": {k: counters.get(k, 0) for k in (
                "pushes_sent", "pushes_received", "replies_received", "guard_refused",
                "clipped", "clipped_replies", "rejected", "unreciprocated")},
            "simulated_seconds": sim.series[-1]["time"] if sim.series else 0.0,
            "wall_seconds": time.perf_counter() - wall,
        }
