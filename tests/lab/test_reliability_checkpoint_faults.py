"""The checkpoint fault injection (``scripts/reliability/checkpoint_faults.py``), one
case of each kind: no corrupted checkpoint loads silently, no file is overwritten."""

from __future__ import annotations

from pathlib import Path

from lab.reliability.checkpoint_faults import KINDS, run


def test_every_kind_of_fault_is_refused_or_fallen_back(tmp_path: Path) -> None:
    result = run(len(KINDS), seed=1, root=tmp_path)
    assert result["loaded_silently"] == 0 and result["overwritten"] == 0, result
    assert result["refused"] + result["fallen_back"] == len(KINDS)
    assert result["per_kind"]["truncate"] == {"fallen back": 1}
    assert result["per_kind"]["both"] == {"refused": 1}
    assert result["per_kind"]["older-only"] == {"refused": 1}
