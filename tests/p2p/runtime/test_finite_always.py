"""Issue 30, item 7: a node never dies of a NaN its training or a peer produced.

A round that leaves a non-finite loss, parameter or optimizer value is skipped and
the state before it restored (:class:`~p2p.runtime.finite_guard.FiniteGuard`);
after 3 in a row training stops and ``p2p status`` says so while the node keeps
serving. A peer's NaN push is refused with its reason; a NaN in FedCurv's Fisher
estimate is logged and the contribution kept. Nodes run in virtual time with
training inline, so the rounds the NaNs hit are exactly known.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
import trio
import trio.testing

from gossip import EncodedVector, Push
from p2p.config import StrategyConfig
from p2p.runtime.checkpoint import CheckpointStore
from p2p.runtime.finite_guard import FiniteGuard
from p2p.runtime.node import Node
from p2p.runtime.train_runner import InlineRunner
from p2p.strategies.fedcurv import node as fedcurv
from p2p.testing import MemoryNetwork, fast_spec, memory_addresses, memory_node, running, wait_until
from p2p.wire.handshake import PeerInfo
from p2p.wire.messages import Error

SPEC = fast_spec(rounds=8, steps_per_round=2, eval_every=1)
LIMIT = 600.0  # virtual seconds


def _alone(tmp_path: Path, **options: object) -> Node:
    return memory_node(MemoryNetwork(), tmp_path / "n0", SPEC, 0, "10.0.0.1:7000",
                       train_runner=InlineRunner(), **options)  # type: ignore[arg-type]


def _nan_gradients(node: Node, from_round: int, steps: int | None) -> None:
    """Gradients become NaN once the node trains round ``from_round``, for ``steps`` steps
    (None: for good)."""
    left = [steps]

    def hook(grad: torch.Tensor) -> torch.Tensor:
        if node.progress.round + 1 < from_round or left[0] == 0:
            return grad
        if left[0] is not None:
            left[0] -= 1
        return grad * float("nan")

    node.learning.network.flat.register_hook(hook)


def _finite(node: Node) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in node.learning.network.state_dict().values())


async def test_a_nan_gradient_skips_its_round_and_training_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        autojump_clock: trio.testing.MockClock) -> None:
    node = _alone(tmp_path)
    _nan_gradients(node, from_round=3, steps=SPEC.steps_per_round)  # one round's steps
    async with running([node]):
        with trio.fail_after(LIMIT):
            await wait_until(lambda: node.progress.finished, timeout=LIMIT)
    assert node.progress.round == SPEC.rounds and _finite(node)
    assert node.counters["nonfinite_rounds"] == 1 and node.finite.stopped is None
    (skipped,) = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert skipped.levelno == logging.WARNING
    assert skipped.getMessage().startswith("round 3 skipped: parameter flat holds ")
    assert "the state before the round is restored (1 of 3 non-finite rounds" in \
        skipped.getMessage()
    state = CheckpointStore(tmp_path / "n0").load()
    assert state is not None and state.round == SPEC.rounds  # the final checkpoint is good


async def test_three_non_finite_rounds_in_a_row_stop_training_and_status_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        autojump_clock: trio.testing.MockClock) -> None:
    node = _alone(tmp_path)
    before: dict[str, torch.Tensor] = {}

    def keep_round_2() -> None:
        if node.progress.round == 2 and not before:
            before.update({k: v.clone() for k, v in node.learning.network.state_dict().items()})

    _nan_gradients(node, from_round=3, steps=None)
    async with running([node]):
        with trio.fail_after(LIMIT):
            await wait_until(lambda: (keep_round_2(), node.progress.finished)[1], timeout=LIMIT)
        status = node.admin.status()
        assert status.training is not None and status.training.startswith(
            "stopped (non-finite values in 3 rounds in a row, the last at round 3: parameter "
            "flat holds ")
        assert status.training.endswith("); still serving peers")
        # still serving: a peer's push is answered
        reply = await node.handle_request(PeerInfo(b"\x07" * 32, "10.0.0.9:7000", frozenset()),
                                          _push(node, np.zeros(_length(node))))
        assert not isinstance(reply, Error) or "shutting down" not in reply.reason
    assert node.progress.round == 2 and _finite(node)
    for key, value in node.learning.network.state_dict().items():
        assert torch.equal(value, before[key])  # the state before the failed rounds
    assert node.counters["nonfinite_rounds"] == 3
    stopped = [r for r in caplog.records if r.getMessage().startswith("training stopped:")]
    assert len(stopped) == 1 and stopped[0].levelno == logging.ERROR


async def test_a_loss_term_that_raises_switches_the_strategy_off_not_the_node(
        tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    node = _alone(tmp_path)

    def broken() -> torch.Tensor:
        raise RuntimeError("a strategy's bug")

    node.learning.trainer.loss_term = broken
    async with running([node]):
        with trio.fail_after(LIMIT):
            await wait_until(lambda: node.progress.finished, timeout=LIMIT)
    assert node.progress.round == SPEC.rounds and _finite(node)
    assert node.strategy_status()["failed"] == "loss term: RuntimeError: a strategy's bug"
    assert node.learning.trainer.loss_term is None and node.counters["nonfinite_rounds"] == 0


def test_a_dp_round_without_a_batch_is_not_a_non_finite_event() -> None:
    net = torch.nn.Linear(2, 2)
    guard = FiniteGuard(net, torch.optim.SGD(net.parameters(), lr=0.1))
    guard.keep()
    assert guard.problem(float("nan"), no_loss_ok=True) is None  # no Poisson batch drawn
    assert guard.problem(float("nan")) == "the training loss is nan"
    assert guard.problem(float("inf"), no_loss_ok=True) == "the training loss is inf"


def _length(node: Node) -> int:
    return node.cores["global"].length


def _push(node: Node, values: np.ndarray, push_id: int = 1) -> Push:
    data = np.asarray(values, dtype="<f8")  # as a peer may send it: nothing checked
    return Push(node.learning.fingerprints["global"], push_id,
                EncodedVector("f64", data.size, data, np.zeros(0, dtype=np.float32)), 0.25)


async def test_a_nan_push_from_a_peer_is_refused_naming_it(tmp_path: Path) -> None:
    node = _alone(tmp_path)
    before = node.cores["global"].values.copy()
    values = np.zeros(_length(node))
    values[7] = np.nan
    peer = PeerInfo(b"\x07" * 32, "10.0.0.9:7000", frozenset())
    async with running([node]):
        reply = await node.handle_request(peer, _push(node, values))
        assert isinstance(reply, Error)
        assert reply.reason == "values: f64 value nan at index 7 is not finite"
        np.testing.assert_array_equal(node.cores["global"].values, before)
        seen = node.collaboration_watch.exchanges.model("global", trio.current_time())
        assert seen.refused_here == 1 and seen.top_refusal is not None
        assert seen.top_refusal[0] == "values" and not seen.top_refusal[3]


async def test_a_nan_in_fedcurvs_fisher_estimate_is_logged_and_the_node_trains_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
        autojump_clock: trio.testing.MockClock) -> None:
    real = fedcurv.fisher_diagonal
    calls = [0]

    def poisoned(*args: object, **kwargs: object) -> np.ndarray:
        calls[0] += 1
        fisher = real(*args, **kwargs)  # type: ignore[arg-type]
        if calls[0] == 2:
            fisher[::3] = np.nan
        return fisher

    monkeypatch.setattr(fedcurv, "fisher_diagonal", poisoned)
    spec = dataclasses.replace(SPEC, nodes=2)
    net, addresses = MemoryNetwork(), memory_addresses(2)
    strategy = StrategyConfig(name="fedcurv", fedcurv_every=2, fedcurv_samples=16)
    nodes = [memory_node(net, tmp_path / f"n{i}", spec, i, addresses[i],
                         bootstrap=addresses[:1] if i else (), strategy=strategy,
                         train_runner=InlineRunner()) for i in range(2)]
    async with running(nodes):
        with trio.fail_after(LIMIT):
            await wait_until(lambda: all(n.progress.finished for n in nodes), timeout=LIMIT)
    assert calls[0] >= 3  # estimates went on after the bad one
    bad = [r for r in caplog.records if "Fisher estimate of global is not finite" in
           r.getMessage()]
    assert len(bad) == 1 and bad[0].levelno == logging.ERROR
    for node in nodes:
        assert node.progress.round == spec.rounds and _finite(node)
        assert "failed" not in node.strategy_status()
        f, fw = node.strategy.own_sums("global")  # type: ignore[attr-defined]
        assert np.isfinite(f).all() and np.isfinite(fw).all()
