"""The admission caps a node gives its transport (p2p.runtime.node_transport.node_admission)."""

from __future__ import annotations

from pathlib import Path

from p2p.config import config_from_dict
from p2p.runtime.node_transport import SILENT_PERIODS, node_admission
from p2p.testing.nodes import fast_spec, tcp_node
from p2p.wire.admission import AdmissionLimits
from p2p.wire.transport import Transport


def test_a_daemon_keeps_the_fixed_silence_a_simulation_counts_periods() -> None:
    fast = config_from_dict({"peer_sampling": {"period": 0.3}})
    daemon = node_admission(fast)
    # a session is silent while a large push still arrives: a daemon keeps 15 s
    assert daemon == AdmissionLimits.for_connections(fast.limits.max_connections)
    assert daemon.silence == 15.0
    simulated = node_admission(fast, simulated=True)
    assert simulated.silence == SILENT_PERIODS * 0.3
    assert simulated.max_sessions == fast.limits.max_connections
    slow = node_admission(config_from_dict({"peer_sampling": {"period": 30.0}}), simulated=True)
    assert slow.silence == slow.idle_limit  # never beyond the unconditional idle limit


def test_a_daemon_node_transport_takes_the_daemon_caps(tmp_path: Path) -> None:
    node = tcp_node(tmp_path / "a", fast_spec(nodes=2, shuffle_period=0.3))
    transport = node.transport
    try:
        assert isinstance(transport, Transport)
        assert transport.admission.limits == node_admission(node.config)
        assert transport.admission.limits.silence == 15.0
    finally:
        assert isinstance(transport, Transport)
        for sock in transport._bound_sockets or []:  # bound, never served
            sock.close()
