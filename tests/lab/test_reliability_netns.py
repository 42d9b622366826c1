"""Daemons in two network namespaces over a veth link with netem loss and delay (slow).

Runs ``scripts/reliability/netns.py``; skipped unless root with iproute2 and
network namespaces (the script exits with 77 then). Only namespaces the script
creates are touched, and it deletes them in a ``finally``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.e2e
def test_training_over_a_lossy_slow_link(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("starts daemons in network namespaces: run with -m slow")
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("needs root and iproute2")
    out = tmp_path / "netns.json"
    proc = subprocess.run([sys.executable, "-m", "lab.reliability.netns",
                           "--json", str(out)], capture_output=True, text=True, timeout=900)
    if proc.returncode == 77:
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    r = json.loads(out.read_text())
    assert r["namespaces_left_behind"] == []
    lossy, clean = r["netem"], r["clean"]
    assert lossy["pushes_received"] > 0 and lossy["pushes_rejected"] == 0
    assert 0.5 < lossy["weight_per_node_min"] and lossy["weight_per_node_max"] < 2.0
    assert lossy["accuracy_median"] >= clean["accuracy_median"] - 0.1
