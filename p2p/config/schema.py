"""The node's configuration schema: every key declared once, checked by its owner.

Each section is a frozen dataclass whose fields are declared with
:func:`~p2p.config.kinds.setting` (default, kind, help). Settings the learner
consumes are validated by the learner's own value objects
(:class:`~learner.NetworkSpec`, :class:`~learner.PartialModelSpec` and
:class:`~learner.ModelLayout`, :class:`~learner.TrainConfig`,
:class:`~learner.DataSpec`, :func:`~learner.permutations.parse_permutation`),
whose errors are reported under the config's dotted key. So ``p2p config``
accepts exactly what ``p2p run`` can build. Defaults come from the layer that
uses the value (the learner, the transport, the sealing) where it has one.
The learning sections (network, models, training, data) live in
:mod:`p2p.config.learning`; the strategies' keys in their plug-ins.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gossip.compression import ENCODINGS
from gossip.masking.epochs import EpochSettings
from gossip.merge_guard import GuardSettings
from gossip.pushsum import EXCHANGES, PRIVACY_MODES
from gossip.wave_rule import AUTO
from learner.augment import check_shift
from learner.dp.config import DEFAULT_CLIP_NORM, DEFAULT_DELTA, DPConfig
from learner.errors import FieldError
from learner.layout import ModelLayout
from learner.module_spec import ModuleModelSpec
from learner.spec import PartialModelSpec, SpecError
from p2p.config.errors import ConfigError
from p2p.config.factories import check_factory_config
from p2p.config.kinds import (
    Address,
    AddressList,
    Boolean,
    Choice,
    Context,
    FilePath,
    Integer,
    IntegerOrWord,
    Number,
    Setting,
    Text,
    setting,
    settings_of,
)
from p2p.config.learning import (
    MODEL_KEYS,
    DataConfig,
    NetworkConfig,
    TrainingConfig,
    learner_error,
)
from p2p.config.metrics_section import MetricsConfig
from p2p.config.plugins import StrategyConfig, strategy_plugins
from p2p.config.relay_section import RelayConfig
from p2p.wire.framing import DEFAULT_MAX_FRAME_SIZE
from p2p.wire.sealing import CIPHERS, DEFAULT_CIPHER
from p2p.wire.transport import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_READ_TIMEOUT,
)
from peersampling.address import HostPort

__all__ = [
    "CLI_OPTIONS",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "MODEL_KEYS",
    "NODE_PRIVACY_MODES",
    "CLUSTERING_MODES",
    "CLUSTERING_STARTS",
    "CheckpointConfig",
    "ClusteringConfig",
    "DPSection",
    "DataConfig",
    "GossipConfig",
    "LimitsConfig",
    "MetricsConfig",
    "NetworkConfig",
    "NodeConfig",
    "NodeSection",
    "PeerSamplingConfig",
    "RelayConfig",
    "SecurityConfig",
    "StrategyConfig",
    "PUSH_OVERHEAD_BYTES",
    "TrainingConfig",
    "option_setting",
    "push_frame_bytes",
]

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


# --------------------------------------------------------------------------- sections


@dataclass(frozen=True)
class NodeSection:
    """``[node]``: identity-independent settings of this daemon."""

    name: str = setting("node", Text(nonempty=True), "a label shown by `p2p status` and in logs")
    listen: HostPort = setting(HostPort("127.0.0.1", 0), Address(allow_port_zero=True),
                               "address to accept peers on; port 0 = any free port")
    advertise: HostPort | None = setting(None, Address(),
                                         "address other nodes should dial (host name or IP); default: "
                                         "the address peers confirm")
    bootstrap: tuple[HostPort, ...] = setting((), AddressList(), "peers to join through")
    data_dir: Path | None = setting(None, FilePath(),
                                    "identity key, checkpoint and admin socket")
    seed: int = setting(0, Integer(minimum=0),
                        "seeds the node's initial parameters and mini-batch order")
    log_format: str = setting("text", Choice(LOG_FORMATS), "human lines or JSON objects")
    log_level: str = setting("info", Choice(LOG_LEVELS, fold_case=True),
                             "minimum level logged")


#: ``gossip.privacy`` for DP-SGD alone; a masking mode followed by DP_SUFFIX combines both.
DP_MODE = "dp"
DP_SUFFIX = "+dp"
#: What ``gossip.privacy`` accepts: the push-sum core's modes, DP-SGD, and each masking
#: mode combined with DP-SGD.
NODE_PRIVACY_MODES: tuple[str, ...] = (
    *PRIVACY_MODES, DP_MODE, *(f"{m}{DP_SUFFIX}" for m in PRIVACY_MODES if m != "none"))


#: What ``gossip.partner_choice`` accepts (gossip.partner_choice module).
PARTNER_CHOICES = ("reciprocity", "uniform")
#: the merge guard's defaults: the [gossip] keys below that configure it default to them
_GUARD = GuardSettings()


def _masking(privacy: str) -> str:
    if privacy == DP_MODE:
        return "none"
    return privacy.removesuffix(DP_SUFFIX)


@dataclass(frozen=True)
class GossipConfig:
    """``[gossip]``: push-sum averaging of the shared models."""

    fanout: int = setting(1, Integer(minimum=1, maximum=64), "peers per push")
    pushes_per_round: int | str = setting(
        AUTO, IntegerOrWord(AUTO, minimum=1, maximum=64),
        'exchanges per shared model after each round: "auto" (until the partners\' gap '
        "is within the drift of a round of training, 1 to 4) or a fixed count")
    exchange: str = setting("push-pull", Choice(EXCHANGES),
                            '"push-pull": both ends average in one round trip; "push": '
                            "one-way pushes (always so with privacy \"masked\")")
    encoding: str = setting("f16", Choice(ENCODINGS),
                            "how absolute values travel (one-way pushes, a first request "
                            "to a peer)")
    delta_encoding: str = setting("int8", Choice(ENCODINGS),
                                  "how deltas travel (push-pull replies, requests against "
                                  "the reference a pair shares)")
    max_in_flight: int = setting(1, Integer(minimum=1, maximum=16),
                                 "pushes per shared model awaiting an ack at once")
    privacy: str = setting("none", Choice(NODE_PRIVACY_MODES),
                           '"none"; "masked": masking epochs (cancelling noise pairs, '
                           'docs/design/gossip.md); "dp": train with DP-SGD (settings in [dp]); '
                           '"masked+dp": both')
    mask_partners: int = setting(3, Integer(minimum=1, maximum=16),
                                 "with \"masked\": noise pairs a node offers per epoch")
    mask_std: float = setting(10.0, Number(above=0),
                              "with \"masked\": noise of one pair in a node's estimate "
                              "(standard deviation, in the parameters' units)")
    unmask_after: int = setting(40, Integer(minimum=1),
                                "with \"masked\": exchanges after the youngest pair before "
                                "the noise is folded back (an epoch's length)")
    mask_clear_rounds: int = setting(10, Integer(minimum=0),
                                     "with \"masked\": training rounds in clear between a "
                                     "node's fold and its next epoch")
    push_timeout: float = setting(5.0, Number(above=0), "seconds to wait for a push's ack")
    partner_choice: str = setting(
        "reciprocity", Choice(PARTNER_CHOICES),
        '"reciprocity": push mostly to holders that gave weight back, pause those that '
        'take pushes and give nothing back (docs/design/trust.md); "uniform": any sampled '
        "holder")
    merge_guard: bool = setting(True, Boolean(),
                                "merge defences against a lying holder (weight shares, net "
                                "weight balances per peer, clipping, masked flags; "
                                "docs/design/trust.md)")
    share_ratio: float = setting(_GUARD.share_ratio, Number(above=0),
                                 "with merge_guard: largest share a push may carry, times "
                                 "max(own weight, 1)")
    balance_cap: float = setting(_GUARD.balance_cap, Number(above=0),
                                 "with merge_guard: net weight a peer may hand this node "
                                 "beyond what it got back (and this node that peer)")
    balance_halflife: float = setting(_GUARD.balance_halflife, Number(above=0),
                                      "with merge_guard: seconds in which a net balance "
                                      "decays by half")
    sink_pause: float = setting(_GUARD.sink_pause, Number(above=0),
                                "with merge_guard: seconds without pushes to a peer that "
                                "answered a push-pull request without a reply")
    clip_factor: float = setting(_GUARD.clip_factor, Number(minimum=0),
                                 "with merge_guard: clipping radius, times the larger of the "
                                 "median of recent partners' update norms (peers that "
                                 "acknowledged a push of this node) and the median of this "
                                 "node's own recent training steps (0: no clipping)")
    drift_cap: float = setting(_GUARD.drift_cap, Number(minimum=0),
                               "with merge_guard: creep budget: the movement all merges "
                               "(pushes and replies, every sender together) made here, with "
                               "own training taken back, stays within this many times the "
                               "norm of this node's own training over the same horizon "
                               "(0: off)")
    sender_share: float = setting(_GUARD.sender_share, Number(minimum=0),
                                  "with merge_guard: one sender may hold at most this many "
                                  "times a fair share of the pushes merged here recently "
                                  "(and 6 in any case; replies to this node's requests are "
                                  "not counted; 3 stops a one-identity random kicker); 0: "
                                  "no such bound, the default (8 made-up identities undo it, "
                                  "and nodes pushing at different rates were refused)")

    recovery: bool = setting(True, Boolean(),
                             "with merge_guard: roll back a round's merges that make the loss "
                             "on this node's own held-out data jump for the worse, and stop "
                             "trusting the peers whose merges moved the model most")

    @property
    def guard(self) -> GuardSettings | None:
        """The push-sum core's merge defences (None unless ``merge_guard``)."""
        if not self.merge_guard:
            return None
        return GuardSettings(share_ratio=self.share_ratio, balance_cap=self.balance_cap,
                             balance_halflife=self.balance_halflife, sink_pause=self.sink_pause,
                             clip_factor=self.clip_factor, drift_cap=self.drift_cap,
                             sender_share=self.sender_share)

    @property
    def epochs(self) -> EpochSettings:
        """The masking epochs' settings (used with privacy ``"masked"``/``"masked+dp"``)."""
        return EpochSettings(partners=self.mask_partners, mask_scale=self.mask_std,
                             mix_exchanges=self.unmask_after,
                             clear_rounds=self.mask_clear_rounds,
                             join_window=max(1, self.unmask_after // 4))

    @property
    def masking(self) -> str:
        """The push-sum core's privacy mode (:data:`gossip.PRIVACY_MODES`): the masking
        part of ``privacy``, ``"none"`` for ``"dp"``."""
        return _masking(self.privacy)

    @property
    def dp(self) -> bool:
        """Whether the node trains with DP-SGD (``"dp"`` or ``"<masking>+dp"``)."""
        return self.privacy == DP_MODE or self.privacy.endswith(DP_SUFFIX)


@dataclass(frozen=True)
class DPSection:
    """``[dp]``: DP-SGD settings (a :class:`learner.dp.config.DPConfig`), used when
    ``gossip.privacy`` is ``"dp"`` or ``"masked+dp"``."""

    clip_norm: float = setting(DEFAULT_CLIP_NORM, Number(above=0),
                               "largest L2 norm of one sample's gradient")
    noise_multiplier: float | None = setting(
        None, Number(above=0),
        "noise standard deviation / clip_norm; absent: derived from target_epsilon, or 1.0 "
        "when that is absent too")
    target_epsilon: float | None = setting(
        None, Number(above=0),
        "derive noise_multiplier so that training.rounds rounds spend this epsilon")
    delta: float = setting(DEFAULT_DELTA, Number(above=0, below=1),
                           "delta at which epsilon is reported")
    epsilon_budget: float | None = setting(
        None, Number(above=0),
        "epsilon after which the node stops training (absent: target_epsilon, or no cap)")

    def __post_init__(self) -> None:
        if self.noise_multiplier is not None and self.target_epsilon is not None:
            raise ConfigError(
                f"dp.noise_multiplier: {self.noise_multiplier} is given together with "
                f"dp.target_epsilon {self.target_epsilon}; expected one of them (the noise is "
                "derived from the target epsilon)", key="dp.noise_multiplier")
        self.learner_config(self.noise_multiplier or 1.0)

    @property
    def budget(self) -> float | None:
        """The epsilon the node may spend: ``epsilon_budget``, else ``target_epsilon``."""
        return self.epsilon_budget if self.epsilon_budget is not None else self.target_epsilon

    def learner_config(self, noise_multiplier: float) -> DPConfig:
        """The learner's DP settings with this noise multiplier (given, or derived from
        ``target_epsilon`` once the shard size is known)."""
        try:
            return DPConfig(clip_norm=self.clip_norm, noise_multiplier=noise_multiplier,
                            delta=self.delta, epsilon_budget=self.budget)
        except FieldError as exc:
            raise learner_error(exc, "dp", {}) from None



@dataclass(frozen=True)
class PeerSamplingConfig:
    """``[peer_sampling]``: Cyclon-style views."""

    view_size: int = setting(20, Integer(minimum=1), "view size c")
    shuffle_length: int = setting(5, Integer(minimum=1), "shuffle length l (<= view_size)")
    period: float = setting(1.0, Number(above=0), "seconds between shuffles")

    def __post_init__(self) -> None:
        if self.shuffle_length > self.view_size:
            raise ConfigError(
                f"peer_sampling.shuffle_length: {self.shuffle_length} exceeds "
                f"peer_sampling.view_size {self.view_size}; expected 1 <= shuffle_length <= "
                "view_size", key="peer_sampling.shuffle_length")


@dataclass(frozen=True)
class SecurityConfig:
    """``[security]``: swarm key (optional) and the AEAD used with it."""

    swarm_key_file: Path | None = setting(None, FilePath(), "swarm key from p2p keygen")
    cipher: str = setting(DEFAULT_CIPHER, Choice(CIPHERS), "AEAD sealing frames")


@dataclass(frozen=True)
class LimitsConfig:
    """``[limits]``: resource bounds that protect the daemon from peers."""

    max_connections: int = setting(DEFAULT_MAX_CONNECTIONS, Integer(minimum=1),
                                   "open connections at most")
    max_frame_size: int = setting(DEFAULT_MAX_FRAME_SIZE, Integer(minimum=1024,
                                                                  maximum=2**31 - 1),
                                  "largest frame accepted (bytes)")
    max_messages_per_second: float = setting(50.0, Number(above=0),
                                             "requests accepted per second per connection")
    connect_timeout: float = setting(DEFAULT_CONNECT_TIMEOUT, Number(above=0),
                                     "seconds to connect and finish the handshake")
    read_timeout: float = setting(DEFAULT_READ_TIMEOUT, Number(above=0),
                                  "seconds each step of a frame or handshake may take")


@dataclass(frozen=True)
class CheckpointConfig:
    """``[checkpoint]``: periodic state snapshots (also written on shutdown)."""

    interval: float = setting(60.0, Number(above=0), "seconds between checkpoints")


#: ``clustering.mode``: "off" (groups, if any, are declared by hand) or "auto".
CLUSTERING_MODES = ("off", "auto")
#: ``clustering.start``: how an automatic semi-local model's values start.
CLUSTERING_STARTS = ("average", "reinit")


@dataclass(frozen=True)
class ClusteringConfig:
    """``[clustering]``: semi-local groups found by the nodes themselves (issue 16).

    With ``mode = "auto"`` the node trains ``pretrain_rounds`` rounds (its
    global model gossiping as usual, its local neurons alone), projects its
    network on the task's public split, exchanges signed projection records
    with its peers, and once the table is complete runs the grouping; its
    group (2+ nodes) then shares ``share`` of each hidden layer, taken from the
    local neurons, as a semi-local model depending on the global model.
    """

    mode: str = setting("off", Choice(CLUSTERING_MODES),
                        '"off", or "auto": find semi-local groups with the peers while running')
    pretrain_rounds: int = setting(60, Integer(minimum=1),
                                   "rounds trained before the node computes its projection "
                                   "(the networks must have learned their tasks by then: on "
                                   "digits 20-40 rounds found no groups, 60 the right ones)")
    hold: float = setting(60.0, Number(minimum=0),
                          "seconds training waits after pre-training for the groups to "
                          "apply, so the rounds after it train them (0: never waits)")
    share: float = setting(0.2, Number(above=0, maximum=1),
                           "share of each hidden layer the semi-local model takes (from the "
                           "local neurons: the declared models must leave that many)")
    start: str = setting("average", Choice(CLUSTERING_STARTS),
                         'the semi-local model\'s first values: "average" the members\' '
                         'pre-trained local values (push-sum), "reinit" from the model\'s '
                         "shared initialisation seed")
    epoch: int = setting(1, Integer(minimum=0, maximum=2**31 - 1),
                         "grouping epoch: names the models and seeds the grouping")
    expected_nodes: int = setting(0, Integer(minimum=0),
                                  "nodes whose records complete the table (0: unknown, "
                                  "the quiet period alone decides)")
    quiet_period: float = setting(5.0, Number(above=0),
                                  "seconds without a new record (and with a peer "
                                  "announcing the same result) before the groups apply")
    pull_period: float = setting(0.5, Number(above=0),
                                 "seconds between two record exchanges with a sampled peer")
    max_records: int = setting(1024, Integer(minimum=2, maximum=65536),
                               "projection records kept at most (bounds memory)")
    retries: int = setting(1, Integer(minimum=0, maximum=16),
                           "times the nodes look again, after another pretrain_rounds "
                           "rounds, when an attempt found every node alone (0: the first "
                           "answer is final; 12 digits daemons, seed 2: no gap after 60 "
                           "rounds, the exact pairs after 120)")

    @property
    def auto(self) -> bool:
        """Whether automatic grouping is on."""
        return self.mode == "auto"

    def global_model(self, layout: ModelLayout) -> str:
        """The declared global model the semi-local models depend on (ConfigError if none)."""
        found = [n for n in layout.declared_models if layout.model_kind(n) == "global"]
        if len(found) != 1:
            what = "none" if not found else ", ".join(found)
            raise ConfigError(
                f"clustering.mode: \"auto\" needs exactly one global model to depend on; "
                f"the declared global models are {what}", key="clustering.mode")
        return found[0]

    def semi_local_counts(self, layout: ModelLayout) -> tuple[int, ...]:
        """Neurons per layer of an automatic semi-local model: ``share`` of each hidden
        layer, none of the input and output layers (ConfigError if the local neurons
        cannot provide them)."""
        sizes = layout.network.sizes
        local = [p.size for p in layout.neurons("local")]
        counts = [0] * len(sizes)
        for layer in range(1, len(sizes) - 1):
            want = int(round(self.share * sizes[layer]))
            if want > local[layer]:
                raise ConfigError(
                    f"clustering.share: {self.share:g} of hidden layer {layer} is {want} "
                    f"neurons but the declared models leave only {local[layer]} local there; "
                    "lower clustering.share or the global model's neurons",
                    key="clustering.share")
            counts[layer] = want
        if not any(counts):
            raise ConfigError(
                f"clustering.share: {self.share:g} of the hidden layers "
                f"{list(sizes[1:-1])} is no neuron; expected a share giving at least one",
                key="clustering.share")
        return tuple(counts)


# --------------------------------------------------------------------------- the whole

#: What a push adds to its model's float64 values on the wire: fingerprint, ids,
#: weight, flags, msgpack framing (141 bytes today) and the AEAD tag; generous so
#: that a new field does not make a valid config refuse to push.
PUSH_OVERHEAD_BYTES = 1024


def push_frame_bytes(parameters: int) -> int:
    """An upper bound on the frame carrying a push of a model with ``parameters`` values."""
    return 8 * parameters + PUSH_OVERHEAD_BYTES



#: Command-line options of ``p2p run`` -> the key they override.
CLI_OPTIONS: dict[str, str] = {
    "name": "node.name",
    "listen": "node.listen",
    "advertise": "node.advertise",
    "bootstrap": "node.bootstrap",
    "data_dir": "node.data_dir",
    "seed": "node.seed",
    "node_index": "data.node_index",
    "num_nodes": "data.num_nodes",
    "rounds": "training.rounds",
    "log_format": "node.log_format",
    "log_level": "node.log_level",
    "swarm_key_file": "security.swarm_key_file",
    "metrics": "metrics.listen",
}


@dataclass(frozen=True)
class NodeConfig:
    """The whole, validated configuration of one node.

    Building one checks every section and, across sections, that the declared
    models fit the network (:class:`learner.ModelLayout`) and the label
    permutation fits its output layer.
    """

    node: NodeSection = field(default_factory=NodeSection)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    models: tuple[PartialModelSpec | ModuleModelSpec, ...] = ()
    training: TrainingConfig = field(default_factory=TrainingConfig)
    gossip: GossipConfig = field(default_factory=GossipConfig)
    dp: DPSection = field(default_factory=DPSection)
    peer_sampling: PeerSamplingConfig = field(default_factory=PeerSamplingConfig)
    data: DataConfig = field(default_factory=DataConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    relay: RelayConfig = field(default_factory=RelayConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    clustering: ClusteringConfig = field(default_factory=ClusteringConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    source: Path | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "models", tuple(self.models))
        check_factory_config(self, model_error)
        if self.network.factory is None:
            self._check_frame_size(self.layout())
            self.data.label_map(self.network.layers[-1])
            self._check_shift()
        self._check_dp_plan()
        self._check_clustering()
        self._check_strategy()

    def _check_strategy(self) -> None:
        """DP-SGD accounts for no strategy but those declaring ``with_dp``; then the
        chosen strategy's own checks (its plug-in's, :mod:`p2p.config.plugins`)."""
        name = self.strategy.name
        plugin = strategy_plugins()[name]
        if not plugin.with_dp and self.gossip.dp:
            raise ConfigError(
                f"strategy.name: {name!r} is not supported with DP-SGD (gossip.privacy "
                f"{self.gossip.privacy!r}): its extra loss or exchanges are not accounted "
                'for; use strategy "partial" with DP', key="strategy.name")
        if plugin.check is not None:
            plugin.check(self)

    def _check_clustering(self) -> None:
        """``clustering.mode = "auto"`` needs a global model, local neurons to convert,
        a public split to project on and rounds left after the pre-training."""
        c = self.clustering
        if not c.auto:
            return
        layout = self.layout()
        c.global_model(layout)
        c.semi_local_counts(layout)
        if self.data.public_size == 0:
            raise ConfigError(
                "clustering.mode: \"auto\" projects every node on the task's public split, "
                "but data.public_size is 0; set data.public_size (e.g. 500)",
                key="clustering.mode")
        if self.training.rounds and self.training.rounds <= c.pretrain_rounds:
            raise ConfigError(
                f"clustering.pretrain_rounds: {c.pretrain_rounds} leaves no round of "
                f"training.rounds = {self.training.rounds} to train the groups; expected "
                "fewer pre-training rounds", key="clustering.pretrain_rounds")

    def _check_shift(self) -> None:
        """``training.shift`` moves images: the network must take images, and not train with DP."""
        try:
            check_shift(self.training.shift, self.network.spec.input_image)
        except ValueError as exc:
            raise ConfigError(f"training.shift: {exc}", key="training.shift") from None
        if self.training.shift and self.gossip.dp:
            raise ConfigError("training.shift: not supported with DP-SGD (gossip.privacy "
                              f"{self.gossip.privacy!r}): its steps draw their own batches",
                              key="training.shift")

    def _check_dp_plan(self) -> None:
        """A target epsilon is spread over a planned number of steps: training.rounds must say it."""
        if self.gossip.dp and self.dp.target_epsilon is not None and not self.training.rounds:
            raise ConfigError(
                f"dp.target_epsilon: {self.dp.target_epsilon} needs a planned number of steps, "
                "training.rounds x training.steps_per_round, but training.rounds is 0 (until "
                "stopped); set training.rounds, or give dp.noise_multiplier instead",
                key="dp.target_epsilon")

    def _check_frame_size(self, layout: ModelLayout) -> None:
        check_frame_size(self.limits.max_frame_size, layout)

    def layout(self) -> ModelLayout:
        """The node's network cut into its declared models (the learner's layout; a
        network.factory module's is known once the module is built)."""
        if self.network.factory is not None:
            raise ConfigError("network.factory: the layout of your module is known once it is "
                              "built (p2p.runtime.assembly.build_learning)",
                              key="network.factory")
        try:
            return ModelLayout(self.network.spec, list(self.models),
                               cross_models=self.network.cross_models)
        except SpecError as exc:
            raise model_error(exc, self.models) from None

    def model(self, name: str) -> PartialModelSpec | ModuleModelSpec:
        """The declared model called ``name`` (``KeyError`` if none)."""
        for spec in self.models:
            if spec.name == name:
                return spec
        raise KeyError(name)



    def with_overrides(self, **options: object) -> NodeConfig:
        """Return a copy with command-line values replacing the file's.

        Options are those of :data:`CLI_OPTIONS` (``listen``, ``bootstrap``,
        ``data_dir``, ``swarm_key_file``, ``log_format``, ``log_level``,
        ``name``, ``seed``, ``node_index``, ``num_nodes``, ``rounds``, ``metrics``); ``None`` keeps the
        file's value. Values are read
        by the key's own kind: ``bootstrap`` may be a comma-separated string,
        relative paths resolve against the current directory. Errors name the
        option and the key (``--listen (node.listen)``).
        """
        ctx = Context(base_dir=Path.cwd(), command_line=True)
        changes: dict[str, dict[str, Any]] = {}
        for option, value in options.items():
            if option not in CLI_OPTIONS:
                raise TypeError(f"with_overrides: unknown option {option!r}")
            if value is None:
                continue
            section, key = CLI_OPTIONS[option].split(".")
            kind = option_setting(option).kind
            label = f"--{option.replace('_', '-')} ({section}.{key})"
            changes.setdefault(section, {})[key] = kind.parse(value, label, ctx)
        try:
            sections = {name: dataclasses.replace(getattr(self, name), **values)
                        for name, values in changes.items()}
            return dataclasses.replace(self, **sections)
        except ConfigError as exc:  # a check across keys: say which value came from a flag
            given = [f"--{option.replace('_', '-')} {options[option]}"
                     for option, key in CLI_OPTIONS.items()
                     if options.get(option) is not None and key == exc.key]
            if not given:
                raise
            raise ConfigError(f"{exc} (given as {', '.join(given)})", key=exc.key,
                              source=None if self.source is None else str(self.source)) from None


def check_frame_size(max_frame_size: int, layout: Any) -> None:
    """Every shared model's push must fit in one frame, or the node can never share it
    (``layout``: a notation network's or a module's)."""
    sizes = {name: layout.vector_length(name) for name in layout.shared_models}
    if not sizes:
        return
    largest = max(sizes, key=lambda name: sizes[name])
    need = push_frame_bytes(sizes[largest])
    if max_frame_size < need:
        raise ConfigError(
            f"limits.max_frame_size: {max_frame_size} bytes cannot carry a push "
            f"of model {largest!r} ({sizes[largest]:,} parameters x 8 bytes + "
            f"{PUSH_OVERHEAD_BYTES} bytes of message overhead = {need:,} bytes); expected "
            f"at least {need} (or leave the key out: the default is "
            f"{DEFAULT_MAX_FRAME_SIZE})", key="limits.max_frame_size")


def option_setting(option: str) -> Setting:
    """The declaration (kind, help) of the key that command-line ``option`` overrides."""
    section, key = CLI_OPTIONS[option].split(".")
    section_type = next(f.default_factory for f in dataclasses.fields(NodeConfig)
                        if f.name == section)
    # the default_factory of a section field is its dataclass (the stubs say "or MISSING")
    return settings_of(section_type)[key]  # type: ignore[arg-type]


def model_error(exc: SpecError, models: Sequence[object]) -> ConfigError:
    """A learner error about the declared models, under ``models[i].key``."""
    index = exc.index
    if index is None and exc.model is not None:
        index = next((i for i, m in enumerate(models) if getattr(m, "name", None) == exc.model),
                     None)
    key = "models"
    if index is not None:
        key = f"models[{index}]"
        by_attr = {s.attr: name for name, s in MODEL_KEYS.items()}
        if exc.field in by_attr:
            key += f".{by_attr[exc.field]}"
    return ConfigError(f"{key}: {exc.detail}", key=key)

