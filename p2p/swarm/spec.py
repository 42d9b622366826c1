"""A local swarm's description and the node configs it makes.

:class:`SwarmSpec` says what runs (nodes, scheme, task, permutations, gossip
settings); :func:`node_config` writes each daemon's config from it, as the
simulator (:mod:`p2p.simulation`) does for its in-process nodes.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from learner.data_errors import DataError
from learner.errors import FieldError
from learner.grouping.metrics import differentiation_rate, identification_rate
from learner.module_spec import ModuleModelSpec
from learner.permutations import parse_cycles
from learner.schemes import averaging_level, semi_local_scheme
from learner.spec import NetworkSpec, PartialModelSpec
from learner.tasks import get_task, resolve_network
from p2p.config import (
    ClusteringConfig,
    ConfigError,
    DPSection,
    GossipConfig,
    NodeConfig,
    layer_sizes,
    load_config,
)

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
#: Strategies that share no partial model and compare on a public split: the swarm
#: declares no ``[[models]]`` for them and, unless told otherwise, carves this public
#: split (the papers' sizes: scripts/paper/graph.py, scripts/paper/fedlinked.py).
ALL_LOCAL_STRATEGIES = {"graph": 200, "fedlinked": 300}
#: With automatic groups and ``--rounds`` but no ``--pretrain-rounds``, pre-training
#: takes at most this share of the rounds (the default 60 of AUTO_ROUNDS = 180).
PRETRAIN_SHARE = 1 / 3


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
    # strategy.name of every node ([strategy]; p2p/strategies); None: the template's
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


def strategy_of(spec: SwarmSpec) -> str:
    """``strategy.name`` of every node: the spec's, else its template's."""
    return spec.strategy or load_template(spec).strategy.name


def factory_models(spec: SwarmSpec, template: NodeConfig
                   ) -> tuple[PartialModelSpec | ModuleModelSpec, ...]:
    """The models of a node running the template's network.factory module: none
    ("local"), the whole module ("full") or the template's own ("partial")."""
    if spec.semi_local:
        raise SwarmError("--semi-local declares models by neurons, which a network.factory "
                         "module has not; declare the groups' models in the config")
    if spec.scheme == "local":
        return ()
    if spec.scheme == "full":
        return (ModuleModelSpec("global", params=("*",)),)
    return tuple(template.models)


def node_models(spec: SwarmSpec, index: int, template: NodeConfig | None = None
                ) -> tuple[PartialModelSpec | ModuleModelSpec, ...]:
    """The partial models node ``index`` declares under the spec's scheme (none for a
    strategy that shares no partial model; with a template naming a network.factory:
    :func:`factory_models`)."""
    if strategy_of(spec) in ALL_LOCAL_STRATEGIES:
        if spec.semi_local:
            raise SwarmError(f"--semi-local: strategy {strategy_of(spec)!r} shares no partial "
                             "model (an all-local layout); drop --semi-local")
        return ()
    if spec.scheme not in SCHEME_LEVELS:
        raise SwarmError(f"--scheme: expected one of {', '.join(SCHEME_LEVELS)}, "
                         f"got {spec.scheme!r}")
    if template is not None and template.network.factory is not None:
        return factory_models(spec, template)
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
            models=node_models(spec, index, base),
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
    unless automatic groups (:data:`AUTO_PUBLIC_SIZE`) or an all-local strategy
    (:data:`ALL_LOCAL_STRATEGIES`) need a public split the task would not carve."""
    if spec.public_size is not None:
        return spec.public_size
    wanted = (AUTO_PUBLIC_SIZE if spec.semi_local and spec.grouping == "auto"
              else ALL_LOCAL_STRATEGIES.get(strategy_of(spec)))
    if not base and wanted is not None:
        try:
            empty = get_task(spec.task).public_size == 0
        except DataError:
            return base  # an unknown task is reported by the config's own check
        if empty:
            return wanted
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
    pretrain = pretrain_rounds(spec, base.pretrain_rounds)
    if pretrain != base.pretrain_rounds:
        changes["pretrain_rounds"] = pretrain
    if spec.grouping_start is not None:
        changes["start"] = spec.grouping_start
    return dataclasses.replace(base, **changes)


def pretrain_rounds(spec: SwarmSpec, base: int) -> int:
    """``clustering.pretrain_rounds`` of a swarm with automatic groups: the spec's; else
    ``base`` (the node's), but at most :data:`PRETRAIN_SHARE` of the rounds, so that a
    short run still has rounds to train its groups."""
    if spec.pretrain_rounds is not None:
        return spec.pretrain_rounds
    return max(1, min(base, int(spec.rounds * PRETRAIN_SHARE)))


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
