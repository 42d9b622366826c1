"""A testing kit for the daemon: in-memory network, virtual time, node builders.

For tests, scripts and benchmarks alike (it never imports pytest), in the
manner of :mod:`trio.testing`: small and generic. Importing :mod:`p2p` does
not import this package. The network, clock, waiting and wire client are
light; the node builders load the node runtime (and so torch) on first use.
The in-process simulator is :mod:`p2p.simulation`; daemon processes are
started with :class:`p2p.swarm.Swarm`.
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
    from p2p.testing.swarm_configs import swarm_node_configs

# The node builders load the node runtime (torch, the config schema): imported
# on first use, so that wire-level tests using only the network stay light.
_LAZY = {
    **dict.fromkeys(("LOOPBACK", "admin_request", "fast_spec", "memory_addresses",
                     "memory_node", "memory_swarm", "running", "tcp_node", "tune_config",
                     "write_swarm_key"), "p2p.testing.nodes"),
    "swarm_node_configs": "p2p.testing.swarm_configs",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'p2p.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "DEFAULT_WAIT",
    "LOOPBACK",
    "FaultyStream",
    "MemoryNetwork",
    "MemoryTransport",
    "Tap",
    "TransportOptions",
    "TransportTuning",
    "admin_request",
    "ask",
    "connect_from",
    "encoded_vector_fields",
    "fast_spec",
    "memory_addresses",
    "memory_node",
    "memory_swarm",
    "open_session",
    "push_payload",
    "raw_exchange",
    "run_in_virtual_time",
    "running",
    "swarm_node_configs",
    "tcp_node",
    "tune_config",
    "valid_push",
    "virtual_clock",
    "wait_until",
    "write_swarm_key",
]
