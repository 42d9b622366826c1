"""Every ``docs/...md`` page named in the code (product packages, the lab, the
tests) exists: the pages a docstring, a help text or an error line sends a
reader to must not go stale when the docs move (docs/design/architecture.md)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("p2p", "learner", "gossip", "peersampling", "common", "scripts", "tests")
DOC_PATH = re.compile(r"docs/[A-Za-z0-9_-][A-Za-z0-9_./-]*?\.md")


def test_docs_pages_named_in_the_code_exist() -> None:
    missing = []
    for source in SOURCES:
        for path in sorted((ROOT / source).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                for name in DOC_PATH.findall(line):
                    if not (ROOT / name).is_file():
                        missing.append(f"{path.relative_to(ROOT)}:{number}: {name}")
    assert not missing, "pages that do not exist:\n" + "\n".join(missing)
