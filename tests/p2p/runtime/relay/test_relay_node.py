"""Relay-only nodes: a daemon that loads no torch, and a swarm in memory whose node
behind a NAT trains with a public peer through a relay-only node."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from p2p.cli.admin_client import AdminClient
from p2p.config import NodeConfig, RelayConfig
from p2p.runtime.relay_node import TRAINING, RelayNode
from p2p.testing import MemoryNetwork, fast_spec, memory_node, running, wait_until
from p2p.wire.identity import Identity

ROOT = Path(__file__).resolve().parents[4]
RELAY = "203.0.113.1:7661"
PUBLIC = "203.0.113.2:7661"
BEHIND = "10.1.0.10:7661"


@pytest.mark.e2e
def test_relay_only_daemon_loads_no_torch(tmp_path: Path) -> None:
    data = tmp_path / "relay"
    log = tmp_path / "relay.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "p2p", "run", "--relay-only", "--config",
             str(ROOT / "examples" / "local.toml"), "--data-dir", str(data), "--listen",
             "127.0.0.1:0", "--bootstrap", ""], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120  # only a hang reaches it
        while not (data / "admin.sock").exists():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        status = AdminClient.for_data_dir(data, timeout=30).request("status")
        assert status["training"] == TRAINING and status["relay"]["serving"] is True
        maps = Path(f"/proc/{proc.pid}/maps")
        if maps.exists():  # Linux: the libraries the process mapped
            assert "torch" not in maps.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert proc.returncode == 0, log.read_text()


async def test_a_node_behind_a_nat_trains_with_a_peer_through_a_relay_only_node(
        tmp_path: Path) -> None:
    net = MemoryNetwork()
    net.unreachable.add(BEHIND)  # nobody can dial it: only it can dial out
    relay_dir = tmp_path / "relay"
    relay_dir.mkdir(mode=0o700)
    relay_config = NodeConfig().with_overrides(data_dir=str(relay_dir), listen=RELAY)
    relay_config = dataclasses.replace(
        relay_config, peer_sampling=dataclasses.replace(relay_config.peer_sampling, period=0.05))
    relay = RelayNode(relay_config, standalone=False,
                      transport=net.transport(Identity.load_or_create(relay_dir), RELAY))
    spec = fast_spec(nodes=2, rounds=6, scheme="full")
    public = memory_node(net, tmp_path / "public", spec, 0, PUBLIC, bootstrap=[RELAY])
    behind = memory_node(net, tmp_path / "behind", spec, 1, BEHIND, bootstrap=[RELAY],
                         relay=RelayConfig(use="always"))
    circuit = f"{RELAY}/circuit/{behind.identity.node_id.hex()}"
    async with trio.open_nursery() as nursery:
        await nursery.start(relay.run)
        async with running([public, behind]):
            # the node behind advertises its relayed address, its own one last
            await wait_until(lambda: behind.sampler.self_descriptor.address == circuit)
            # its own address comes last (private: it means something on its LAN only)
            assert behind.sampler.self_descriptor.alternates == (BEHIND,)
            await wait_until(lambda: behind.model_counter("global", "pushes_received") > 0
                             and public.transport.path_to(circuit) == "relayed",
                             what="the public node pushed to the node behind through the relay")
            await wait_until(lambda: all(n.progress.finished for n in (public, behind)))
            status = behind.admin.status()
            assert status.relay is not None
            (held,) = status.relay["reserved_with"]
            assert held["relay"] == RELAY and held["state"] == "active" and held["circuits"] >= 1
            peers = {p.id: p for p in public.admin.peers().view}
            assert peers[behind.identity.node_id.hex()].path == "relayed"
        relay_status = relay.admin.status().relay
        assert relay_status is not None and relay_status["circuits_opened"] >= 1
        assert relay_status["bytes_relayed"] > 0
        assert relay.sampler is not None and relay.sampler.self_descriptor.tags
        relay.request_stop()
