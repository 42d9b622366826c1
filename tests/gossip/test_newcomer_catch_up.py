"""A node joining a trained swarm catches up with it under the creep budget.

The budget applies from a node's first merge (gossip.drift_budget); during its
warm-up (its own first training steps or pushes) it is at least
``drift_catchup`` x the norm of its own model before any merge, which is what
lets a newcomer starting from the common initial model reach a swarm that
trained about that far away (docs/design/trust.md, "The creep budget").
"""

from __future__ import annotations

import numpy as np
from guard_kit import FP, exchange

from gossip import PushSum
from gossip.merge_guard import GuardSettings

N = 100


def newcomer_gap(settings: GuardSettings, seed: int = 0) -> float:
    """The newcomer's distance to the swarm's mean 15 rounds after it joined, over the
    distance it started at."""
    rng = np.random.default_rng(seed)
    x0 = rng.normal(0.0, 0.1, N)  # the common initial model (init seed)
    drift = rng.standard_normal(N)
    drift *= 0.027 * np.linalg.norm(x0) / np.linalg.norm(drift)  # training's common way
    swarm = [PushSum(FP, x0.copy(), rng=np.random.default_rng(10 + i), guard=settings)
             for i in range(6)]
    ids = [b"member%d" % i for i in range(6)]
    t = 0.0

    def train(core: PushSum) -> None:  # a common way while young, then small steps
        step = drift if t < 30 * 0.6 else rng.normal(0.0, 1e-3, N)
        core.set_values(core.values + step)

    def one_round(cores: list[PushSum], names: list[bytes]) -> None:
        nonlocal t
        for core in cores:
            train(core)
        for i, core in enumerate(cores):
            j = int(rng.integers(len(cores) - 1))
            j += j >= i
            exchange(core, names[i], cores[j], names[j], t)
            t += 0.1

    for _ in range(30):  # the swarm trains 0.8 x ||x0|| away from where it started
        one_round(swarm, ids)
    newcomer = PushSum(FP, x0.copy(), rng=np.random.default_rng(99), guard=settings)
    start = float(np.linalg.norm(newcomer.estimate - np.mean([c.estimate for c in swarm], 0)))
    for _ in range(15):
        one_round([*swarm, newcomer], [*ids, b"newcomer"])
    mean = np.mean([c.estimate for c in swarm], axis=0)
    return float(np.linalg.norm(newcomer.estimate - mean)) / start


def test_a_newcomer_reaches_a_trained_swarm() -> None:
    gap = newcomer_gap(GuardSettings())
    assert gap < 0.1, f"the newcomer is still {gap:.2f} of its way from the swarm"


def test_without_the_catch_up_it_would_not() -> None:
    # the catch-up is what lets it: bounded by its own training alone, it stays behind
    assert newcomer_gap(GuardSettings(drift_catchup=0.0)) > 0.5
