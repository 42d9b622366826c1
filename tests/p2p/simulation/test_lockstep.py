"""p2p.simulation.lockstep: callers at one virtual instant train together, then pay compute time."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
import torch
import trio
import trio.testing
from torch import nn

from learner import ModelLayout, NetworkSpec, PartialNetwork
from learner.trainer import TrainConfig, Trainer
from p2p.simulation.lockstep import LockstepRunner

COMPUTE = 2.0


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _trainers(n: int) -> list[Trainer]:
    network = NetworkSpec.parse("6=8=3")
    rng = np.random.default_rng(3)
    out = []
    for i in range(n):
        x = rng.normal(size=(30, 6)).astype(np.float32)
        y = rng.integers(0, 3, size=30)
        out.append(Trainer(PartialNetwork(ModelLayout(network, []), seed=i), x, y,
                           TrainConfig(seed=i, batch_size=8, optimizer="momentum")))
    return out


def _flat(trainer: Trainer) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in trainer.model.parameters()])


async def _run(runner: LockstepRunner, trainers: list[Trainer],
               starts: list[float]) -> list[tuple[float, float]]:
    """Each trainer asks for 3 steps at its start time; (loss, time its call returned)."""
    results: list[tuple[float, float]] = [(float("nan"), -1.0)] * len(trainers)

    async def caller(i: int) -> None:
        await trio.sleep(starts[i])
        loss = await runner.train_steps(trainers[i], 3)
        results[i] = (loss, trio.current_time())

    async with trio.open_nursery() as nursery:
        for i in range(len(trainers)):
            nursery.start_soon(caller, i)
    return results


@pytest.mark.parametrize("batched", [True, False])
async def test_callers_at_one_instant_train_together(
        autojump_clock: trio.testing.MockClock, batched: bool) -> None:
    runner = LockstepRunner(COMPUTE, batched=batched)
    trainers = _trainers(4)
    results = await _run(runner, trainers, [1.0, 1.0, 1.0, 1.0])
    assert [at for _, at in results] == [1.0 + COMPUTE] * 4
    assert runner.stats.batches == 1 and runner.stats.largest == 4
    assert runner.stats.requests == 4
    assert all(t.steps_done == 3 for t in trainers)


async def test_callers_at_different_instants_train_apart(
        autojump_clock: trio.testing.MockClock) -> None:
    runner = LockstepRunner(COMPUTE)
    results = await _run(runner, _trainers(3), [0.0, 0.5, 0.0])
    assert [at for _, at in results] == [COMPUTE, 0.5 + COMPUTE, COMPUTE]
    assert runner.stats.batches == 2 and runner.stats.largest == 2


async def test_align_gathers_callers_a_little_apart(
        autojump_clock: trio.testing.MockClock) -> None:
    runner = LockstepRunner(COMPUTE, align=1.0)
    results = await _run(runner, _trainers(4), [0.0, 0.3, 0.95, 1.2])
    # 0.0 is on a tick; 0.3 and 0.95 wait for 1.0; 1.2 waits for 2.0
    assert [at for _, at in results] == [COMPUTE, 1.0 + COMPUTE, 1.0 + COMPUTE, 2.0 + COMPUTE]
    assert runner.stats.batches == 3 and runner.stats.largest == 2
    with pytest.raises(ValueError, match="align"):
        LockstepRunner(align=-1.0)


async def test_wait_turn_aligns_before_the_round_and_training_then_starts_at_once(
        autojump_clock: trio.testing.MockClock) -> None:
    # the node awaits wait_turn() before it takes its model lock: the wait for the
    # tick happens there, and train_steps, called on the tick, does not wait again
    runner = LockstepRunner(COMPUTE, align=1.0)
    await trio.sleep(0.3)
    await runner.wait_turn()
    assert trio.current_time() == pytest.approx(1.0)
    await runner.train_steps(_trainers(1)[0], 1)
    assert trio.current_time() == pytest.approx(1.0 + COMPUTE)
    unaligned = LockstepRunner(COMPUTE)
    before = trio.current_time()
    await unaligned.wait_turn()
    assert trio.current_time() == before


@pytest.mark.parametrize(("align", "starts"), [(0.0, [0.0, 0.0, 1.0, 1.0]),
                                              (1.0, [0.0, 0.3, 0.95, 1.2])])
async def test_batched_and_plain_lockstep_agree(autojump_clock: trio.testing.MockClock,
                                                align: float, starts: list[float]) -> None:
    # align as scripts/simulate.py wires it (--lockstep-align): the same instants either way
    plain, batched = _trainers(4), _trainers(4)
    expected = await _run(LockstepRunner(COMPUTE, batched=False, align=align), plain, starts)
    second = float(math.ceil(trio.current_time()))  # a tick of either grid
    await trio.sleep_until(second)
    got = await _run(LockstepRunner(COMPUTE, batched=True, align=align), batched, starts)
    assert [at - second for _, at in got] == [at for _, at in expected]
    assert [loss for loss, _ in got] == pytest.approx([loss for loss, _ in expected], abs=1e-5)
    for a, b in zip(plain, batched, strict=True):
        assert torch.allclose(_flat(a), _flat(b), rtol=0, atol=1e-5)


async def test_a_caller_cancelled_while_waiting_withdraws_only_itself(
        autojump_clock: trio.testing.MockClock) -> None:
    runner = LockstepRunner(COMPUTE)
    trainers = _trainers(3)
    done: list[int] = []

    async def caller(i: int, scope: trio.CancelScope) -> None:
        with scope:
            await runner.train_steps(trainers[i], 3)
            done.append(i)

    scopes = [trio.CancelScope() for _ in trainers]
    async with trio.open_nursery() as nursery:
        for i, scope in enumerate(scopes):
            nursery.start_soon(caller, i, scope)
        # while this task stays runnable not all tasks are blocked, so nothing
        # trains: let every caller park its request, then the node "crashes"
        for _ in range(100):
            if len(runner._pending) == 3:
                break
            await trio.lowlevel.checkpoint()
        assert len(runner._pending) == 3 and runner.stats.requests == 0
        scopes[1].cancel()
    assert sorted(done) == [0, 2]
    assert [t.steps_done for t in trainers] == [3, 0, 3]
    assert runner.stats.largest == 2 and not runner._pending


async def test_a_failing_trainer_fails_its_own_caller_only(
        autojump_clock: trio.testing.MockClock) -> None:
    trainers = _trainers(2)
    # dropout makes the trainer unbatchable; its loop then refuses to run
    broken = Trainer(nn.Sequential(nn.Linear(6, 3), nn.Dropout(0.1)),
                     np.zeros((8, 6), np.float32), np.zeros(8, np.int64), TrainConfig())

    def refuse(steps: int) -> float:
        raise RuntimeError("no training for this node")

    broken.train_steps = refuse  # type: ignore[method-assign]
    runner = LockstepRunner(COMPUTE)
    outcome: dict[str, object] = {}

    async def caller(name: str, trainer: Trainer) -> None:
        try:
            outcome[name] = await runner.train_steps(trainer, 2)
        except RuntimeError as exc:
            outcome[name] = exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller, "a", trainers[0])
        nursery.start_soon(caller, "broken", broken)
        nursery.start_soon(caller, "b", trainers[1])
    assert isinstance(outcome["broken"], RuntimeError)
    assert isinstance(outcome["a"], float) and isinstance(outcome["b"], float)
    assert runner.stats.largest == 3


async def test_bad_steps_are_refused() -> None:
    with pytest.raises(ValueError, match="steps >= 1"):
        await LockstepRunner().train_steps(_trainers(1)[0], 0)
