"""A swarm's daemons run the code of the tree that wrote their configs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import p2p
from p2p.swarm import daemon_environment

TREE = str(Path(p2p.__file__).resolve().parent.parent)


def test_the_tree_comes_first_on_the_daemons_path() -> None:
    env = daemon_environment({"PYTHONPATH": "/elsewhere", "HOME": "/h"})
    assert env["PYTHONPATH"].split(os.pathsep) == [TREE, "/elsewhere"]
    assert env["OMP_NUM_THREADS"] == "1" and env["HOME"] == "/h"
    assert daemon_environment({})["PYTHONPATH"] == TREE


def test_a_daemon_started_elsewhere_imports_this_tree(tmp_path: Path) -> None:
    # another tree on the caller's PYTHONPATH (as when comparing two checkouts) would
    # be imported first without the environment: this tree must win
    other = tmp_path / "other_tree"
    (other / "p2p").mkdir(parents=True)
    (other / "p2p" / "__init__.py").write_text("raise ImportError('the other tree')\n")
    (tmp_path / "run").mkdir()
    env = daemon_environment({"PYTHONPATH": str(other)})
    found = subprocess.run(
        [sys.executable, "-c", "import p2p, pathlib; print(pathlib.Path(p2p.__file__).parent)"],
        env=env, cwd=tmp_path / "run", capture_output=True, text=True, timeout=120,
        check=True)
    assert found.stdout.strip() == str(Path(TREE) / "p2p")
