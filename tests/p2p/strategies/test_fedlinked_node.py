"""FedLinked on real nodes (memory network, virtual clock): pulls, target, no parameter sent."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import trio
import trio.testing

from p2p.config import StrategyConfig
from p2p.runtime.train_runner import InlineRunner
from p2p.strategies.fedlinked.node import FedLinkedStrategy
from p2p.testing import MemoryNetwork, fast_spec, memory_addresses, memory_node, running, wait_until

LIMIT = 300.0  # virtual seconds: generous (rounds take 1 s), free under the autojump clock
PUBLIC = 40


async def test_nodes_pull_representations_and_distil_without_sending_parameters(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    spec = fast_spec(nodes=3, rounds=8, steps_per_round=2, scheme="local", public_size=PUBLIC,
                     round_interval=1.0)  # virtual: peers get known between rounds
    net = MemoryNetwork()
    addresses = memory_addresses(3)
    strategy = StrategyConfig(name="fedlinked", fedlinked_warmup=1, fedlinked_every=1,
                              fedlinked_peers=2)
    nodes = [memory_node(net, tmp_path / f"n{i}", spec, i, addresses[i],
                         bootstrap=addresses[:1] if i else (), strategy=strategy,
                         train_runner=InlineRunner())
             for i in range(3)]
    linked = [n.strategy for n in nodes]
    assert all(isinstance(s, FedLinkedStrategy) for s in linked)
    async with running(nodes):
        with trio.fail_after(LIMIT):
            await wait_until(lambda: all(n.progress.finished for n in nodes), timeout=LIMIT)
            await wait_until(lambda: all(s.refreshes >= 1 for s in linked),  # type: ignore[attr-defined]
                             timeout=LIMIT)
        statuses = [n.admin.status().strategy for n in nodes]
        metrics = [n.admin.metrics().counters for n in nodes]
    width = nodes[0].learning.network.layout.network.sizes[-2]
    for node, s, status, counters in zip(nodes, linked, statuses, metrics, strict=True):
        assert isinstance(s, FedLinkedStrategy) and status is not None
        # no push-sum core at all: nothing the gossip driver could push
        assert node.cores == {} and not node.by_fingerprint
        assert not any(k.endswith("bytes_sent") and v for k, v in node.flat_model_counters().items())
        assert s.pulls >= 1 and s.bytes_pulled == s.pulls * PUBLIC * width * 4
        assert status["name"] == "fedlinked" and status["parameter_bytes_sent"] == 0
        utilities = status["utilities"]
        assert isinstance(utilities, dict) and utilities
        own_prefix = node.identity.node_id[:4].hex()
        assert own_prefix not in utilities  # a node never pulls from itself
        assert all(np.isfinite(u) and 0.0 <= u <= 1.0 + 1e-9 for u in utilities.values())
        assert counters["strategy.representation_bytes_pulled"] == s.bytes_pulled
