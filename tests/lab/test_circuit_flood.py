"""The circuit flood script, small: a relay's caps hold and an honest peer still gets a
circuit (fair shares) while identities on two hosts keep asking for more."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab.attack.circuit_flood import main


@pytest.mark.e2e
def test_a_relay_under_a_circuit_flood_keeps_its_caps_and_serves_an_honest_peer(
        tmp_path: Path) -> None:
    out = tmp_path / "flood.json"
    assert main(["--window", "2", "--attackers", "4", "--sources", "2", "--sessions", "3",
                 "--max-circuits", "6", "--per-peer", "2", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["peak_circuits"] <= 6 and r["peak_per_initiator"] <= 2
    assert r["peak_per_target"] <= 2 * 2
    assert r["circuits_refused"] > 0
    assert r["honest_baseline"]["honest_ok"] >= 1
    assert r["honest_under_flood"]["honest_ok"] >= 1
