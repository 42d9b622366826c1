"""A local swarm of real daemons: configs, launch, monitoring and results.

Used by ``scripts/swarm.py`` (and ``make swarm``), ``scripts/bench_swarm.py``
and the end-to-end test. Every daemon is a separate ``python -m p2p run``
process listening on 127.0.0.1; they find each other from a bootstrap address
and are watched through their admin sockets.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gossip import ENCODINGS
from gossip.wave_rule import AUTO
from learner.data_errors import DataError
from learner.errors import FieldError
from learner.grouping_metrics import differentiation_rate, identification_rate
from learner.permutations import parse_cycles
from learner.schemes import averaging_level, semi_local_scheme
from learner.spec import NetworkSpec, PartialModelSpec
from learner.tasks import get_task, resolve_network
from p2p.cli.admin_client import AdminClient, AdminClientError
from p2p.config import (
    ClusteringConfig,
    ConfigError,
    DPSection,
    GossipConfig,
    NodeConfig,
    generate_swarm_key,
    layer_sizes,
    load_config,
    render_config_toml,
    write_swarm_key,
)
from p2p.runtime.checkpoint import CheckpointStore

logger = logging.getLogger(__name__)

SCHEME_LEVELS = {"local": 0, "full": 100, "partial": 80}
#: How a semi-local swarm finds its groups: "manual" (one group per permutation,
#: declared in every config) or "auto" (the nodes find them: ``[clustering]``).
GROUPINGS = ("manual", "auto")
#: The global share of each hidden layer in a semi-local swarm (the papers' 80 %);
#: the semi-local model takes the rest.
SEMI_LOCAL_GLOBAL_LEVEL = 80
#: The public split automatic groups project on, for a task that carves none by
#: default (digits): samples taken before the shards are cut (so they shrink).
AUTO_PUBLIC_SIZE = 300
#: Rounds of a swarm with automatic groups when none are given: the networks must
#: have learned before they are compared (pre-training, 60 rounds), a second look
#: must fit when the first finds no structure (clustering.retries: at round 120),
#: and the groups need rounds after that to train their semi-local models.
AUTO_ROUNDS = 180
WIRE_BYTES_SENT = "transport.bytes_sent"  # node metrics: bytes written to sockets


class SwarmError(RuntimeError):
    """The swarm could not run; the message names the node and why."""


@dataclass(frozen=True)
class SwarmSpec:
    """What to run. ``permutations[i]`` is node i's label permutation (None: identity)."""

    nodes: int = 8
    rounds: int = 60
    scheme: str = "partial"  # local | full | partial
    semi_local: bool = False  # add semi-local models (80 % global + 20 % semi-local)
    # with semi_local: "manual" (a model per permutation group, declared in the configs)
    # or "auto" (80 % global, the nodes find their groups: clustering.mode = "auto")
    grouping: str = "manual"
    pretrain_rounds: int | None = None  # "auto": clustering.pretrain_rounds (None: default)
    grouping_start: str | None = None  # "auto": clustering.start (None: default)
    # data.public_size; None: the template's, or with "auto" on a task whose public
    # split is empty by default, AUTO_PUBLIC_SIZE
    public_size: int | None = None
    permutations: tuple[str | None, ...] = ()
    privacy: str = "none"  # gossip.privacy: none | masked | dp | masked+dp
    # [dp] settings for privacy "dp"/"masked+dp"; None keeps the template's (or default)
    dp_noise: float | None = None  # dp.noise_multiplier
    dp_clip: float | None = None  # dp.clip_norm
    dp_epsilon: float | None = None  # dp.target_epsilon (spent over `rounds`)
    dp_budget: float | None = None  # dp.epsilon_budget
    swarm_key: bool = False
    seed: int = 0
    task: str = "digits"  # a name of learner.tasks.TASKS
    data_path: str | None = None  # the .npz file or IDX directory (tasks npz and idx)
    # a network notation or a name the task knows ("mlp", "cnn"); None: the task's "mlp"
    layers: str | None = None
    lr: float = 0.1
    batch_size: int = 16
    optimizer: str | None = None  # None: the node's default (or the template's)
    shift: int = 0  # training.shift: pixels each training image may move (image networks)
    steps_per_round: int = 10
    round_interval: float = 0.05
    eval_every: int = 5
    shuffle_period: float = 0.3
    fanout: int = 1
    # None: the node's default (gossip section of p2p.config), so that the
    # swarm learns as a node started with defaults does
    pushes_per_round: int | str | None = None
    exchange: str | None = None
    encoding: str | None = None
    max_in_flight: int | None = None
    start_together: bool = True  # each node waits until it knows the others
    checkpoint_interval: float = 30.0
    # a node config every daemon's config starts from (see node_config)
    template: str | None = None
    # strategy.name of every node ([strategy]; p2p/strategy); None: the template's
    strategy: str | None = None

    def network(self) -> NetworkSpec:
        """The network every node runs: `layers` read as a notation or a task's network name."""
        try:
            return NetworkSpec.parse(resolve_network(self.task, self.layers))
        except FieldError as exc:
            raise SwarmError(f"--network: {exc.detail if isinstance(exc, DataError) else exc}"
                             ) from None

    def permutation(self, index: int) -> str | None:
        return self.permutations[index] if index < len(self.permutations) else None

    def groups(self) -> list[int]:
        """Permutation group of every node (nodes with the same permutation share one)."""
        seen: dict[str | None, int] = {}
        return [seen.setdefault(self.permutation(i), len(seen)) for i in range(self.nodes)]


def default_permutations(nodes: int, every: int = 2, swap: str = "8:9") -> tuple[str | None, ...]:
    """Every ``every``-th node (1, 3, ...) has ``swap`` applied, as in the papers' tasks."""
    return tuple(swap if i % every == every - 1 else None for i in range(nodes))


def node_models(spec: SwarmSpec, index: int) -> tuple[PartialModelSpec, ...]:
    """The partial models node ``index`` declares under the spec's scheme."""
    if spec.scheme not in SCHEME_LEVELS:
        raise SwarmError(f"--scheme: expected one of {', '.join(SCHEME_LEVELS)}, "
                         f"got {spec.scheme!r}")
    network = spec.network()
    if spec.grouping not in GROUPINGS:
        raise SwarmError(f"--semi-local: expected one of {', '.join(GROUPINGS)}, "
                         f"got {spec.grouping!r}")
    if spec.semi_local:
        if spec.scheme != "partial":
            raise SwarmError("--semi-local goes with --scheme partial")
        if spec.grouping == "auto":  # the semi-local share stays local until groups are found
            return tuple(averaging_level(network, SEMI_LOCAL_GLOBAL_LEVEL))
        declared = semi_local_scheme(network, "global80+semi20", spec.groups()[index],
                                     global_level=SEMI_LOCAL_GLOBAL_LEVEL)
    else:
        declared = averaging_level(network, SCHEME_LEVELS[spec.scheme])
    return tuple(declared)


def load_template(spec: SwarmSpec) -> NodeConfig:
    """The spec's template config, or the node's defaults when it has none."""
    if spec.template is None:
        return NodeConfig()
    try:
        return load_config(spec.template)
    except ConfigError as exc:
        raise SwarmError(f"--config: {exc}") from None


def spec_from_template(config: NodeConfig, **given: Any) -> SwarmSpec:
    """A spec taking the task, network, training and gossip settings of ``config`` (the
    template), except those in ``given`` that are not None (command-line flags win over
    the template). Pass ``template=`` the file's path so that every node starts from it."""
    t, d = config.training, config.data
    values: dict[str, Any] = {
        "task": d.task, "data_path": None if d.path is None else str(d.path), "seed": d.seed,
        "layers": config.network.spec.notation(),
        "lr": t.lr, "batch_size": t.batch_size, "optimizer": t.optimizer, "shift": t.shift,
        "steps_per_round": t.steps_per_round, "eval_every": t.eval_every,
        "round_interval": t.round_interval, "fanout": config.gossip.fanout,
        "privacy": config.gossip.privacy,
        "checkpoint_interval": config.checkpoint.interval,
    }
    if t.rounds > 0:  # 0 (train forever) would never end a swarm run
        values["rounds"] = t.rounds
    values.update({k: v for k, v in given.items() if v is not None})
    return SwarmSpec(**values)


def node_config(spec: SwarmSpec, index: int, data_dir: Path,
                swarm_key_file: Path | None) -> NodeConfig:
    """The generated configuration of node ``index``.

    It starts from the spec's template (or the node's defaults) and sets what
    differs per node (name, data directory, seed, data shard, permutation and
    declared models) and the spec's task, network, training and gossip
    settings; every other key of the template is kept.
    """
    base = load_template(spec)
    perm = spec.permutation(index)
    training: dict[str, Any] = {
        "lr": spec.lr, "batch_size": spec.batch_size, "steps_per_round": spec.steps_per_round,
        "shift": spec.shift, "rounds": spec.rounds, "eval_every": spec.eval_every,
        "round_interval": spec.round_interval,
        # start together: wait until (almost) everyone is known
        "min_peers": min(spec.nodes - 1, 20) if spec.start_together else 0,
        "peer_wait": 120.0}
    if spec.optimizer is not None:
        training["optimizer"] = spec.optimizer
    try:
        return dataclasses.replace(
            base,
            node=dataclasses.replace(base.node, name=f"node{index}", data_dir=data_dir,
                                     seed=spec.seed * 1000 + index),
            network=dataclasses.replace(base.network, layers=layer_sizes(spec.network())),
            models=node_models(spec, index),
            training=dataclasses.replace(base.training, **training),
            gossip=gossip_config(spec, base.gossip),
            dp=dp_section(spec, base.dp),
            peer_sampling=dataclasses.replace(base.peer_sampling, period=spec.shuffle_period),
            data=dataclasses.replace(
                base.data, task=spec.task,
                path=Path(spec.data_path) if spec.data_path else base.data.path,
                node_index=index, num_nodes=spec.nodes, permutation=parse_cycles(perm),
                seed=spec.seed, public_size=public_size(spec, base.data.public_size)),
            security=dataclasses.replace(base.security, swarm_key_file=swarm_key_file)
            if swarm_key_file is not None or spec.template is None else base.security,
            checkpoint=dataclasses.replace(base.checkpoint, interval=spec.checkpoint_interval),
            clustering=clustering_config(spec, base.clustering),
            strategy=base.strategy if spec.strategy is None
            else dataclasses.replace(base.strategy, name=spec.strategy),
        )
    except ConfigError as exc:
        raise SwarmError(f"node{index}'s config: {exc}") from None


def public_size(spec: SwarmSpec, base: int | None) -> int | None:
    """``data.public_size`` of every node: the spec's; else ``base`` (the template's),
    unless automatic groups need a public split the task would not carve
    (:data:`AUTO_PUBLIC_SIZE`)."""
    if spec.public_size is not None:
        return spec.public_size
    if base is None and spec.semi_local and spec.grouping == "auto":
        try:
            empty = get_task(spec.task).public_size == 0
        except DataError:
            return base  # an unknown task is reported by the config's own check
        if empty:
            return AUTO_PUBLIC_SIZE
    return base


def clustering_config(spec: SwarmSpec, base: ClusteringConfig | None = None) -> ClusteringConfig:
    """``[clustering]`` of every node: ``base`` (the template's) unless the spec asks for
    automatic groups; then mode "auto", the semi-local share left by the 80 % global model,
    and the swarm's size as the node count that completes the table."""
    base = base or ClusteringConfig()
    if not (spec.semi_local and spec.grouping == "auto"):
        return base
    changes: dict[str, Any] = {"mode": "auto", "share": (100 - SEMI_LOCAL_GLOBAL_LEVEL) / 100,
                               "expected_nodes": spec.nodes}
    if spec.pretrain_rounds is not None:
        changes["pretrain_rounds"] = spec.pretrain_rounds
    if spec.grouping_start is not None:
        changes["start"] = spec.grouping_start
    return dataclasses.replace(base, **changes)


def gossip_config(spec: SwarmSpec, base: GossipConfig | None = None) -> GossipConfig:
    """The spec's gossip settings over ``base``; those it leaves at None keep ``base``'s
    (the node's defaults when there is no base)."""
    chosen: dict[str, Any] = {"pushes_per_round": spec.pushes_per_round,
                              "exchange": spec.exchange, "encoding": spec.encoding,
                              "max_in_flight": spec.max_in_flight}
    return dataclasses.replace(base or GossipConfig(), fanout=spec.fanout, privacy=spec.privacy,
                               **{k: v for k, v in chosen.items() if v is not None})


def dp_section(spec: SwarmSpec, base: DPSection | None = None) -> DPSection:
    """The spec's DP-SGD settings over ``base`` (the template's ``[dp]``). A noise
    multiplier and a target epsilon exclude each other: giving one drops the other's
    value from the base."""
    if spec.dp_noise is not None and spec.dp_epsilon is not None:
        raise SwarmError("--dp-noise and --dp-epsilon: give one of them (the noise is derived "
                         "from the target epsilon)")
    changes: dict[str, Any] = {}
    if spec.dp_clip is not None:
        changes["clip_norm"] = spec.dp_clip
    if spec.dp_budget is not None:
        changes["epsilon_budget"] = spec.dp_budget
    if spec.dp_noise is not None:
        changes.update(noise_multiplier=spec.dp_noise, target_epsilon=None)
    if spec.dp_epsilon is not None:
        changes.update(target_epsilon=spec.dp_epsilon, noise_multiplier=None)
    return dataclasses.replace(base or DPSection(), **changes)


def partition(labels: Sequence[int]) -> list[list[int]]:
    """Node indexes grouped by label (``labels[i]`` is node i's), groups in order of first node."""
    groups: dict[int, list[int]] = {}
    for node, label in enumerate(labels):
        groups.setdefault(label, []).append(node)
    return list(groups.values())


def grouping_summary(node_ids: Sequence[str | None], reports: Sequence[Mapping[str, Any] | None],
                     truth: Sequence[int]) -> dict[str, Any]:
    """The groups the nodes found, scored against the permutation groups.

    ``node_ids[i]`` is node i's id (hex, from ``status``), ``reports[i]`` its answer to
    the admin command ``groups`` (None: it gave none) and ``truth[i]`` its permutation
    group. Each node's own group becomes a list of node indexes; the found partition
    is the distinct own groups (a node without one, e.g. not agreed yet, counts as
    alone; should views differ, a node stays in the group of the first node that
    lists it), and ``identification`` / ``differentiation`` are the thesis' pair rates of
    that partition against the permutation groups. ``fingerprints_agree``: every node
    agreed on one and the same fingerprint.
    """
    index = {node_id: i for i, node_id in enumerate(node_ids) if node_id}
    per_node: list[dict[str, Any]] = []
    for i, report in enumerate(reports):
        report = report or {}
        own = report.get("own") if report.get("phase") == "agreed" else None
        members = own.get("members") if isinstance(own, Mapping) else None
        group = (sorted(index[m] for m in members if m in index)
                 if isinstance(members, list) else None)
        per_node.append({"node": i, "phase": report.get("phase"), "group": group,
                         "model": own.get("model") if isinstance(own, Mapping) else None,
                         "fingerprint": report.get("fingerprint"),
                         "peers_agreeing": report.get("peers_agreeing"),
                         "disagreements": report.get("disagreements"),
                         "attempt": report.get("attempt")})
    found: list[list[int]] = []
    placed: set[int] = set()
    for row in per_node:
        group = row["group"] or [row["node"]]
        if row["node"] in placed:
            continue
        group = [m for m in group if m not in placed] or [row["node"]]
        found.append(group)
        placed.update(group)
    expected = partition(truth)
    fingerprints = {row["fingerprint"] for row in per_node}
    agree = len(fingerprints) == 1 and None not in fingerprints and all(
        row["phase"] == "agreed" for row in per_node)
    return {
        "per_node": per_node,
        "found": sorted(found),
        "truth": expected,
        "identification": identification_rate(found, expected),
        "differentiation": differentiation_rate(found, expected),
        "fingerprints_agree": agree,
        "fingerprint": next(iter(fingerprints)) if agree else None,
        "agreed_nodes": sum(1 for row in per_node if row["phase"] == "agreed"),
    }


def rounds_per_second(history: Sequence[tuple[float, int, float | None]]) -> float | None:
    """Training rounds per second between a node's first and last poll that saw a round."""
    seen = [(t, r) for t, r, _ in history if r > 0]
    if len(seen) < 2 or seen[-1][0] <= seen[0][0]:
        return None
    return (seen[-1][1] - seen[0][1]) / (seen[-1][0] - seen[0][0])


def latency_summary(seconds: Sequence[float]) -> dict[str, float] | None:
    """Median, 95th percentile and largest of admin round trips, in milliseconds."""
    if not seconds:
        return None
    ms = np.asarray(seconds) * 1000.0
    return {"samples": float(ms.size), "median": float(np.median(ms)),
            "p95": float(np.percentile(ms, 95)), "max": float(ms.max())}


def groups_phase(status: Mapping[str, Any]) -> str | None:
    """The automatic grouping phase a node's ``status`` shows (None: clustering off)."""
    groups = status.get("groups")
    return groups.get("phase") if isinstance(groups, Mapping) else None


def budget_spent(status: dict[str, Any]) -> bool:
    """Whether a node's ``status`` says it stopped training for its epsilon budget."""
    privacy = status.get("privacy")
    return isinstance(privacy, dict) and privacy.get("budget_spent") is True


#: The directory holding the packages this process imported (p2p, gossip, ...).
_TREE = str(Path(__file__).resolve().parent.parent)


def daemon_environment(base: Mapping[str, str]) -> dict[str, str]:
    """The environment of a swarm's daemon: ``base`` with one torch thread, and the
    tree this process runs from first on ``PYTHONPATH``, so the daemons run the
    code that wrote their configs (not whatever ``python -m p2p`` would find first,
    e.g. another checkout's editable install when comparing two trees)."""
    path = base.get("PYTHONPATH")
    return dict(base, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                PYTHONPATH=_TREE if not path else _TREE + os.pathsep + path)


@dataclass
class Daemon:
    """One running node process."""

    index: int
    data_dir: Path
    config_path: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    address: str | None = None
    status: dict[str, Any] = field(default_factory=dict)
    models: dict[str, Any] = field(default_factory=dict)
    history: list[tuple[float, int, float | None]] = field(default_factory=list)
    # seconds each `status` request of the watcher took, from connect to answer
    admin_latency: list[float] = field(default_factory=list)
    down: bool = False  # killed on purpose (Swarm.kill): not polled until restarted

    @property
    def client(self) -> AdminClient:
        return AdminClient.for_data_dir(self.data_dir, timeout=5.0)

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])


class Swarm:
    """Starts, watches and stops the daemons of one :class:`SwarmSpec`.

    Use as a context manager: leaving it stops every daemon (SIGTERM, then
    SIGKILL after a grace period) and removes the work directory unless
    ``keep``.
    """

    def __init__(self, spec: SwarmSpec, *, workdir: Path | None = None, keep: bool = False,
                 startup_timeout: float | None = None) -> None:
        self.spec = spec
        self.keep = keep
        # every daemon imports torch: on 2 cores that is a few seconds each
        self.startup_timeout = startup_timeout or max(120.0, 10.0 * spec.nodes)
        self._own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="p2p-swarm-"))
        self.daemons: list[Daemon] = []
        self.started_at = time.monotonic()

    # -------------------------------------------------------------- lifecycle

    def __enter__(self) -> Swarm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if not self.keep and self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _write_configs(self) -> None:
        key_file = None
        if self.spec.swarm_key:
            key_file = self.workdir / "swarm.key"
            write_swarm_key(key_file, generate_swarm_key())
        for i in range(self.spec.nodes):
            data_dir = self.workdir / f"node{i}"
            data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # a node refuses others'
            config_path = self.workdir / f"node{i}.toml"
            config_path.write_text(render_config_toml(
                node_config(self.spec, i, data_dir, key_file)))
            self.daemons.append(Daemon(i, data_dir, config_path, self.workdir / f"node{i}.log"))

    def _spawn(self, d: Daemon, bootstrap: Sequence[str]) -> None:
        cmd = [sys.executable, "-m", "p2p", "run", "--config", str(d.config_path),
               "--data-dir", str(d.data_dir), "--listen", "127.0.0.1:0"]
        if bootstrap:
            cmd += ["--bootstrap", ",".join(bootstrap)]
        env = daemon_environment(os.environ)
        with open(d.log_path, "ab") as log:
            d.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)

    def _wait_ready(self, d: Daemon, deadline: float) -> None:
        while time.monotonic() < deadline:
            if d.process is not None and d.process.poll() is not None:
                raise SwarmError(f"node{d.index} exited at start with status "
                                 f"{d.process.returncode}: {d.log_tail()}")
            try:
                status = d.client.request("status")
            except AdminClientError:
                time.sleep(0.1)
                continue
            if status.get("addresses"):
                d.address = status["addresses"][0]
                d.status = status
                return
            time.sleep(0.1)
        raise SwarmError(f"node{d.index} did not answer on its admin socket within "
                         f"{self.startup_timeout:.0f}s: {d.log_tail()}")

    def start(self) -> None:
        """Start node 0, then every other node bootstrapping from it."""
        self._write_configs()
        first, rest = self.daemons[0], self.daemons[1:]
        deadline = time.monotonic() + self.startup_timeout
        self._spawn(first, [])
        self._wait_ready(first, deadline)
        for d in rest:
            self._spawn(d, [first.address or ""])
        for d in rest:
            self._wait_ready(d, deadline)
        self.started_at = time.monotonic()

    def stop(self, grace: float = 10.0) -> list[int | None]:
        """Stop every daemon; returns their exit codes (None: had to be killed)."""
        for d in self.daemons:
            if d.process is not None and d.process.poll() is None:
                d.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        codes: list[int | None] = []
        for d in self.daemons:
            if d.process is None:
                codes.append(None)
                continue
            try:
                codes.append(d.process.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                logger.warning("node%d did not stop within %.0fs; killing it", d.index, grace)
                os.killpg(d.process.pid, signal.SIGKILL)
                d.process.wait()
                codes.append(None)
        return codes

    # -------------------------------------------------------------- watching

    def poll(self) -> None:
        """Refresh every daemon's status and models; raise if one died."""
        now = time.monotonic() - self.started_at
        for d in self.daemons:
            if d.down:
                continue
            if d.process is not None and d.process.poll() is not None:
                raise SwarmError(f"node{d.index} died with status {d.process.returncode}: "
                                 f"{d.log_tail()}")
            try:
                asked = time.perf_counter()
                d.status = d.client.request("status")
                d.admin_latency.append(time.perf_counter() - asked)
                d.models = d.client.request("models")
            except AdminClientError as exc:
                raise SwarmError(f"node{d.index} stopped answering its admin socket: "
                                 f"{exc}") from exc
            d.history.append((now, int(d.status.get("round", 0)), d.status.get("accuracy")))

    def finished(self) -> bool:
        """Every live daemon trained its rounds (or stopped for its privacy budget) and
        was evaluated (and with automatic groups, applied the agreed groups)."""
        return all((d.status.get("round", 0) >= self.spec.rounds or budget_spent(d.status))
                   and d.status.get("accuracy") is not None
                   and (not self.auto_groups() or groups_phase(d.status) == "agreed")
                   for d in self.daemons if not d.down)

    def kill(self, index: int) -> None:
        """Crash node ``index`` with SIGKILL: no final checkpoint, no goodbye."""
        d = self.daemons[index]
        if d.process is not None and d.process.poll() is None:
            os.killpg(d.process.pid, signal.SIGKILL)
            d.process.wait()
        d.down = True

    def restart(self, index: int, bootstrap: Sequence[str] | None = None) -> None:
        """Start a killed node again on its data directory (same identity, its checkpoint).

        ``bootstrap`` defaults to the addresses of up to three live nodes.
        """
        d = self.daemons[index]
        if d.process is not None and d.process.poll() is None:
            raise SwarmError(f"node{index} is still running")
        if bootstrap is None:
            bootstrap = [x.address for x in self.daemons
                         if not x.down and x is not d and x.address][:3]
        d.address = None
        self._spawn(d, bootstrap)
        self._wait_ready(d, time.monotonic() + self.startup_timeout)
        d.down = False

    def run_until_done(self, *, timeout: float = 900.0, interval: float = 0.5,
                       on_poll: Callable[[Swarm], None] | None = None) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            if on_poll is not None:
                on_poll(self)
            if self.finished():
                return
            if time.monotonic() > deadline:
                late = [f"node{d.index} (round {d.status.get('round')})" for d in self.daemons
                        if d.status.get("round", 0) < self.spec.rounds]
                if self.auto_groups():
                    late += [f"node{d.index} (groups {groups_phase(d.status)})"
                             for d in self.daemons
                             if not d.down and groups_phase(d.status) != "agreed"]
                raise SwarmError(f"swarm did not finish within {timeout:.0f}s: "
                                 f"{', '.join(late)}")
            time.sleep(interval)

    # -------------------------------------------------------------- results

    def shared_vectors(self, model: str) -> dict[int, np.ndarray]:
        """Each live daemon's current push-sum values of ``model``, via a fresh checkpoint."""
        out: dict[int, np.ndarray] = {}
        for d in self.daemons:
            d.client.request("checkpoint")
            state = CheckpointStore(d.data_dir).load()
            if state is not None and model in state.pushsum:
                out[d.index] = np.asarray(state.pushsum[model].values, dtype=np.float64)
        return out

    def peak_memory(self) -> dict[int, int]:
        """Peak resident memory (bytes, VmHWM) of each live daemon (Linux only)."""
        peaks: dict[int, int] = {}
        for d in self.daemons:
            if d.process is None or d.process.poll() is not None:
                continue
            try:
                status = Path(f"/proc/{d.process.pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    peaks[d.index] = int(line.split()[1]) * 1024
        return peaks

    def _metrics(self, d: Daemon) -> dict[str, Any]:
        if d.down:
            return {}
        try:
            counters = d.client.request("metrics").get("counters", {})
        except AdminClientError:
            return {}
        return counters if isinstance(counters, dict) else {}

    def _wire_bytes(self, d: Daemon) -> int | None:
        value = self._metrics(d).get(WIRE_BYTES_SENT)
        return int(value) if value is not None else None

    def _counter_sum(self, d: Daemon, counter: str) -> int:
        """``counter`` summed over the node's models (metrics keys ``<model>.<counter>``)."""
        return int(sum(v for k, v in self._metrics(d).items() if k.endswith(f".{counter}")))

    def auto_groups(self) -> bool:
        """Whether the nodes find their semi-local groups themselves."""
        return self.spec.semi_local and self.spec.grouping == "auto"

    def _groups(self, d: Daemon) -> dict[str, Any] | None:
        if d.down:
            return None
        try:
            return d.client.request("groups")
        except AdminClientError as exc:
            logger.warning("node%d did not report its groups: %s", d.index, exc)
            return None

    def grouping(self) -> dict[str, Any]:
        """The groups every node found, scored against the permutation groups
        (:func:`grouping_summary`)."""
        return grouping_summary([d.status.get("id") for d in self.daemons],
                                [self._groups(d) for d in self.daemons], self.spec.groups())

    def summary(self) -> dict[str, Any]:
        """Every figure of the run as plain data."""
        grouping = self.grouping() if self.auto_groups() else None
        rows = []
        for d in self.daemons:
            models = d.models.get("models", [])
            shared = [m for m in models if m.get("kind") != "local"]
            rows.append({
                "node": d.index,
                "permutation": self.spec.permutation(d.index) or "id",
                "accuracy": d.status.get("accuracy"),
                "loss": d.status.get("loss"),
                "round": d.status.get("round"),
                "steps": d.status.get("steps"),
                # DP-SGD: epsilon spent at status' privacy.delta (None without DP)
                "epsilon": (d.status.get("privacy") or {}).get("epsilon"),
                "privacy": d.status.get("privacy"),
                # the collaboration strategy's own report (p2p status' "strategy")
                "strategy": d.status.get("strategy"),
                "pushes_sent": sum(m.get("pushes_sent", 0) for m in shared),
                "pushes_received": sum(m.get("pushes_received", 0) for m in shared),
                "pushes_rejected": sum(m.get("pushes_rejected", 0) for m in shared),
                "bytes_sent": sum(m.get("bytes_sent", 0) for m in shared),
                "bytes_received": sum(m.get("bytes_received", 0) for m in shared),
                # everything the node's transport wrote to sockets (every frame), if it says
                "wire_bytes_sent": self._wire_bytes(d),
                "waves": self._counter_sum(d, "waves"),
                "weights": {m["name"]: m.get("weight") for m in shared},
                "history": d.history,
            })
            if grouping is not None:
                found = grouping["per_node"][d.index]
                rows[-1].update(group=found["group"], group_model=found["model"],
                                group_fingerprint=found["fingerprint"])
        accs = [r["accuracy"] for r in rows if r["accuracy"] is not None]
        sent = [r["bytes_sent"] for r in rows]
        wire = [r["wire_bytes_sent"] for r in rows if r["wire_bytes_sent"] is not None]
        peaks = self.peak_memory()
        for row in rows:
            row["peak_rss_bytes"] = peaks.get(row["node"])
        return {
            "spec": dataclasses.asdict(self.spec),
            "nodes": rows,
            "mean_accuracy": sum(accs) / len(accs) if accs else None,
            "worst_accuracy": min(accs) if accs else None,
            "mean_bytes_sent": sum(sent) / len(sent) if sent else None,
            "mean_wire_bytes_sent": sum(wire) / len(wire) if wire else None,
            "wall_seconds": time.monotonic() - self.started_at,
            "rounds_per_second": {d.index: rounds_per_second(d.history) for d in self.daemons},
            "admin_status_ms": latency_summary(
                [x for d in self.daemons for x in d.admin_latency]),
            **({} if grouping is None else {
                "grouping": grouping,
                "identification": grouping["identification"],
                "differentiation": grouping["differentiation"],
                "fingerprints_agree": grouping["fingerprints_agree"]}),
        }


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
