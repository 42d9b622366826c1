"""docs/guide/api.md's complete example, run as a user would run it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide" / "api.md"


def test_the_complete_example_runs_and_both_nodes_learn(tmp_path: Path) -> None:
    (code,) = re.findall(r"^```python\n(.*?)^```", GUIDE.read_text(), flags=re.M | re.S)
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["node0", "node1"], done.stdout
    for line in lines:
        accuracy = float(re.search(r"accuracy ([0-9.]+)", line).group(1))  # type: ignore[union-attr]
        pushes = int(re.search(r"(\d+) pushes sent", line).group(1))  # type: ignore[union-attr]
        assert accuracy > 0.5 and pushes > 0, line
