"""Simulate a swarm of N real nodes in one process, on a virtual clock.

Every node is the daemon's node runtime, configured as ``scripts/swarm.py``
configures its daemons, over an in-memory network with modelled links and on
trio's mock clock: training runs inline and is charged ``--compute-seconds`` of
simulated time per round, so 1,000 nodes cost CPU time, not real time.

    python scripts/simulate.py                          # 8 nodes, partial scheme, digits
    python scripts/simulate.py --nodes 64 --latency uniform:5:50 --bandwidth 10 --loss 0.01
    python scripts/simulate.py --gossip-only --nodes 10000   # no torch: gossip at scale

The flags of ``scripts/swarm.py`` mean the same here; a swarm too large for
digits runs the ``synthetic`` task. Flags, link models and churn:
docs/guide/simulation.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from p2p.simulation.churn import ChurnEvent, load_churn_script, random_churn
from p2p.simulation.network import SimNetwork, parse_distribution
from p2p.swarm import SwarmError, SwarmSpec
from p2p.swarm import cli as swarm_cli
from p2p.swarm.plotting import run_title, save_figure

LOCKSTEP_MODES = ("auto", "off", "plain", "batched")
HANDSHAKE_MODES = ("auto", "noise", "trusted")
#: Above this many nodes the defaults ("auto") switch to the cheaper simulation:
#: lock-step batched training, trusted handshakes, an evaluation every 10 rounds,
#: more session slots (LARGE_SWARM_MAX_CONNECTIONS).
LARGE_SWARM = 256
#: Session slots per node above LARGE_SWARM nodes (daemons: limits.max_connections, 64).
#: Measured (docs/guide/simulation.md, "Session slots"): with 64, nodes refuse sessions from the
#: first simulated seconds (after a full handshake each, then retried elsewhere); 256
#: removed the refusals at 150 and 300 nodes and cost less CPU.
LARGE_SWARM_MAX_CONNECTIONS = 256
DESCRIPTOR_CHECKS = ("in-process", "full")
#: Default --connect-jitter, ms (docs/guide/simulation.md, "Cost at scale", "Start-up"): 0. With
#: 1 ms no handshake is refused (the nodes, started at one instant, otherwise open a round's
#: connections at one virtual instant) and 300 x 5 cost less, but at 1,000 nodes the most
#: contacted nodes then refused 22,187 sessions after full handshakes (6,664 refusals in all
#: without it) and 1,000 x 5 cost more: off until their session slots are dealt with.
DEFAULT_CONNECT_JITTER_MS = 0.0
DIGITS_TRAINING = 1437  # digits' 1,797 samples less the 20 % test part
DEFAULT_TEST_SAMPLES = 2000


def add_simulation_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of the simulation itself (the rest are ``scripts/swarm.py``'s)."""
    g = p.add_argument_group("simulation")
    g.add_argument("--compute-seconds", type=float, default=0.05, metavar="S",
                   help="simulated seconds one training round costs (default 0.05)")
    g.add_argument("--eval-every", type=int, metavar="K",
                   help="evaluate every K rounds (default: the swarm's, 5; 10 above 256 nodes)")
    g.add_argument("--samples-per-node", type=int, default=50, metavar="N",
                   help="with the automatic task choice: training samples per node (default 50)")
    g.add_argument("--test-samples", type=int, default=DEFAULT_TEST_SAMPLES, metavar="N",
                   help="with a generated task (synthetic, mnist1d): size of the shared test "
                        f"part every node evaluates on (default {DEFAULT_TEST_SAMPLES})")
    g.add_argument("--latency", default="0", metavar="MS",
                   help="one-way link latency in ms: VALUE, uniform:LOW:HIGH or "
                        "lognormal:MEDIAN:SIGMA, drawn per link (default 0)")
    g.add_argument("--bandwidth", metavar="MBITS",
                   help="link bandwidth in Mbit/s, same forms (default unlimited)")
    g.add_argument("--connect-jitter", type=float, default=DEFAULT_CONNECT_JITTER_MS,
                   metavar="MS",
                   help="a connection takes a further 0..MS ms to open, seeded per dial "
                        f"(default {DEFAULT_CONNECT_JITTER_MS:g}: none): dials made at one "
                        "instant reach a node one after the other instead of all at once "
                        "(more than its 16 handshake slots, the rest refused); see "
                        "docs/guide/simulation.md for what it does at 1,000 nodes")
    g.add_argument("--loss", type=float, default=0.0, metavar="P",
                   help="probability that a message is lost (its connection goes dark)")
    g.add_argument("--churn", type=float, default=0.0, metavar="FRACTION",
                   help="this fraction of the nodes crash once and restart from their "
                        "checkpoint (random times, seeded, counted from the first "
                        "finished round: churn while the swarm trains)")
    g.add_argument("--churn-script", type=Path, metavar="FILE",
                   help="churn events, one per line: SECONDS crash|leave|join|restart NODE")
    g.add_argument("--lockstep", choices=LOCKSTEP_MODES, default="auto",
                   help="train the nodes that start a round at the same instant together: "
                        "plain loop or batched (vmap); off: each node inline; auto "
                        f"(default): batched above {LARGE_SWARM} nodes, else off")
    g.add_argument("--lockstep-align", type=float, default=0.0, metavar="S",
                   help="with --lockstep: a round starts on the next multiple of S simulated "
                        "seconds, so that nodes a little apart train in one batch (default 0: "
                        "no alignment; the wait comes before the node takes its model lock, "
                        "see docs/guide/simulation.md)")
    g.add_argument("--handshakes", choices=HANDSHAKE_MODES, default="auto",
                   help="noise: the daemon's Noise handshake with Ed25519 signatures; trusted: "
                        "the same messages and identity checks without that cryptography "
                        "(every identity is a simulated node's); auto (default): trusted "
                        f"above {LARGE_SWARM} nodes")
    g.add_argument("--checkpoint-interval", type=float, metavar="S",
                   help="simulated seconds between a node's checkpoints (default: the "
                        "swarm's, 30): what a crashed node restarts from")
    g.add_argument("--start-together", action=argparse.BooleanOptionalAction, default=True,
                   help="as the swarm's daemons, each node waits (training.peer_wait, 120 s) "
                        "until it knows min(N-1, 20) peers before its first round (default); "
                        "--no-start-together: train at once (small swarms with churn or loss)")
    g.add_argument("--max-connections", type=int, metavar="N",
                   help="each node's limits.max_connections (session slots, outgoing pool; "
                        "default: the config's, 64 as daemons; "
                        f"{LARGE_SWARM_MAX_CONNECTIONS} above {LARGE_SWARM} nodes)")
    g.add_argument("--descriptor-checks", choices=DESCRIPTOR_CHECKS, default="in-process",
                   help="in-process (default): peer sampling does not validate the fields of "
                        "descriptors received from another simulated node again (signatures "
                        "still checked); full: every field checked, as a daemon does")
    g.add_argument("--sample-every", type=float, default=0.5, metavar="S",
                   help="simulated seconds between samples of the time series (default 0.5)")
    g.add_argument("--max-seconds", type=float, metavar="S",
                   help="give up after this many simulated seconds (default: generous)")
    g.add_argument("--gossip-only", action="store_true",
                   help="peer sampling and push-sum on static vectors, no training "
                        "(10,000+ nodes); takes its own flags")
    g.add_argument("-v", "--verbose", action="store_true", help="log the nodes' INFO lines")


def build_parser() -> argparse.ArgumentParser:
    p = swarm_cli.build_parser()
    p.description = __doc__.split("\n\n")[0]
    add_simulation_arguments(p)
    return p


def sized_task(args: argparse.Namespace) -> tuple[str | None, int | None, float | None]:
    """The task, ``data.num_samples`` and ``data.test_fraction`` to run.

    An explicit ``--task`` or ``--config`` is kept (generated tasks are still
    sized). Otherwise digits while it gives every node ``--samples-per-node``
    samples, else the synthetic task (Gaussian clusters) sized for the swarm: in 50 rounds of
    10 steps it goes from ~63 % (one node's 50 samples) to ~95 % (all samples pooled), where
    mnist1d stays between 20 % and 40 %.
    """
    task = args.task
    if task is None and args.config is None:
        task = "digits" if args.nodes * args.samples_per_node <= DIGITS_TRAINING else "synthetic"
    if task not in ("mnist1d", "synthetic"):
        return task, None, None
    train = args.nodes * args.samples_per_node
    total = train + args.test_samples
    return task, total, args.test_samples / total


def spec_and_configure(args: argparse.Namespace) -> tuple[SwarmSpec, Any]:
    """The swarm spec of the flags, and a function adjusting each node's config."""
    task, num_samples, test_fraction = sized_task(args)
    args.task = task
    spec = swarm_cli.spec_from_args(args)
    eval_every = args.eval_every or (10 if args.nodes > LARGE_SWARM else None)
    changes: dict[str, Any] = {"start_together": args.start_together}
    if eval_every is not None:
        changes["eval_every"] = eval_every
    if args.checkpoint_interval is not None:
        if not args.checkpoint_interval > 0:
            raise ValueError(f"--checkpoint-interval: expected seconds > 0, got "
                             f"{args.checkpoint_interval}")
        changes["checkpoint_interval"] = args.checkpoint_interval
    spec = dataclasses.replace(spec, **changes)

    max_connections = max_connections_of(args)
    if max_connections is not None and max_connections < 1:
        raise ValueError(f"--max-connections: expected a number >= 1, got {max_connections}")

    def configure(config: Any) -> Any:
        if max_connections is not None:
            config = dataclasses.replace(config, limits=dataclasses.replace(
                config.limits, max_connections=max_connections))
        if num_samples is None:
            return config
        return dataclasses.replace(config, data=dataclasses.replace(
            config.data, num_samples=num_samples, test_fraction=test_fraction))
    return spec, configure


def max_connections_of(args: argparse.Namespace) -> int | None:
    """``--max-connections``, or its default: the config's (None) up to ``LARGE_SWARM``
    nodes, ``LARGE_SWARM_MAX_CONNECTIONS`` above."""
    if args.max_connections is not None:
        return int(args.max_connections)
    return LARGE_SWARM_MAX_CONNECTIONS if args.nodes > LARGE_SWARM else None


def lockstep_mode(args: argparse.Namespace) -> str:
    """``--lockstep`` with ``auto`` decided: batched for a large swarm, else off."""
    if args.lockstep == "auto":
        return "batched" if args.nodes > LARGE_SWARM else "off"
    return str(args.lockstep)


def handshake_mode(args: argparse.Namespace) -> str:
    """``--handshakes`` with ``auto`` decided: trusted for a large swarm, else noise."""
    if args.handshakes == "auto":
        return "trusted" if args.nodes > LARGE_SWARM else "noise"
    return str(args.handshakes)


def make_runners(args: argparse.Namespace) -> tuple[Any, Any]:
    """``runner_for(index)``, each node's train runner for ``--lockstep``, and the shared
    lock-step runner (None when off)."""
    from p2p.runtime.train_runner import InlineRunner

    mode = lockstep_mode(args)
    if mode == "off":
        return (lambda index: InlineRunner(args.compute_seconds)), None
    try:
        from p2p.simulation.lockstep import LockstepRunner  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise SwarmError(f"--lockstep {mode}: the lock-step runner "
                         "(p2p.simulation.lockstep) is not available in this tree") from None
    align = args.lockstep_align
    if not (align >= 0 and math.isfinite(align)):
        raise ValueError(f"--lockstep-align: expected seconds >= 0, got {align}")
    runner = LockstepRunner(args.compute_seconds, batched=mode == "batched", align=align)
    return (lambda index: runner), runner  # one object for all: it gathers the requests


def churn_events(args: argparse.Namespace, spec: SwarmSpec) -> list[ChurnEvent]:
    events: list[ChurnEvent] = []
    if args.churn_script is not None:
        events += load_churn_script(args.churn_script, spec.nodes)
    if args.churn:
        duration = spec.rounds * (args.compute_seconds + spec.round_interval)
        events += random_churn(spec.nodes, args.churn, duration, seed=spec.seed)
    return sorted(events)


def network_of(args: argparse.Namespace, seed: int) -> SimNetwork:
    latency = parse_distribution(args.latency, scale=1e-3, what="--latency")
    bandwidth = (None if args.bandwidth is None
                 else parse_distribution(args.bandwidth, scale=1e6 / 8, what="--bandwidth"))
    if not 0.0 <= args.loss <= 1.0:
        raise ValueError(f"--loss: expected a probability in [0, 1], got {args.loss}")
    jitter = args.connect_jitter
    if not (jitter >= 0 and math.isfinite(jitter)):
        raise ValueError(f"--connect-jitter: expected milliseconds >= 0, got {jitter}")
    return SimNetwork(seed=seed, latency=latency, bandwidth=bandwidth, message_loss=args.loss,
                      trusted_handshakes=handshake_mode(args) == "trusted",
                      connect_jitter=jitter * 1e-3)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the flags ask for, checked before anything runs."""

    spec: SwarmSpec
    configure: Any
    events: list[ChurnEvent]
    network: SimNetwork
    runner_for: Any
    max_seconds: float
    lockstep: Any = None  # the shared lock-step runner (its stats go in the JSON)
    in_process_peers: bool = True  # --descriptor-checks in-process (Simulation's option)


def plan_simulation(args: argparse.Namespace) -> Plan:
    """Read and check the flags; SwarmError or ValueError name what is wrong."""
    if args.compute_seconds < 0 or not math.isfinite(args.compute_seconds):
        raise ValueError(f"--compute-seconds: expected a number >= 0, got {args.compute_seconds}")
    spec, configure = spec_and_configure(args)
    limit = args.max_seconds or (
        spec.rounds * (args.compute_seconds + spec.round_interval) * 4 + 150.0)
    runner_for, lockstep = make_runners(args)
    return Plan(spec, configure, churn_events(args, spec), network_of(args, spec.seed),
                runner_for, limit, lockstep,
                in_process_peers=args.descriptor_checks == "in-process")


def simulate(args: argparse.Namespace, plan: Plan, root: Path, *,
             quiet: bool = True) -> dict[str, Any]:
    """Run the simulation ``plan`` describes in ``root``; the JSON document."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from p2p.simulation.collector import CollectorTuning
    from p2p.simulation.host import SimProgress, Simulation
    from p2p.testing.clock import virtual_clock

    spec = plan.spec
    console = Console(stderr=True)
    progress = Progress(TextColumn("{task.description}"), BarColumn(),
                        TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                        console=console, disable=quiet or not console.is_terminal)
    task = progress.add_task("rounds", total=spec.rounds * spec.nodes, info="")

    logged = [0]  # tenths of the rounds reported so far (when there is no live display)
    trusted = " | trusted handshakes" if plan.network.trusted_handshakes else ""

    def show(p: SimProgress) -> None:
        acc = "no eval yet" if p.mean_accuracy is None else f"mean acc {100 * p.mean_accuracy:.1f}%"
        info = f"{acc} | {p.live} up | t={p.simulated_seconds:.1f}s simulated{trusted}"
        progress.update(task, completed=p.rounds_done, info=info)
        tenth = 10 * p.rounds_done // max(1, p.rounds_total)
        if progress.disable and not quiet and tenth > logged[0]:
            logged[0] = tenth  # a line per tenth of the rounds, for logs of long runs
            print(f"{10 * tenth}% of the rounds: {info}, {time.perf_counter() - started:.0f} s "
                  "wall", file=sys.stderr, flush=True)

    started = time.perf_counter()
    collector = CollectorTuning()
    sim = Simulation(spec, root, plan.network, runner_for=plan.runner_for, churn=plan.events,
                     sample_every=args.sample_every, max_seconds=plan.max_seconds,
                     on_sample=show, configure=plan.configure,
                     in_process_peers=plan.in_process_peers, on_started=collector.freeze)
    started, cpu = time.perf_counter(), time.process_time()
    with progress, collector:
        trio.run(sim.run, clock=virtual_clock())
    summary = sim.summary(time.perf_counter() - started)
    # CPU seconds of this process: on a shared machine, closer to an idle machine's wall time
    summary["cpu_seconds"] = time.process_time() - cpu
    summary["spec"] = dataclasses.asdict(spec)
    handshakes = handshake_mode(args)
    summary["simulation"] = {
        "compute_seconds": args.compute_seconds, "lockstep": lockstep_mode(args),
        "lockstep_align": None if plan.lockstep is None else plan.lockstep.align,
        "latency_ms": args.latency, "bandwidth_mbits": args.bandwidth, "loss": args.loss,
        "connect_jitter_ms": args.connect_jitter,
        "admission_log": "admission refusals counted (network.admission), not logged one "
        "per connection (daemons log them, rate-limited per source); other lines a peer "
        "causes are logged as daemons log them",
        "churn": args.churn, "churn_script": None if args.churn_script is None
        else str(args.churn_script), "handshakes": handshakes,
        "handshake_note": "Noise XX handshake with Ed25519 signatures, as daemons"
        if handshakes == "noise" else "trusted: the handshake's messages and identity checks "
        "(self-connection, expected node id, swarm key, cipher) without X25519 or Ed25519: "
        "every identity is a simulated node's",
        "signature_checks": "every peer-sampling descriptor checked (no cache)",
        "descriptor_checks": args.descriptor_checks,
        "descriptor_checks_note": "in-process: peer sampling's in_process option; the fields "
        "of a descriptor received from another simulated node are not validated again "
        "(daemons check them all)" if args.descriptor_checks == "in-process"
        else "full: every field of every received descriptor checked, as daemons",
        "streams": "in-memory stream pairs (SimStream): every frame's bytes written and read "
        "in order, delayed and lost as the links say; no socket, no kernel buffer",
        # the simulation's transports get no swarm key (as daemons started without one)
        "sealing": "none: no swarm key, so frames are not sealed (as between daemons "
        "without one)",
        "max_connections": max_connections_of(args) or "the config's (limits.max_connections, "
        "as daemons)",
        "max_connections_note": "set by --max-connections" if args.max_connections is not None
        else f"default above {LARGE_SWARM} nodes (daemons: 64): session slots ran out at 64"
        if args.nodes > LARGE_SWARM else "the config's, as daemons",
        "task": spec.task, "test_samples": args.test_samples,
        "garbage_collector": collector.as_dict(),
    }
    if plan.lockstep is not None:
        summary["lockstep"] = plan.lockstep.stats.as_dict()
    return summary


def plot(summary: dict[str, Any], path: Path, spec: SwarmSpec) -> None:
    """Mean and worst accuracy over simulated time, and the live nodes."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install -e '.[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = [s for s in summary["series"] if s["mean_accuracy"] is not None]
    fig, ax = plt.subplots(figsize=(7, 4))
    if series:
        t = [s["time"] for s in series]
        ax.plot(t, [s["mean_accuracy"] for s in series], label="mean accuracy")
        ax.plot(t, [s["worst_accuracy"] for s in series], label="worst accuracy")
    ax.set_xlabel("simulated seconds")
    ax.set_ylabel("test accuracy")
    ax.set_title(run_title("simulation", spec), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def report(summary: dict[str, Any]) -> str:
    """The summary lines printed at the end."""
    spec = summary["spec"]
    rows = [r for r in summary["nodes"] if r.get("accuracy") is not None]
    lines = []
    if rows:
        accs = sorted(r["accuracy"] for r in rows)
        lines.append(f"accuracy over {len(rows)} nodes: mean {100 * summary['mean_accuracy']:.1f}%"
                     f", median {100 * statistics.median(accs):.1f}%, worst "
                     f"{100 * summary['worst_accuracy']:.1f}%, best {100 * accs[-1]:.1f}%")
    sent = summary["mean_bytes_sent"]
    pushes = [r.get("pushes_sent", 0) for r in summary["nodes"]]
    views = [r["view"]["mean"] for r in summary["nodes"]
             if r.get("view") and r["view"]["mean"] is not None]
    lines.append(f"per node: {0 if sent is None else sent / 1e6:.2f} MB push-sum payload sent, "
                 f"{sum(pushes) / max(1, len(pushes)):.0f} pushes, mean view "
                 f"{sum(views) / max(1, len(views)):.1f} peers")
    net = summary["network"]
    lines.append(f"network: {net['messages']} messages, {net['bytes'] / 1e6:.1f} MB, "
                 f"{net['messages_dropped']} lost, {net['connections']} connections opened "
                 f"({net['reconnections']} to a peer dialled before), "
                 f"{len(summary['churn'])} churn events")
    refused = net.get("admission") or {}
    if refused:
        lines.append("incoming connections refused or closed by admission rule: " + ", ".join(
            f"{rule} {count}" for rule, count in refused.items()))
    sim = summary.get("simulation", {})
    if sim:
        slots = sim.get("max_connections")
        lines.append(f"simulation: handshakes {sim['handshakes']}, lock-step "
                     f"{sim['lockstep']}, evaluation every {spec['eval_every']} rounds, "
                     f"max connections {slots if isinstance(slots, int) else 'as the config'}, "
                     f"descriptor checks {sim.get('descriptor_checks', 'full')}")
    steady = summary.get("steady_state")
    if steady:
        lines.append(f"steady state: {steady['ms_per_node_round']:.2f} ms CPU per node-round "
                     f"({steady['cpu_seconds']:.1f} s over {steady['node_rounds']} node-rounds, "
                     "start-up and the last rounds left out)")
    lines.append(f"{spec['nodes']} nodes x {spec['rounds']} rounds, task {spec['task']}, scheme "
                 f"{spec['scheme']}: {summary['simulated_seconds']:.1f} s simulated in "
                 f"{summary['wall_seconds']:.1f} s wall ({summary['cpu_seconds']:.1f} s CPU)" + (
                     " (TIMED OUT: not every node finished)" if summary["timed_out"] else ""))
    return "\n".join(lines)


def gossip_only_main(argv: list[str]) -> int:
    try:
        from p2p.simulation.gossip_only import (  # type: ignore[import-not-found,unused-ignore]
            add_gossip_only_arguments,
            run_gossip_only,
        )
    except ImportError:
        print("--gossip-only: the gossip-only mode (p2p.simulation.gossip_only) is not "
              "available in this tree", file=sys.stderr)
        return 2
    p = argparse.ArgumentParser(description="gossip-only simulation (no training)")
    p.add_argument("--gossip-only", action="store_true")
    p.add_argument("--json", type=Path, metavar="PATH", help="write every figure as JSON")
    add_gossip_only_arguments(p)
    args = p.parse_args(argv)
    doc = run_gossip_only(args)
    print(json.dumps({k: v for k, v in doc.items() if not isinstance(v, list | dict)}))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--gossip-only" in argv:
        return gossip_only_main(argv)
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        plan = plan_simulation(args)
    except (SwarmError, ValueError, OSError) as exc:
        print(f"simulation not run: {exc}", file=sys.stderr)
        return 2
    if args.keep:
        root = Path(tempfile.mkdtemp(prefix="simulate-", dir=args.workdir))
        summary = simulate(args, plan, root, quiet=args.quiet)
        print(f"data directories kept in {root}", file=sys.stderr)
    else:
        with tempfile.TemporaryDirectory(prefix="simulate-", dir=args.workdir) as tmp:
            summary = simulate(args, plan, Path(tmp), quiet=args.quiet)
    print(report(summary))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    if args.plot:
        plot(summary, args.plot, plan.spec)
    return 1 if summary["timed_out"] else 0


if __name__ == "__main__":
    sys.exit(main())
