"""A swarm of real nodes over a lossy, slow in-memory network, measured.

Each write is delayed up to ``delay`` seconds and lost with probability
``loss`` (the connection then goes dark, so the requester times out and must
retransmit). Pushes, acks, shuffles and handshakes are all exposed. Shared by
``tests/test_reliability_faults.py`` and ``scripts/reliability/faults.py``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import trio

from p2p.runtime.node import Node
from p2p.swarm import SwarmSpec
from p2p.testing.memnet import MemoryNetwork
from p2p.testing.nodes import memory_addresses, memory_swarm
from p2p.testing.waiting import wait_until

__all__ = ["FaultRunReport", "lossy_swarm", "run_with_faults"]

DEFAULT_TIMEOUT = 0.3


@dataclass(frozen=True)
class FaultRunReport:
    """What one run under faults measured (weights are per node: 1.0 is exact)."""

    nodes: int
    accuracy: list[float | None]  # final accuracy of each node
    weight_min: float  # lowest live total push-sum weight seen during the run
    weight_max: float
    settled: float  # total once faults stopped and nothing was in flight
    dropped: int  # writes lost by the network
    retransmissions: int
    duplicates: int
    failures: int
    pushes: int  # pushes merged, over all nodes

    def as_dict(self) -> dict[str, object]:
        """The report as plain JSON-ready values."""
        return dataclasses.asdict(self)


def lossy_swarm(root: Path, net: MemoryNetwork, spec: SwarmSpec,
                timeout: float = DEFAULT_TIMEOUT) -> list[Node]:
    """The nodes of ``spec`` over ``net`` with connect, read and push timeouts of ``timeout``."""
    return memory_swarm(root, net, spec, addresses=memory_addresses(spec.nodes, subnet="10.1.0"),
                        push_timeout=timeout, connect_timeout=timeout, read_timeout=timeout,
                        idle_timeout=5.0)


async def run_with_faults(root: Path, *, nodes: int, rounds: int, loss: float,
                          delay: float, seed: int = 0, timeout: float = DEFAULT_TIMEOUT,
                          shuffle_period: float = 0.1, round_interval: float = 0.02,
                          finish_within: float = 300.0) -> FaultRunReport:
    """Train ``nodes`` nodes for ``rounds`` rounds under faults, then let in-flight pushes settle.

    Node data directories go under ``root``. Raises ``trio.TooSlowError`` if
    training does not finish within ``finish_within`` seconds or the push-sum
    exchanges do not settle within 60 s once faults stop.
    """
    # a shuffle must finish within its period: keep it well above a few delays
    spec = SwarmSpec(nodes=nodes, rounds=rounds, scheme="full", round_interval=round_interval,
                     shuffle_period=shuffle_period, eval_every=rounds, steps_per_round=5,
                     seed=seed)
    net = MemoryNetwork(seed=seed, message_loss=loss, max_delay=delay)
    swarm = lossy_swarm(root, net, spec, timeout)
    weights: list[float] = []

    def total() -> float:
        return sum(n.cores["global"].weight for n in swarm)

    async with trio.open_nursery() as nursery:
        for node in swarm:
            await nursery.start(node.run)

        async def sample() -> None:
            while True:
                weights.append(total())
                await trio.sleep(0.02)

        nursery.start_soon(sample)
        await wait_until(lambda: all(n.progress.finished for n in swarm), finish_within,
                         what="all nodes finished training")
        # faults stop; what is in flight must settle to the exact total
        net.message_loss = 0.0
        net.max_delay = 0.0
        await wait_until(lambda: all(n.cores["global"].outstanding == 0 for n in swarm), 60,
                         what="no push outstanding")
        settled = total()
        for node in swarm:
            node.request_stop()
        nursery.cancel_scope.cancel()
    counters = [n.model_counters("global") for n in swarm]
    return FaultRunReport(
        nodes=nodes,
        accuracy=[n.progress.accuracy for n in swarm],
        weight_min=min(weights) / nodes,
        weight_max=max(weights) / nodes,
        settled=settled / nodes,
        dropped=net.messages_dropped,
        retransmissions=sum(c["retransmissions"] for c in counters),
        duplicates=sum(c["duplicates"] for c in counters),
        failures=sum(c["failures"] for c in counters),
        pushes=sum(c["pushes_received"] for c in counters),
    )
