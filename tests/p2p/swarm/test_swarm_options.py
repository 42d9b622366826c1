"""Issue 30, item 6: swarm options that compose, and the examples' launch lines.

``scripts/swarm.py --strategy graph|fedlinked`` declares the all-local layout and
the public split these strategies need; ``--semi-local auto --rounds 60`` scales
the pre-training to fit; each setting so chosen is said in one line. The
``examples/swarm.toml`` header starts as many nodes as it waits for.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from p2p.swarm.cli import build_parser, derived_settings, spec_from_args
from p2p.swarm.spec import SwarmError, node_config

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("strategy", "public"), [("graph", 200), ("fedlinked", 300)])
def test_an_all_local_strategy_gets_its_layout_and_public_split(strategy: str,
                                                                public: int) -> None:
    spec = spec_from_args(build_parser().parse_args(["--strategy", strategy, "--nodes", "3"]))
    config = node_config(spec, 1, Path("n1"), None)
    assert config.models == () and config.data.public_size == public
    assert config.strategy.name == strategy
    (line,) = derived_settings(spec)
    assert f"data.public_size {public} (--public-size N to change)" in line
    given = spec_from_args(build_parser().parse_args(["--strategy", strategy,
                                                      "--public-size", "120"]))
    assert node_config(given, 0, Path("n0"), None).data.public_size == 120
    with pytest.raises(SwarmError, match="shares no partial model"):
        spec_from_args(build_parser().parse_args(["--strategy", strategy, "--semi-local"]))


def test_semi_local_auto_scales_its_pre_training_to_the_rounds() -> None:
    spec = spec_from_args(build_parser().parse_args(["--semi-local", "auto", "--rounds", "60"]))
    assert node_config(spec, 0, Path("n0"), None).clustering.pretrain_rounds == 20
    assert derived_settings(spec) == [
        "--semi-local auto: pre-training 20 of the 60 rounds, the rest trains the groups "
        "(--pretrain-rounds N to change)"]
    default = spec_from_args(build_parser().parse_args(["--semi-local", "auto"]))
    assert node_config(default, 0, Path("n0"), None).clustering.pretrain_rounds == 60
    assert derived_settings(default) == []
    chosen = spec_from_args(build_parser().parse_args(
        ["--semi-local", "auto", "--rounds", "60", "--pretrain-rounds", "50"]))
    assert node_config(chosen, 0, Path("n0"), None).clustering.pretrain_rounds == 50


def test_the_swarm_example_starts_the_nodes_it_waits_for() -> None:
    text = (ROOT / "examples" / "swarm.toml").read_text()
    waits = tomllib.loads(text)["training"]["min_peers"]
    started = len(re.findall(r"^#\s+p2p run ", text, flags=re.MULTILINE))
    assert started >= waits + 1
    guide = (ROOT / "docs" / "guide" / "operations.md").read_text()
    block = guide.split("### Several nodes from one file", 1)[1].split("```", 2)[1]
    assert block.count("p2p run --config examples/swarm.toml") >= waits + 1
