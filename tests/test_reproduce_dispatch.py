"""``scripts/reproduce_paper.py NAME`` runs the experiment script of each other scheme."""

from __future__ import annotations

from pathlib import Path

import pytest

from p2p.testing import load_script

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def test_every_scheme_experiment_has_its_script_and_takes_its_own_options(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    reproduce_paper = load_script("reproduce_paper", monkeypatch)
    assert set(reproduce_paper.SCHEME_EXPERIMENTS) == {"fedcurv", "graph", "fedlinked",
                                                      "associative"}
    for name, script in reproduce_paper.SCHEME_EXPERIMENTS.items():
        assert (SCRIPTS / script).is_file(), script
        with pytest.raises(SystemExit) as exited:
            reproduce_paper.main([name, "--help"])
        assert exited.value.code == 0
        usage = capsys.readouterr().out
        # the scheme script's own parser answered, not reproduce_paper's
        assert "--seeds" in usage and "averaging-level" not in usage, name


def test_the_papers_own_experiments_still_parse_as_before(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    reproduce_paper = load_script("reproduce_paper", monkeypatch)
    with pytest.raises(SystemExit) as exited:
        reproduce_paper.main(["--help"])
    assert exited.value.code == 0
    usage = capsys.readouterr().out
    assert "averaging-level" in usage and "fedlinked" in usage
