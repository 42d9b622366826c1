"""The in-process simulator: N real nodes in one trio run, on a simulated network.

Every node is the daemon's own :class:`~p2p.runtime.node.Node` with its trainer,
gossip and peer sampling; only the sockets (:class:`SimNetwork`: seeded latency,
bandwidth and loss per link) and the clock (virtual time) are simulated, so
1,000 learners run in minutes. ``python -m p2p.simulation`` (or
``scripts/simulate.py``) runs one from the swarm launcher's flags; the
gossip-only engine (:mod:`p2p.simulation.gossip_only`) runs push-sum and peer
sampling alone at 10,000 nodes. See docs/guide/simulation.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from p2p.simulation.churn import ChurnEvent, load_churn_script, parse_churn_script, random_churn
from p2p.simulation.collector import CollectorTuning
from p2p.simulation.handshake import TrustedHandshake
from p2p.simulation.network import (
    Distribution,
    SimAdmission,
    SimNetwork,
    SimTransport,
    parse_distribution,
)
from p2p.simulation.scheduling import seeded_scheduler

if TYPE_CHECKING:
    from p2p.simulation.host import SimProgress, Simulation
    from p2p.simulation.lockstep import LockstepRunner, LockstepStats

# The host and the lock-step runner load the node runtime (torch): on first use.
_LAZY = {
    **dict.fromkeys(("SimProgress", "Simulation"), "p2p.simulation.host"),
    **dict.fromkeys(("LockstepRunner", "LockstepStats"), "p2p.simulation.lockstep"),
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'p2p.simulation' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "ChurnEvent",
    "CollectorTuning",
    "Distribution",
    "LockstepRunner",
    "LockstepStats",
    "SimAdmission",
    "SimNetwork",
    "SimProgress",
    "SimTransport",
    "Simulation",
    "TrustedHandshake",
    "load_churn_script",
    "parse_churn_script",
    "parse_distribution",
    "random_churn",
    "seeded_scheduler",
]
