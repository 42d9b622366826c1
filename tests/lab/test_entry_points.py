"""``scripts/``: thin entry points, one per lab module, each answering ``--help``.

A script is run by path, which puts its own folder first on ``sys.path``: a
script named like a package it imports (``peersampling.py``) would shadow it.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest
from import_graph import PRODUCT, ROOT

SCRIPTS = ROOT / "scripts"
GROUPS = ("bench", "paper", "attack", "reliability")
ENTRIES = sorted(p for group in GROUPS for p in (SCRIPTS / group).glob("*.py"))


def entry_module(path: Path) -> str:
    """The module whose ``main`` the script at ``path`` runs."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and [a.name for a in node.names] == ["main"]:
            return node.module or ""
    raise AssertionError(f"{path.relative_to(ROOT)} imports no main")


def test_every_group_has_entry_points_and_every_lab_module_one() -> None:
    assert len(ENTRIES) >= 25
    for group in GROUPS:
        stems = {p.stem for p in (SCRIPTS / group).glob("*.py")}
        runnable = {p.stem for p in (SCRIPTS / "lab" / group).glob("*.py")
                    if "def main(" in p.read_text()}
        assert stems == runnable, (group, stems ^ runnable)


@pytest.mark.parametrize("path", ENTRIES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_entry_point_is_thin_and_shadows_nothing(path: Path) -> None:
    assert path.stem not in {*PRODUCT, "lab", *sys.stdlib_module_names}, path.stem
    assert entry_module(path) == f"lab.{path.parent.name}.{path.stem}"
    code = [line for line in path.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith(("#", '"', "import", "from"))]
    assert len(code) <= 4, code  # the __main__ guard and its call, nothing else


@pytest.mark.parametrize("path", ENTRIES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_entry_point_answers_help(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main = importlib.import_module(entry_module(path)).main
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    assert "usage:" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["swarm", "simulate"])
def test_top_level_scripts_run_the_product(name: str) -> None:
    module = {"swarm": "p2p.swarm.cli", "simulate": "p2p.simulation.cli"}[name]
    assert entry_module(SCRIPTS / f"{name}.py") == module
