"""The real-network testbed, small: a relay-only bootstrap and 3 learning daemons, one on
the public segment and one behind each of two NATs, until the two behind NATs talk over
a punched connection.

Runs ``scripts/reliability/netlab.py`` with 2 rounds. Needs root, iproute2 and
iptables (CI runs as root); skipped with the reason otherwise. Only the
namespaces the script creates are touched, and it deletes them in a ``finally``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

MISSING = [tool for tool in ("ip", "tc", "iptables") if shutil.which(tool) is None]


@pytest.mark.e2e
def test_nodes_behind_nats_reserve_relays_and_punch_a_direct_path(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the netns testbed needs root (network namespaces, iptables)")
    if MISSING:
        pytest.skip(f"the netns testbed needs {', '.join(MISSING)} "
                    "(Debian: apt-get install iproute2 iptables)")
    out = tmp_path / "netlab.json"
    proc = subprocess.run([sys.executable, "-m", "lab.reliability.netlab", "--public", "1",
                           "--lans", "1,1", "--no-symmetric", "--rounds", "2", "--no-compare",
                           "--until-punched", "120", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode == 77:
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["namespaces_left_behind"] == []
    run = r["runs"][0]
    assert run["unusable_advertised"] == []  # never 0.0.0.0, loopback or link-local
    public, *behind = run["nodes"]
    assert public["advertised"] == "203.0.113.11:7661"  # --listen 0.0.0.0, its own address
    for node in behind:
        # its relayed address, through a relay on the public segment (found by sampling)
        relay, _, _ = node["advertised"].partition("/circuit/")
        assert relay.startswith("203.0.113.") and node["relayed"], node
        assert node["reserved_with"] and node["reachable"] != "yes"
        assert node["view_size"] >= 1  # it joined through the relay, given by name
    assert run["sessions_across_networks"]["lan1-lan2"]["punched"] >= 1
    assert run["relay_bytes"] > 0
