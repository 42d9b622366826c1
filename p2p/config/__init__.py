"""Node configuration: a TOML file loaded into frozen dataclasses.

``load_config(path)`` reads a TOML file, checks every key (type, range,
notation) and returns a :class:`NodeConfig`; every problem raises
:class:`ConfigError` naming the dotted key, the value found and the expected
form. Unknown sections and keys are errors too, with a "did you mean"
suggestion: a misspelt key silently falling back to its default is the worst
kind of configuration bug. Each key is declared once, in
:mod:`p2p.config.schema`; reading, writing (:func:`render_config_toml`, which
``load_config`` reads back unchanged), the known-key lists and command-line
overrides derive from it. ``p2p config`` and ``p2p run`` both run
:func:`preflight` before anything is created. Relative paths are resolved
against the file's directory. The swarm key helpers live here too.

Keys: docs/guide/configuration.md; how it is built: docs/design/architecture.md.
"""

from __future__ import annotations

from learner.permutations import parse_cycles as parse_permutation
from p2p.config.document import (
    SECTION_KEYS,
    config_from_dict,
    config_to_dict,
    load_config,
    parse_config_text,
    render_config_toml,
)
from p2p.config.errors import ConfigError
from p2p.config.kinds import LayerSizes, layer_sizes
from p2p.config.preflight import preflight
from p2p.config.schema import (
    CLI_OPTIONS,
    CLUSTERING_STARTS,
    LOG_FORMATS,
    LOG_LEVELS,
    NODE_PRIVACY_MODES,
    PUSH_OVERHEAD_BYTES,
    CheckpointConfig,
    ClusteringConfig,
    DataConfig,
    DPSection,
    GossipConfig,
    LimitsConfig,
    MetricsConfig,
    NetworkConfig,
    NodeConfig,
    NodeSection,
    PeerSamplingConfig,
    RelayConfig,
    SecurityConfig,
    StrategyConfig,
    TrainingConfig,
    option_setting,
    push_frame_bytes,
)
from p2p.config.swarm_key import (
    SWARM_KEY_BYTES,
    SwarmKeyError,
    encode_swarm_key,
    generate_swarm_key,
    load_swarm_key,
    write_swarm_key,
)
from p2p.config.task_fit import check_task_fit, task_mismatch
from peersampling.address import AddressError, HostPort
from peersampling.address import parse_host_port as _parse_address

__all__ = [
    "CLI_OPTIONS",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "NODE_PRIVACY_MODES",
    "CLUSTERING_STARTS",
    "PUSH_OVERHEAD_BYTES",
    "SECTION_KEYS",
    "SWARM_KEY_BYTES",
    "CheckpointConfig",
    "ClusteringConfig",
    "ConfigError",
    "DPSection",
    "DataConfig",
    "GossipConfig",
    "HostPort",
    "LayerSizes",
    "LimitsConfig",
    "MetricsConfig",
    "NetworkConfig",
    "NodeConfig",
    "NodeSection",
    "PeerSamplingConfig",
    "RelayConfig",
    "SecurityConfig",
    "StrategyConfig",
    "SwarmKeyError",
    "TrainingConfig",
    "check_task_fit",
    "config_from_dict",
    "config_to_dict",
    "encode_swarm_key",
    "generate_swarm_key",
    "layer_sizes",
    "load_config",
    "load_swarm_key",
    "option_setting",
    "parse_config_text",
    "parse_host_port",
    "parse_permutation",
    "preflight",
    "push_frame_bytes",
    "render_config_toml",
    "task_mismatch",
    "write_swarm_key",
]


def parse_host_port(text: object, key: str, *, allow_port_zero: bool = False) -> HostPort:
    """Parse ``"host:port"`` (or ``"[v6]:port"``); errors are ConfigErrors naming ``key``."""
    try:
        return _parse_address(text, allow_port_zero=allow_port_zero)
    except AddressError as exc:
        raise ConfigError(f"{key}: {exc}", key=key) from None
