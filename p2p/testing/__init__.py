"""A testing kit for the daemon: in-memory network, virtual time, node builders.

For tests, scripts and benchmarks alike (it never imports pytest), in the
manner of :mod:`trio.testing`. Importing :mod:`p2p` does not import this
package. The network, clock, waiting and wire client are light; the node
builders load the node runtime (and so torch) on first use.

- :mod:`p2p.testing.memnet`: :class:`MemoryNetwork`, real transports over
  in-memory streams, with connection and message faults; :class:`Tap`.
- :mod:`p2p.testing.clock`: :func:`virtual_clock`, :func:`run_in_virtual_time`.
- :mod:`p2p.testing.waiting`: :func:`wait_until` a condition holds.
- :mod:`p2p.testing.nodes`: :func:`fast_spec`, :func:`tcp_node`,
  :func:`memory_node`, :func:`memory_swarm`, :func:`running`,
  :func:`admin_request`, :func:`write_swarm_key`.
- :mod:`p2p.testing.wire_client`: a (hostile) peer speaking raw wire protocol.
- :mod:`p2p.testing.relay_attack`: :class:`RelayAttacker`, a member relaying
  between two nodes and claiming their ids (:class:`ClaimedIdentity`).
- :mod:`p2p.testing.faults`: :func:`run_with_faults`, a measured swarm run
  under message loss and delay.
- :mod:`p2p.testing.scripts`: :func:`load_script`, a file of ``scripts/`` as a
  module.
- :mod:`p2p.testing.swarm_configs`: :func:`swarm_node_configs`, the configs a
  swarm spec makes, read back as a daemon reads them.
- :mod:`p2p.testing.lockstep`: :class:`LockstepRunner`, a simulation's train runner
  training the nodes of one virtual instant together (batched or not).
- :mod:`p2p.testing.procfs`: a daemon process's memory and CPU time.
- :mod:`p2p.testing.simnet`: :class:`SimNetwork`, a memory network whose links
  have a seeded latency, bandwidth and loss (:class:`Distribution`).
- :mod:`p2p.testing.sim_handshake`: :class:`TrustedHandshake`, a simulation's
  handshake: the Noise handshake's messages and identity checks without its
  cryptography (``SimNetwork(trusted_handshakes=True)``).
- :mod:`p2p.testing.sim_collector`: :class:`CollectorTuning`, the garbage
  collector's settings while a large simulation runs.
- :mod:`p2p.testing.sim_churn`: :class:`ChurnEvent`, churn scripts and
  :func:`random_churn`.
- :mod:`p2p.testing.sim_host`: :class:`Simulation`, N real nodes in one trio run
  on a virtual clock (``scripts/simulate.py``; see docs/simulation.md).

Daemon processes (``p2p run``) are started with :class:`p2p.swarm.Swarm`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from p2p.testing.clock import run_in_virtual_time, virtual_clock
from p2p.testing.memnet import (
    FaultyStream,
    MemoryNetwork,
    MemoryTransport,
    Tap,
    TransportOptions,
    TransportTuning,
)
from p2p.testing.procfs import cpu_seconds, memory_kib, reset_peak_memory
from p2p.testing.relay_attack import ClaimedIdentity, RelayAttacker
from p2p.testing.scripts import load_script
from p2p.testing.sim_churn import ChurnEvent, parse_churn_script, random_churn
from p2p.testing.sim_collector import CollectorTuning
from p2p.testing.sim_handshake import TrustedHandshake
from p2p.testing.simnet import (
    Distribution,
    SimAdmission,
    SimNetwork,
    SimTransport,
    parse_distribution,
)
from p2p.testing.waiting import DEFAULT_WAIT, wait_until
from p2p.testing.wire_client import (
    ask,
    connect_from,
    encoded_vector_fields,
    open_session,
    push_payload,
    raw_exchange,
    valid_push,
)

if TYPE_CHECKING:
    from p2p.testing.faults import FaultRunReport, lossy_swarm, run_with_faults
    from p2p.testing.lockstep import LockstepRunner, LockstepStats
    from p2p.testing.nodes import (
        LOOPBACK,
        admin_request,
        fast_spec,
        memory_addresses,
        memory_node,
        memory_swarm,
        running,
        tcp_node,
        tune_config,
        write_swarm_key,
    )
    from p2p.testing.sim_host import Simulation
    from p2p.testing.swarm_configs import swarm_node_configs

# The node builders load the node runtime (torch, the config schema): imported
# on first use, so that wire-level tests using only the network stay light.
_LAZY = {
    **dict.fromkeys(("FaultRunReport", "lossy_swarm", "run_with_faults"), "p2p.testing.faults"),
    **dict.fromkeys(("LOOPBACK", "admin_request", "fast_spec", "memory_addresses",
                     "memory_node", "memory_swarm", "running", "tcp_node", "tune_config",
                     "write_swarm_key"), "p2p.testing.nodes"),
    "swarm_node_configs": "p2p.testing.swarm_configs",
    "Simulation": "p2p.testing.sim_host",
    **dict.fromkeys(("LockstepRunner", "LockstepStats"), "p2p.testing.lockstep"),
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'p2p.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "DEFAULT_WAIT",
    "ChurnEvent",
    "Distribution",
    "CollectorTuning",
    "SimAdmission",
    "SimNetwork",
    "SimTransport",
    "Simulation",
    "TrustedHandshake",
    "parse_churn_script",
    "parse_distribution",
    "random_churn",
    "ClaimedIdentity",
    "RelayAttacker",
    "LOOPBACK",
    "FaultRunReport",
    "LockstepRunner",
    "LockstepStats",
    "FaultyStream",
    "MemoryNetwork",
    "MemoryTransport",
    "Tap",
    "TransportOptions",
    "TransportTuning",
    "admin_request",
    "ask",
    "connect_from",
    "cpu_seconds",
    "encoded_vector_fields",
    "fast_spec",
    "load_script",
    "lossy_swarm",
    "memory_addresses",
    "memory_kib",
    "memory_node",
    "memory_swarm",
    "open_session",
    "push_payload",
    "raw_exchange",
    "reset_peak_memory",
    "run_in_virtual_time",
    "run_with_faults",
    "running",
    "swarm_node_configs",
    "tcp_node",
    "tune_config",
    "valid_push",
    "virtual_clock",
    "wait_until",
    "write_swarm_key",
]
