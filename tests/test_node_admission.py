"""The admission caps a node gives its transport (p2p.runtime.node_transport.node_admission)."""

from __future__ import annotations

from pathlib import Path

from p2p.config import config_from_dict
from p2p.runtime.node_transport import SILENT_PERIODS, node_admission
from p2p.testing.nodes import fast_spec, tcp_node
from p2p.wire.transport import Transport


def test_silence_is_counted_in_peer_sampling_periods() -> None:
    daemon = node_admission(config_from_dict({}))
    assert daemon.silence == 15.0  # the daemon's default period (1 s): as before
    assert daemon.max_sessions == config_from_dict({}).limits.max_connections
    swarm = node_admission(config_from_dict({"peer_sampling": {"period": 0.3}}))
    assert swarm.silence == SILENT_PERIODS * 0.3
    slow = node_admission(config_from_dict({"peer_sampling": {"period": 30.0}}))
    assert slow.silence == slow.idle_limit  # never beyond the unconditional idle limit


def test_a_node_transport_takes_the_scaled_silence(tmp_path: Path) -> None:
    node = tcp_node(tmp_path / "a", fast_spec(nodes=2, shuffle_period=0.3))
    transport = node.transport
    try:
        assert isinstance(transport, Transport)
        assert transport.admission.limits.silence == SILENT_PERIODS * 0.3
    finally:
        assert isinstance(transport, Transport)
        for sock in transport._bound_sockets or []:  # bound, never served
            sock.close()
