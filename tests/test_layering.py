"""The dependency direction of DESIGN section 2, checked on the source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# package -> top-level modules it must never import
FORBIDDEN = {
    "peersampling": {"torch", "p2p", "learner", "gossip"},
    "gossip": {"torch", "p2p", "learner", "peersampling"},
    "learner": {"p2p", "gossip", "peersampling", "trio", "socket"},
}
# trio only in the thin drivers of the sans-IO packages
TRIO_ALLOWED = {"driver.py", "drivers.py"}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_respects_dependency_direction(package: str) -> None:
    offences = []
    for path in sorted((ROOT / package).rglob("*.py")):
        forbidden = set(FORBIDDEN[package])
        if package in {"peersampling", "gossip"} and path.name not in TRIO_ALLOWED:
            forbidden.add("trio")
        bad = imported_roots(path) & forbidden
        if bad:
            offences.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not offences, "; ".join(offences)


def test_imported_roots_sees_both_import_forms(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("import torch.nn\nfrom trio import sleep\nfrom . import x\n")
    assert imported_roots(sample) == {"torch", "trio"}
