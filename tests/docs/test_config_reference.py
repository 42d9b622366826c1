"""The configuration reference's ``[strategy]`` table is the one the strategies' settings
generate (``python -m lab.config_reference`` rewrites it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lab import config_reference

from p2p.strategies import STRATEGY_TABLE


def test_the_committed_strategy_table_is_generated_from_the_settings(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert config_reference.main(["--check"]) == 0, capsys.readouterr().out


def test_the_check_fails_on_a_stale_table_and_the_generator_mends_it(tmp_path: Path) -> None:
    page = tmp_path / "configuration.md"
    current = config_reference.PAGE.read_text()
    stale = current.replace("| `strategy.fedcurv_every` |", "| `strategy.fedcurv_evry` |")
    assert stale != current
    page.write_text(stale)
    assert config_reference.main(["--check", "--page", str(page)]) == 1
    assert config_reference.main(["--page", str(page)]) == 0
    assert page.read_text() == current


def test_every_key_of_every_strategy_has_its_row() -> None:
    rows = config_reference.strategy_table()
    for plugin in STRATEGY_TABLE.values():
        assert f'`"{plugin.name}"`: {plugin.summary}' in rows[2]
    keys = [row.split("`")[1] for row in rows[2:]]
    assert keys == [f"strategy.{k}" for k in
                    ("name", *(k for p in STRATEGY_TABLE.values() if p.settings
                               for k in p.settings.__dataclass_fields__))]
