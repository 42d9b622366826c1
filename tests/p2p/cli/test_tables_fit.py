"""Issue 30, item 4: tables that fit, never breaking a value across lines.

At 80 columns the swarm's results and ``p2p models`` wrapped inside values
(``0.07 / 2`` for a loss of 0.072, ``92.5 / %``, ``115/9 / 4/0``, ``1.0 / MiB``,
headers ``trai n``). Now a narrow table gets short headers, then drops columns
(named in a caption); with room, every column is there.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
import trio

from p2p.cli.fit import fit_table
from p2p.cli.main import main
from p2p.cli.render import render_result, to_text
from p2p.swarm.cli import RESULTS_FITTING, results_table
from p2p.testing import fast_spec, running, tcp_node, wait_until

NODES = [{"node": i, "permutation": "8:9" if i % 2 else "id", "accuracy": 0.925,
          "loss": 0.072, "round": 1159, "pushes_sent": 11594, "pushes_received": 11000,
          "pushes_rejected": 3, "waves": 500, "bytes_sent": 1.2e6, "wire_bytes_sent": 1.5e6}
         for i in range(12)]
MODELS = {"models": [
    {"name": "global", "kind": "global", "size": 115904, "fingerprint": "ab12" * 16,
     "weight": 1.3, "holders": 2, "pushes_sent": 115940, "pushes_received": 4000,
     "pushes_rejected": 0, "bytes_sent": 2 ** 20, "bytes_received": 10 * 2 ** 30},
    {"name": "local", "kind": "local", "size": 0}]}


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


def test_the_swarm_results_fit_80_columns_with_every_value_whole() -> None:
    text = to_text(fit_table(results_table({"nodes": NODES}), 80, **RESULTS_FITTING), width=80)
    assert all(len(line) <= 80 for line in _lines(text))
    rows = [line for line in _lines(text) if line.startswith("│")]
    assert len(rows) == 12  # one line per node: nothing wrapped
    for value in ("92.5%", "0.072", "1159", "11594", "1.20 MB"):
        assert all(value in row for row in rows), value
    assert "trai n" not in text and "not shown at 80 columns: wire sent" in text


def test_with_room_every_column_is_shown() -> None:
    text = to_text(fit_table(results_table({"nodes": NODES}), 140, **RESULTS_FITTING),
                   width=140)
    assert "1.50 MB" in text and "not shown" not in text and "accuracy" in text


def test_p2p_models_fits_80_columns_with_every_value_whole() -> None:
    text = to_text(render_result("models", MODELS, 80), width=80)
    assert all(len(line) <= 80 for line in _lines(text))
    (row,) = [line for line in _lines(text) if line.startswith("│ global")]
    for value in ("115,904", "115,940/4,000/0", "1.0 MiB", "10.0 GiB"):
        assert value in row, value
    wide = to_text(render_result("models", MODELS, 200), width=200)
    assert "fingerprint" in wide and "semi-local" not in wide and "not shown" not in wide


@pytest.mark.e2e
async def test_p2p_models_of_a_running_node_fits_an_80_column_pipe(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = tcp_node(tmp_path / "n0", fast_spec(rounds=1))
    monkeypatch.setenv("COLUMNS", "80")
    async with running([node]):
        await wait_until(lambda: node.progress.finished)
        out = io.StringIO()

        def models() -> int:
            with contextlib.redirect_stdout(out):
                return main(["models", "--data-dir", str(tmp_path / "n0")])

        assert await trio.to_thread.run_sync(models) == 0
    lines = _lines(out.getvalue())
    assert all(len(line) <= 80 for line in lines), out.getvalue()
    (row,) = [line for line in lines if line.startswith("│ global")]
    assert re.search(r"│\s+[\d,]+/[\d,]+/[\d,]+ │", row) and re.search(r"\d+(\.\d)? (B|KiB)", row)
