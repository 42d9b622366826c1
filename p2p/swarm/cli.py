"""Run a local swarm of real gossip-learning daemons on any task.

Each node is a separate ``p2p run`` process on 127.0.0.1 with its own data
directory and label permutation; they find each other from node 0's address,
train, gossip their partial models, and are watched through their admin
sockets. At the end: a per-node table, a summary line, optional JSON and plot.

    python scripts/swarm.py                       # 8 nodes, partial scheme
    python scripts/swarm.py --scheme full --nodes 16 --rounds 100
    python scripts/swarm.py --semi-local auto --nodes 12 --permuted "id,8:9,7:8,7:8:9,7:9:8,7:9"
    python scripts/swarm.py --config node.toml --nodes 4   # every daemon starts from node.toml

Flags (``--config`` templates, ``--semi-local``, tasks, permutations, output):
docs/guide/operations.md ("A local swarm").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gossip import ENCODINGS
from gossip.wave_rule import AUTO
from learner.tasks import TASKS
from learner.train_config import OPTIMIZERS
from p2p.cli.dashboard_args import DEFAULT_LISTEN
from p2p.cli.fit import fit_table
from p2p.cli.render import make_console
from p2p.config import (
    CLUSTERING_STARTS,
    NODE_PRIVACY_MODES,
    ClusteringConfig,
    ConfigError,
    check_task_fit,
    load_config,
)
from p2p.dashboard import Dashboard, DashboardThread, SocketSource
from p2p.dashboard.cli import DashboardUsage, check_listen
from p2p.strategies import STRATEGIES
from p2p.swarm.launcher import Swarm
from p2p.swarm.plotting import MAX_NODE_LINES, node_colours, run_title, save_figure
from p2p.swarm.spec import (
    ALL_LOCAL_STRATEGIES,
    AUTO_ROUNDS,
    GROUPINGS,
    SwarmError,
    SwarmSpec,
    default_permutations,
    load_template,
    node_config,
    spec_from_template,
)
from p2p.wire.listen import ListenError


def parse_permuted(text: str | None, nodes: int) -> tuple[str | None, ...]:
    """``"8:9,id"`` cycles over the nodes: node i gets item i mod len (``id`` = none).

    An item ``SPEC*N`` stands for N consecutive items ``SPEC``, so that groups of
    different sizes are easy to write: ``"id*4,8:9*4,7:8*2,7:9,7:8:9"`` on 12 nodes
    gives nodes 0-3 the identity, 4-7 ``8:9``, 8-9 ``7:8``, 10 ``7:9`` and 11 ``7:8:9``.
    """
    if text is None:
        return default_permutations(nodes)
    items: list[str] = []
    for raw in (text.split(",") if text.strip() else ["id"]):
        item, star, count = raw.strip().partition("*")
        if star:
            try:
                times = int(count)
            except ValueError:
                times = 0
            if times < 1:
                raise SwarmError(f"--permuted: {raw.strip()!r}: expected SPEC*N with N an "
                                 "integer >= 1")
            items += [item.strip()] * times
        else:
            items.append(item)
    return tuple(None if items[i % len(items)] in ("", "id") else items[i % len(items)]
                 for i in range(nodes))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=8, help="number of daemons (default 8)")
    p.add_argument("--rounds", type=int,
                   help=f"training rounds per node (default 60; {AUTO_ROUNDS} with "
                        "--semi-local auto: give the same to a run it is compared with)")
    p.add_argument("--scheme", choices=["local", "full", "partial"], default="partial",
                   help="averaging level 0, 100 or 80 %% of each hidden layer (default partial)")
    p.add_argument("--strategy", choices=tuple(STRATEGIES),
                   help="strategy.name of every node (default: the config's, else "
                        "\"partial\"; docs/guide/strategies.md)")
    p.add_argument("--semi-local", nargs="?", const="manual", choices=GROUPINGS,
                   metavar="manual|auto",
                   help="80 %% global + 20 %% semi-local models: alone (or \"manual\"), a "
                        "semi-local model per permutation group, declared in the configs; "
                        "\"auto\": the nodes find their groups themselves ([clustering])")
    p.add_argument("--pretrain-rounds", type=int, metavar="N",
                   help="with --semi-local auto: rounds trained before the nodes compare "
                        "their networks (clustering.pretrain_rounds, default the node's: "
                        f"{ClusteringConfig().pretrain_rounds})")
    p.add_argument("--grouping-start", choices=CLUSTERING_STARTS,
                   help="with --semi-local auto: the semi-local models' first values "
                        "(clustering.start, default the node's: "
                        f"{ClusteringConfig().start})")
    p.add_argument("--public-size", type=int, metavar="N",
                   help="data.public_size: samples of the public split every node holds alike "
                        "(default: the task's; with --semi-local auto on digits, 300, carved "
                        "before the shards: give the same N to a run it is compared with)")
    p.add_argument("--permuted", metavar="SPECS",
                   help='label permutation per node, cycled: "8:9,id" (default: every second '
                        'node has 8 and 9 swapped); items use "|" for several cycles: "7:8|2:3"'
                        '; "SPEC*N" is N nodes in a row: "id*4,8:9*4,7:8*2,7:9,7:8:9"')
    p.add_argument("--privacy", choices=NODE_PRIVACY_MODES,
                   help='gossip.privacy (default none); "dp" and "masked+dp" train with DP-SGD')
    p.add_argument("--dp-noise", type=float, metavar="SIGMA",
                   help="dp.noise_multiplier (default 1.0 unless --dp-epsilon)")
    p.add_argument("--dp-clip", type=float, metavar="C", help="dp.clip_norm (default 1.0)")
    p.add_argument("--dp-epsilon", type=float, metavar="EPS",
                   help="dp.target_epsilon: derive the noise that spends it over --rounds")
    p.add_argument("--dp-budget", type=float, metavar="EPS",
                   help="dp.epsilon_budget: a node stops training before going past it")
    p.add_argument("--swarm-key", action="store_true", help="seal all traffic with a swarm key")
    p.add_argument("--seed", type=int, help="data and node seeds (default 0)")
    p.add_argument("--task", choices=TASKS, help="data task (default digits)")
    p.add_argument("--data-path", metavar="PATH", help="the .npz file or IDX directory "
                   "(tasks npz and idx)")
    p.add_argument("--network", metavar="SPEC",
                   help='network notation ("784=300=100=10", '
                        '"1x28x28=c16k5=pool2=c32k5=pool2=100=10") or a name the task knows '
                        '("mlp", "cnn"); default: the task\'s "mlp"')
    p.add_argument("--lr", type=float, help="learning rate (default 0.1)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, help="default: the node's (sgd)")
    p.add_argument("--batch-size", type=int, help="mini-batch size (default 16)")
    p.add_argument("--steps-per-round", type=int, help="SGD steps per round (default 10)")
    p.add_argument("--shift", type=int, metavar="PIXELS",
                   help="move each training image by up to PIXELS (networks on images; "
                        "default 0)")
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="a node config every daemon's config starts from (see above)")
    add_gossip_flags(p)
    p.add_argument("--keep", action="store_true", help="keep the data directories")
    p.add_argument("--workdir", type=Path, help="where to put data directories (default: tmp)")
    p.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds")
    p.add_argument("--startup-timeout", type=float, metavar="SECONDS",
                   help="seconds each daemon may take to answer on its admin socket "
                        "(default max(60, 10 x nodes); raise it on a loaded machine)")
    p.add_argument("--json", type=Path, metavar="PATH", help="write every figure as JSON")
    p.add_argument("--plot", type=Path, metavar="PATH", help="PNG of accuracy over time per node")
    p.add_argument("--quiet", action="store_true", help="no live progress display")
    p.add_argument("--dashboard", action="store_true",
                   help="serve a live page over the daemons while they run (prints its URL; "
                        "read-only; see `p2p dashboard`)")
    p.add_argument("--dashboard-listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"with --dashboard: where to serve it (default {DEFAULT_LISTEN}, "
                        "loopback only; port 0 = any free port)")
    return p


def open_dashboard(args: argparse.Namespace, swarm: Swarm) -> DashboardThread | None:
    """With ``--dashboard``: a page over the swarm's daemons, bound now (a taken port
    stops the launcher before any daemon starts); None without the flag."""
    if not args.dashboard:
        return None
    try:
        host, port = check_listen(args.dashboard_listen, allow_remote=False)
    except DashboardUsage as exc:
        raise SwarmError(str(exc).replace("--listen", "--dashboard-listen")) from None
    dashboard = Dashboard(lambda: [SocketSource(d.data_dir) for d in swarm.daemons])
    return DashboardThread(dashboard, host, port)


def epsilon_cell(row: dict) -> str:
    """A node's epsilon spent (``*``: it stopped training for its budget)."""
    privacy = row.get("privacy") or {}
    epsilon = privacy.get("epsilon")
    if epsilon is None:
        return "inf" if privacy else "-"
    return f"{epsilon:.2f}" + ("*" if privacy.get("budget_spent") else "")


def semi_local_label(spec: SwarmSpec) -> str:
    """`` + semi-local`` (manual groups) or `` + semi-local (groups found by the nodes)``."""
    if not spec.semi_local:
        return ""
    return " + semi-local" + (" (groups found by the nodes)" if spec.grouping == "auto" else "")


def _group_text(group: list[int] | None) -> str:
    return "-" if not group else "{" + ",".join(str(m) for m in group) + "}"


def groups_line(grouping: dict) -> str:
    """One line on the groups the nodes found: the partition, the rates against the
    permutation groups, and whether every node reports the same fingerprint."""
    found = " ".join(_group_text(g) for g in grouping["found"])
    nodes = len(grouping["per_node"])
    if grouping["fingerprints_agree"]:
        agreement = f"all {nodes} nodes report fingerprint {grouping['fingerprint'][:12]}"
    elif not grouping["agreed_nodes"]:
        phases = Counter(r["phase"] or "no answer" for r in grouping["per_node"])
        agreement = "NO node agreed on groups (phases: " + ", ".join(
            f"{phase} {count}" for phase, count in sorted(phases.items())) + ")"
    else:
        distinct = {r["fingerprint"] for r in grouping["per_node"] if r["fingerprint"]}
        agreement = (f"fingerprints DIFFER: {len(distinct)} distinct among the "
                     f"{grouping['agreed_nodes']} of {nodes} nodes that agreed")
    return (f"groups found: {found}; identification {grouping['identification']:.2f}, "
            f"differentiation {grouping['differentiation']:.2f} against the permutation "
            f"groups; {agreement}")


#: How the results table fits a narrow terminal (:func:`p2p.cli.fit.fit_table`).
RESULTS_FITTING: dict[str, Any] = {
    "drop": ("wire\nsent", "waves", "pushes\nrecv", "payload\nsent", "group", "rejected"),
    "short": {"rejected": "rej", "rounds": "rnds", "test\naccuracy": "test\nacc"},
    "wrap": ("group",),
}


def results_table(summary: dict) -> Table:
    t = Table(title="swarm results", title_justify="left")
    dp = any(r.get("privacy") for r in summary["nodes"])
    grouped = "grouping" in summary
    columns = ["node", "perm", *(["group"] if grouped else []), "test\naccuracy", "train\nloss",
               "rounds", "pushes\nsent", "pushes\nrecv", "rejected", "waves", "payload\nsent",
               "wire\nsent"]
    for col in columns + (["epsilon"] if dp else []):
        t.add_column(col, justify="right" if col not in ("perm", "group") else "left")
    for r in summary["nodes"]:
        acc = "-" if r["accuracy"] is None else f"{100 * r['accuracy']:.1f}%"
        loss = "-" if r["loss"] is None else f"{r['loss']:.3f}"
        cells = [str(r["node"]), r["permutation"],
                 *([_group_text(r.get("group"))] if grouped else []), acc, loss, str(r["round"]),
                 str(r["pushes_sent"]), str(r["pushes_received"]), str(r["pushes_rejected"]),
                 str(r.get("waves", "-")), f"{r['bytes_sent'] / 1e6:.2f} MB",
                 "-" if r.get("wire_bytes_sent") is None
                 else f"{r['wire_bytes_sent'] / 1e6:.2f} MB"]
        t.add_row(*cells, *([epsilon_cell(r)] if dp else []))
    if dp:
        t.caption = "epsilon: spent at the node's dp.delta; * = budget spent, training stopped"
        t.caption_justify = "left"
    return t


def plot(summary: dict, path: Path, spec: SwarmSpec) -> None:
    """Accuracy over time per node and the mean (bold); beyond MAX_NODE_LINES nodes,
    thin lines coloured by permutation group with each group's mean bold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 4.5))
    rows = [(r, [(t, a) for t, _, a in r["history"] if a is not None]) for r in summary["nodes"]]
    rows = [(r, pts) for r, pts in rows if pts]
    grouped = len(rows) > MAX_NODE_LINES
    groups = sorted({r["permutation"] for r, _ in rows})
    colours = node_colours(len(groups) if grouped else len(rows))
    grid = np.linspace(0, max((pts[-1][0] for _, pts in rows), default=1.0), 200)
    members: dict[str, list[np.ndarray]] = {}
    for i, (r, pts) in enumerate(rows):
        t, a = (np.array(v, dtype=float) for v in zip(*pts, strict=True))
        colour = colours[groups.index(r["permutation"])] if grouped else colours[i]
        ax.plot(t, a, color=colour, linewidth=0.8, alpha=0.45 if grouped else 0.9,
                label=None if grouped else f"node{r['node']} ({r['permutation']})")
        members.setdefault(r["permutation"] if grouped else "all", []).append(
            np.interp(grid, t, a, left=np.nan))
    for name, curves in members.items():
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # no node evaluated yet there
            mean = np.nanmean(np.vstack(curves), axis=0)
        ax.plot(grid, mean, color=colours[groups.index(name)] if grouped else "black",
                linewidth=2.6,
                label=f"{name}: mean of {len(curves)}" if grouped else "mean")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("test accuracy")
    ax.set_title(run_title("swarm", spec), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2 if len(members) + len(rows) > 8 else 1)
    fig.tight_layout()
    save_figure(fig, path)


def derived_settings(spec: SwarmSpec) -> list[str]:
    """One line per setting the script chose for the options given (what to pass to
    choose otherwise)."""
    config = node_config(spec, 0, Path("node0"), None)
    lines = []
    if spec.strategy in ALL_LOCAL_STRATEGIES:
        lines.append(f"strategy {spec.strategy}: no partial model declared (it shares whole "
                     f"models or none), data.public_size {config.data.public_size} "
                     "(--public-size N to change)")
    if spec.semi_local and spec.grouping == "auto" and spec.pretrain_rounds is None:
        pretrain = config.clustering.pretrain_rounds
        if pretrain < ClusteringConfig().pretrain_rounds:
            lines.append(f"--semi-local auto: pre-training {pretrain} of the {spec.rounds} "
                         "rounds, the rest trains the groups (--pretrain-rounds N to change)")
    return lines


def spec_from_args(args: argparse.Namespace) -> SwarmSpec:
    """The swarm the parsed flags ask for; with ``--config`` the file fills the flags left out.

    Raises SwarmError when a flag or the config is unusable, or the network
    does not fit the task (checked on node 0's config, before anything starts).
    """
    if args.nodes < 2:
        raise SwarmError("--nodes: expected at least 2")
    perms = tuple(p.replace("|", ",") if p else None
                  for p in parse_permuted(args.permuted, args.nodes))
    for flag, value in (("--pretrain-rounds", args.pretrain_rounds),
                        ("--grouping-start", args.grouping_start)):
        if value is not None and args.semi_local != "auto":
            raise SwarmError(f"{flag} goes with --semi-local auto")
    rounds = args.rounds
    if rounds is None and args.semi_local == "auto" and args.config is None:
        rounds = AUTO_ROUNDS  # pre-training, then the groups' training
    given = {"nodes": args.nodes, "rounds": rounds, "scheme": args.scheme,
             "semi_local": args.semi_local is not None, "grouping": args.semi_local,
             "pretrain_rounds": args.pretrain_rounds, "grouping_start": args.grouping_start,
             "public_size": args.public_size,
             "permutations": perms, "privacy": args.privacy,
             "dp_noise": args.dp_noise, "dp_clip": args.dp_clip, "dp_epsilon": args.dp_epsilon,
             "dp_budget": args.dp_budget,
             "swarm_key": args.swarm_key, "seed": args.seed, "task": args.task,
             "data_path": args.data_path, "layers": args.network, "lr": args.lr,
             "optimizer": args.optimizer, "batch_size": args.batch_size,
             "steps_per_round": args.steps_per_round, "shift": args.shift,
             "pushes_per_round": args.pushes_per_round, "exchange": args.exchange,
             "encoding": args.encoding, "max_in_flight": args.max_in_flight,
             "strategy": args.strategy}
    try:
        if args.config is not None:
            template = load_config(args.config)
            spec = spec_from_template(template, template=str(args.config.resolve()), **given)
        else:
            spec = SwarmSpec(**{k: v for k, v in given.items() if v is not None})
        check_task_fit(node_config(spec, 0, Path("node0"), None))
    except ConfigError as exc:
        raise SwarmError(str(exc)) from None
    return spec


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(stderr=True)
    try:
        spec = spec_from_args(args)
    except SwarmError as exc:
        console.print(f"[red]swarm not started:[/red] {exc}")
        return 2
    console.print(f"starting {spec.nodes} daemons on {network_label(spec)}, scheme {spec.scheme}"
                  f"{semi_local_label(spec)}, {spec.rounds} rounds")
    for line in derived_settings(spec):
        console.print(line)
    try:
        with Swarm(spec, workdir=args.workdir, keep=args.keep,
                   startup_timeout=args.startup_timeout) as swarm, \
                dashboard_running(open_dashboard(args, swarm), console):
            swarm.start()
            console.print(f"all daemons up (node0 at {swarm.daemons[0].address}); "
                          f"data in {swarm.workdir}")
            progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                                console=console, disable=args.quiet)
            with progress:
                task = progress.add_task("rounds", total=spec.rounds * spec.nodes, info="")

                def show(s: Swarm) -> None:
                    rounds = [min(d.status.get("round", 0), spec.rounds) for d in s.daemons]
                    accs: list[float] = [d.status["accuracy"] for d in s.daemons
                                         if d.status.get("accuracy") is not None]
                    sent = sum(m.get("pushes_sent", 0) for d in s.daemons
                               for m in d.models.get("models", []))
                    sent_bytes = sum(m.get("bytes_sent", 0) for d in s.daemons
                                     for m in d.models.get("models", []))
                    info = (f"mean acc {100 * sum(accs) / len(accs):.1f}% "
                            f"worst {100 * min(accs):.1f}%" if accs else "no eval yet")
                    info += f" | pushes {sent} | {sent_bytes / 1e6:.1f} MB"
                    if s.auto_groups():
                        agreed = sum(1 for d in s.daemons
                                     if (d.status.get("groups") or {}).get("phase") == "agreed")
                        info += f" | groups agreed on {agreed}/{spec.nodes}"
                    progress.update(task, completed=sum(rounds), info=info)

                swarm.run_until_done(timeout=args.timeout, on_poll=show)
            summary = swarm.summary()
            codes = swarm.stop()
            summary["exit_codes"] = codes
            summary["log_tails"] = [d.log_tail(3) for d in swarm.daemons]
            if args.keep:
                console.print(f"data directories kept in {swarm.workdir}")
    except KeyboardInterrupt:
        console.print("interrupted: every daemon was stopped")
        return 130
    except SwarmError as exc:
        console.print(f"[red]swarm failed:[/red] {exc}")
        return 1
    except ListenError as exc:
        console.print(f"[red]swarm not started:[/red] {exc}")
        return 3 if exc.in_use else 2
    out = make_console()  # the terminal's width; 120 columns when piped
    out.print(fit_table(results_table(summary), out.width, **RESULTS_FITTING))
    out.print(f"mean accuracy {100 * summary['mean_accuracy']:.1f}%, worst "
              f"{100 * summary['worst_accuracy']:.1f}%, {spec.nodes} nodes, scheme {spec.scheme}"
              f"{semi_local_label(spec)}, {spec.rounds} rounds x "
              f"{spec.steps_per_round} steps, {summary['wall_seconds']:.0f}s")
    rates = [r for r in summary["rounds_per_second"].values() if r is not None]
    if rates:
        out.print(f"rounds per second per daemon: median {sorted(rates)[len(rates) // 2]:.2f}, "
                  f"slowest {min(rates):.2f}, fastest {max(rates):.2f}")
    latency = summary["admin_status_ms"]
    if latency is not None:
        out.print(f"admin `status` round trip while training: median {latency['median']:.1f} ms, "
                  f"p95 {latency['p95']:.1f} ms, max {latency['max']:.1f} ms "
                  f"({latency['samples']:.0f} requests)")
    if "grouping" in summary:
        out.print(groups_line(summary["grouping"]))
    wire = summary.get("mean_wire_bytes_sent")
    out.print(f"sent per node: {summary['mean_bytes_sent'] / 1e6:.2f} MB of push-sum payload"
              + ("" if wire is None else f", {wire / 1e6:.2f} MB written to sockets"))
    epsilons = [r["epsilon"] for r in summary["nodes"] if r.get("epsilon") is not None]
    if epsilons:
        delta = (summary["nodes"][0].get("privacy") or {}).get("delta")
        out.print(f"DP-SGD: epsilon spent per node at delta {delta:g}: median "
                  f"{sorted(epsilons)[len(epsilons) // 2]:.2f}, largest {max(epsilons):.2f}")
    bad = [i for i, c in enumerate(summary["exit_codes"]) if c != 0]
    for i in bad:
        code = summary["exit_codes"][i]
        why = "killed after the grace period" if code is None else f"exit status {code}"
        out.print(f"[yellow]node{i} did not exit cleanly ({why}): {summary['log_tails'][i]}"
                  "[/yellow]")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    if args.plot:
        plot(summary, args.plot, spec)
    return 0 if not bad else 1



@contextlib.contextmanager
def dashboard_running(board: DashboardThread | None, console: Console) -> Iterator[None]:
    """Serve ``board`` (if any) while the block runs; say where."""
    if board is None:
        yield
        return
    console.print(f"dashboard: {board.start()}  (read-only; it stops with the swarm)")
    try:
        yield
    finally:
        board.stop()


def network_label(spec: SwarmSpec) -> str:
    """``task digits, network 64=48=32=10``, or the template's factories."""
    template = load_template(spec)
    data = (f"data {template.data.factory.text}" if template.data.factory is not None
            else f"task {spec.task}")
    model = (template.network.factory.text if template.network.factory is not None
             else spec.network().notation())
    return f"{data}, network {model}"


def pushes_per_round_flag(text: str) -> int | str:
    """``auto`` or a count >= 1: the value of ``--pushes-per-round``."""
    if text == AUTO:
        return AUTO
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f'expected "{AUTO}" or an integer >= 1, got {text!r}')
    return count


def add_gossip_flags(parser: argparse.ArgumentParser) -> None:
    """The command-line flags that set a swarm's gossip settings (each None: the node's)."""
    parser.add_argument("--exchange", choices=["push-pull", "push"],
                        help="gossip.exchange (default: the node's, push-pull)")
    parser.add_argument("--encoding", choices=list(ENCODINGS),
                        help="gossip.encoding of pushed values (default: the node's, f16)")
    parser.add_argument("--pushes-per-round", type=pushes_per_round_flag, metavar="auto|N",
                        help=f'gossip.pushes_per_round (default: the node\'s, "{AUTO}")')
    parser.add_argument("--max-in-flight", type=int, metavar="K",
                        help="gossip.max_in_flight (default: the node's)")


if __name__ == "__main__":
    raise SystemExit(main())
