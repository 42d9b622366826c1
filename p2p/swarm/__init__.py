"""A local swarm of real daemons: configs, launch, monitoring and results.

Used by ``make swarm`` (``python -m p2p.swarm`` or ``scripts/swarm.py``),
``scripts/bench/swarm.py`` and the end-to-end tests. Every daemon is a
separate ``python -m p2p run`` process on 127.0.0.1, watched through its
admin socket. See docs/guide/operations.md.
"""

from p2p.swarm.launcher import Daemon, Swarm, daemon_environment
from p2p.swarm.spec import (
    ALL_LOCAL_STRATEGIES,
    AUTO_PUBLIC_SIZE,
    AUTO_ROUNDS,
    GROUPINGS,
    SCHEME_LEVELS,
    SEMI_LOCAL_GLOBAL_LEVEL,
    WIRE_BYTES_SENT,
    SwarmError,
    SwarmSpec,
    budget_spent,
    clustering_config,
    default_permutations,
    dp_section,
    gossip_config,
    grouping_summary,
    groups_phase,
    latency_summary,
    load_template,
    node_config,
    node_models,
    partition,
    public_size,
    rounds_per_second,
    spec_from_template,
)

__all__ = [
    "ALL_LOCAL_STRATEGIES",
    "AUTO_PUBLIC_SIZE",
    "AUTO_ROUNDS",
    "GROUPINGS",
    "SCHEME_LEVELS",
    "SEMI_LOCAL_GLOBAL_LEVEL",
    "WIRE_BYTES_SENT",
    "Daemon",
    "Swarm",
    "SwarmError",
    "SwarmSpec",
    "budget_spent",
    "clustering_config",
    "daemon_environment",
    "default_permutations",
    "dp_section",
    "gossip_config",
    "grouping_summary",
    "groups_phase",
    "latency_summary",
    "load_template",
    "node_config",
    "node_models",
    "partition",
    "public_size",
    "rounds_per_second",
    "spec_from_template",
]
