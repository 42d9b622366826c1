"""The strategy seam: a strategy named in ``[strategy]`` reaches every part of the node."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import trio
import trio.testing

from gossip import PushSum
from p2p.config import ConfigError, NodeConfig, StrategyConfig, load_config
from p2p.runtime.checkpoint import CheckpointStore
from p2p.runtime.train_runner import InlineRunner
from p2p.strategies import STRATEGIES, LossTerm, StrategyHost, StrategyPlugin, build_strategy
from p2p.strategies.partial.node import PartialStrategy
from p2p.testing import MemoryNetwork, fast_spec, memory_addresses, memory_node, running, wait_until
from p2p.wire import codec
from p2p.wire.handshake import PeerInfo

LIMIT = 10_000.0  # virtual seconds: generous, free under the autojump clock


@dataclass(frozen=True)
class FakeAsk:
    note: str


@dataclass(frozen=True)
class FakeReply:
    rounds: int


codec.register_messages(((FakeAsk, "test.fake_ask"), (FakeReply, "test.fake_reply")))

FAKE_FP = b"\x42" * 32  # the fingerprint every fake node's gossiped vector shares


class FakeStrategy:
    """Counts what the node calls; asks a peer for its rounds; gossips (i, 2i)."""

    name = "fake"

    def __init__(self, config: NodeConfig) -> None:
        self.index = config.data.node_index
        self.loss_calls = 0
        self.after_rounds = 0
        self.answered = 0
        self.replies: list[int] = []
        self.host: StrategyHost | None = None
        self.core: PushSum | None = None

    def install(self, host: StrategyHost) -> None:
        self.host = host
        host.requests.add(FakeAsk, self._serve)
        self.core = host.add_gossiped("fake.pair", FAKE_FP,
                                      np.array([self.index + 1.0, 2.0 * (self.index + 1)]))

    async def _serve(self, peer: PeerInfo, msg: FakeAsk) -> FakeReply:
        assert self.host is not None
        self.answered += 1
        return FakeReply(rounds=self.host.rounds_done())

    def loss_term(self) -> LossTerm:
        def term() -> torch.Tensor:
            self.loss_calls += 1
            return torch.zeros(())
        return term

    def after_round(self) -> None:
        assert self.host is not None and self.host.model_lock.locked()
        self.after_rounds += 1

    async def run(self) -> None:
        assert self.host is not None
        while not self.replies:
            for peer in self.host.sample_peers(1):
                reply = await self.host.request(peer, FakeAsk("rounds?"), FakeReply)
                if reply is not None:
                    self.replies.append(reply.rounds)
            await trio.sleep(0.1)

    def status(self) -> Mapping[str, object]:
        return {"after_rounds": self.after_rounds, "replies": len(self.replies)}


def test_unknown_strategy_names_the_key_and_the_known_names(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"strategy\.name.*'partial'.*'fedcurv'") as err:
        StrategyConfig(name="fedprox")
    assert err.value.key == "strategy.name"
    path = tmp_path / "node.toml"
    path.write_text('[strategy]\nname = "fedcruv"\n')
    with pytest.raises(ConfigError, match=r"strategy\.name.*did you mean 'fedcurv'"):
        load_config(path)


def test_partial_is_the_default_and_adds_nothing() -> None:
    config = NodeConfig()
    assert config.strategy.name == "partial"
    strategy = build_strategy(config)
    assert isinstance(strategy, PartialStrategy) and strategy.loss_term() is None


def test_strategies_other_than_partial_refuse_dp() -> None:
    with pytest.raises(ConfigError, match=r"strategy\.name.*DP-SGD") as err:
        NodeConfig(gossip=dataclasses.replace(NodeConfig().gossip, privacy="dp"),
                   strategy=StrategyConfig(name="fedcurv"))
    assert err.value.key == "strategy.name"


async def test_a_strategy_reaches_handlers_loss_rounds_gossip_and_status(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        autojump_clock: trio.testing.MockClock) -> None:
    monkeypatch.setitem(STRATEGIES, "fake", StrategyPlugin(name="fake", summary="a test's",
                                                          build=FakeStrategy))
    spec = fast_spec(rounds=4, steps_per_round=3)
    net = MemoryNetwork()
    addresses = memory_addresses(2)
    nodes = [memory_node(net, tmp_path / f"n{i}", spec, i, addresses[i],
                         bootstrap=addresses[:1] if i else (),
                         strategy=StrategyConfig(name="fake"), train_runner=InlineRunner())
             for i in range(2)]
    fakes = [n.strategy for n in nodes]
    assert all(isinstance(f, FakeStrategy) for f in fakes)
    async with running(nodes):
        with trio.fail_after(LIMIT):
            await wait_until(lambda: all(n.progress.finished for n in nodes), timeout=LIMIT)
            await wait_until(lambda: all(f.replies for f in fakes), timeout=LIMIT)  # type: ignore[attr-defined]
            # the gossiped vectors average among the two holders: (1.5, 3.0) each
            await wait_until(lambda: all(np.allclose(f.core.values, [1.5, 3.0])  # type: ignore[attr-defined]
                                         for f in fakes), timeout=LIMIT)
        statuses = [n.admin.status().strategy for n in nodes]
        metrics = [n.admin.metrics().counters for n in nodes]
    for node, fake in zip(nodes, fakes, strict=True):
        assert isinstance(fake, FakeStrategy)
        assert fake.after_rounds == node.progress.round == 4
        assert fake.loss_calls == 4 * 3  # every SGD step of every round
        assert fake.answered >= 1 and fake.replies[0] >= 0
        assert node.by_fingerprint[FAKE_FP] == "fake.pair"
        assert "fake.pair" not in node.cores  # not a model: no sync, no checkpoint
    assert statuses[0] == {"name": "fake", "after_rounds": 4, "replies": 1}
    assert metrics[1]["strategy.after_rounds"] == 4


class BrokenStrategy(FakeStrategy):
    """Fails in its background task (node 0) or after its second round (node 1)."""

    name = "broken"

    def after_round(self) -> None:
        super().after_round()
        if self.index == 1 and self.after_rounds == 2:
            raise RuntimeError("after-round bug")

    async def run(self) -> None:
        if self.index == 0:
            raise ValueError("background bug")


async def test_a_failing_strategy_is_switched_off_and_the_node_runs_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        autojump_clock: trio.testing.MockClock) -> None:
    monkeypatch.setitem(STRATEGIES, "broken", StrategyPlugin(name="broken", summary="a test's",
                                                            build=BrokenStrategy))
    spec = fast_spec(rounds=4, steps_per_round=3)
    net = MemoryNetwork()
    addresses = memory_addresses(2)
    nodes = [memory_node(net, tmp_path / f"n{i}", spec, i, addresses[i],
                         bootstrap=addresses[:1] if i else (),
                         strategy=StrategyConfig(name="broken"), train_runner=InlineRunner())
             for i in range(2)]
    async with running(nodes):
        with trio.fail_after(LIMIT):
            await wait_until(lambda: all(n.progress.finished for n in nodes), timeout=LIMIT)
        statuses = [n.strategy_status() for n in nodes]
    # every node trained all its rounds and stopped cleanly (final checkpoint written)
    assert [n.progress.round for n in nodes] == [4, 4]
    assert statuses[0]["failed"] == "run: ValueError: background bug"
    assert statuses[1]["failed"] == "after_round: RuntimeError: after-round bug"
    broken = nodes[1].strategy
    assert isinstance(broken, BrokenStrategy) and broken.after_rounds == 2  # not called again
    assert nodes[1].learning.trainer.loss_term is None and broken.loss_calls == 2 * 3
    for i in range(2):
        saved = CheckpointStore(tmp_path / f"n{i}").load()
        assert saved is not None and saved.round == 4
