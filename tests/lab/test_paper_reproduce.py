"""``scripts/paper/reproduce.py NAME`` runs the experiment script of each other scheme."""

from __future__ import annotations

import importlib.util

import pytest
from lab.paper import reproduce as paper_reproduce


def test_every_scheme_experiment_has_its_script_and_takes_its_own_options(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    reproduce_paper = paper_reproduce
    assert set(reproduce_paper.SCHEME_EXPERIMENTS) == {"fedcurv", "graph", "fedlinked",
                                                      "associative"}
    for name, script in reproduce_paper.SCHEME_EXPERIMENTS.items():
        assert importlib.util.find_spec(script) is not None, script
        with pytest.raises(SystemExit) as exited:
            reproduce_paper.main([name, "--help"])
        assert exited.value.code == 0
        usage = capsys.readouterr().out
        # the scheme script's own parser answered, not reproduce_paper's
        assert "--seeds" in usage and "averaging-level" not in usage, name


def test_the_papers_own_experiments_still_parse_as_before(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    reproduce_paper = paper_reproduce
    with pytest.raises(SystemExit) as exited:
        reproduce_paper.main(["--help"])
    assert exited.value.code == 0
    usage = capsys.readouterr().out
    assert "averaging-level" in usage and "fedlinked" in usage
