"""Adding a strategy touches its folder and one registry line, nothing else (issue 29).

The fixture folder ``tests/toy_strategy/`` (beside the shared kits: tests import no
``tests.`` package) is a whole strategy (settings, messages, maths, node side); the
one line registering it is the fixture's ``monkeypatch.setitem``. From that line alone the config knows its keys, their
errors and its check, the reference generates its rows, the nodes speak its
messages and run it end to end.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lab import config_reference
from toy_strategy.messages import ToyAsk, ToyTell

from p2p.config import SECTION_KEYS, ConfigError, parse_config_text, render_config_toml
from p2p.strategies import STRATEGIES
from p2p.testing import MemoryNetwork, fast_spec, memory_swarm, running, wait_until
from p2p.wire import codec

TOY = Path(__file__).parents[2] / "toy_strategy"


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(STRATEGIES, "toy", "toy_strategy:PLUGIN")  # the line
    yield


def test_the_toy_is_one_folder_of_the_usual_rooms() -> None:
    assert sorted(p.name for p in TOY.glob("*.py")) == [
        "__init__.py", "maths.py", "messages.py", "node.py", "settings.py"]


@pytest.mark.usefixtures("toy")
def test_the_config_knows_the_toys_keys_errors_and_check() -> None:
    assert SECTION_KEYS["strategy"][-2:] == ("toy_period", "toy_peers")
    config = parse_config_text('[training]\nrounds = 5\n[strategy]\nname = "toy"\n'
                               "toy_period = 0.5\n")
    assert (config.strategy.name, config.strategy.toy_period) == ("toy", 0.5)
    assert parse_config_text(render_config_toml(config)) == config
    with pytest.raises(ConfigError) as bad:
        parse_config_text('[training]\nrounds = 5\n[strategy]\nname = "toy"\ntoy_peers = 0\n')
    assert bad.value.key == "strategy.toy_peers"
    with pytest.raises(ConfigError, match="did you mean 'toy_peers'") as typo:
        parse_config_text('[strategy]\nname = "toy"\ntoy_peer = 2\n')
    assert typo.value.key == "strategy.toy_peer"
    with pytest.raises(ConfigError) as check:  # its check across sections
        parse_config_text('[strategy]\nname = "toy"\n')
    assert check.value.key == "training.rounds"
    with pytest.raises(ConfigError, match="not supported with DP-SGD"):
        parse_config_text('[training]\nrounds = 5\n[gossip]\nprivacy = "dp"\n'
                          '[strategy]\nname = "toy"\n')


@pytest.mark.usefixtures("toy")
def test_the_reference_has_the_toys_rows() -> None:
    rows = config_reference.strategy_table()
    assert '`"toy"`: asks peers how far they trained' in rows[2]
    assert "| `strategy.toy_period` | `0.05` | toy: seconds between two asks |" in rows


def test_without_its_line_the_toy_is_unknown() -> None:
    with pytest.raises(ConfigError, match="unknown key") as err:
        parse_config_text("[strategy]\ntoy_period = 0.5\n")
    assert err.value.key == "strategy.toy_period"
    with pytest.raises(ConfigError, match="expected one of"):
        parse_config_text('[strategy]\nname = "toy"\n')


@pytest.mark.usefixtures("toy")
async def test_the_toy_runs_on_kit_nodes_end_to_end(tmp_path: Path) -> None:
    nodes = memory_swarm(tmp_path, MemoryNetwork(), fast_spec(nodes=3, rounds=3,
                                                              strategy="toy"))
    assert codec.is_registered(ToyAsk) and codec.is_registered(ToyTell)  # by the nodes
    async with running(nodes):
        await wait_until(lambda: all(n.strategy_status()["told"] >= 2
                                     and n.strategy_status()["asked"] >= 1
                                     and n.strategy_status()["after_rounds"] >= 3
                                     for n in nodes), what="every toy asked and was asked")
    for node in nodes:
        status = node.strategy_status()
        assert status["name"] == "toy" and "failed" not in status
        assert 0.0 <= float(status["mean_rounds"]) <= 3.0
