"""The privacy accountant of DP-SGD: epsilon spent so far, and noise for a target epsilon.

Epsilon comes from the Rényi-DP accountant of `opacus`
(:class:`opacus.accountants.RDPAccountant`): each step of DP-SGD is a
subsampled Gaussian mechanism (Poisson sampling at rate ``q``, noise
``noise_multiplier``); the accountant composes them and converts to
(epsilon, delta). We keep the step history ourselves, as plain tuples, so
that a checkpoint can store it and a restart resumes the count instead of
resetting it; opacus only computes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "HistoryEntry",
    "PrivacyAccountant",
    "PrivacySpent",
    "noise_multiplier_for",
]

#: One run of identical steps: (noise multiplier, sample rate, steps).
HistoryEntry = tuple[float, float, int]


@dataclass(frozen=True)
class PrivacySpent:
    """What a DP trainer has spent, as `p2p status` and `p2p metrics` show it.

    ``epsilon`` at ``delta`` over all ``steps`` so far (inf with no noise);
    ``budget`` the epsilon it may spend (None: no cap); ``budget_spent``:
    the next round would go past the budget, so the trainer stops.
    """

    epsilon: float
    delta: float
    noise_multiplier: float
    clip_norm: float
    sample_rate: float
    steps: int
    budget: float | None
    budget_spent: bool


def _check_entry(entry: Iterable[object]) -> HistoryEntry:
    sigma, rate, steps = entry
    if (isinstance(sigma, bool) or not isinstance(sigma, int | float) or not sigma >= 0
            or isinstance(rate, bool) or not isinstance(rate, int | float)
            or not 0 < rate <= 1 or isinstance(steps, bool) or not isinstance(steps, int)
            or steps < 0):
        raise ValueError(f"privacy history entry {tuple(entry)!r}: expected (noise multiplier "
                         ">= 0, sample rate in (0, 1], steps >= 0)")
    return float(sigma), float(rate), steps


@functools.lru_cache(maxsize=64)
def _step_rdp(noise_multiplier: float, sample_rate: float) -> tuple[float, ...]:
    """Rényi DP of one step at each of the accountant's orders.

    Composition adds RDP, so ``n`` steps spend ``n`` times this: computing it
    once per (noise, rate) keeps epsilon cheap to ask for every round (one
    evaluation of opacus' series takes about half a second).
    """
    from opacus.accountants import RDPAccountant  # imported on first use: it loads scipy
    from opacus.accountants.analysis.rdp import compute_rdp

    rdp = compute_rdp(q=sample_rate, noise_multiplier=noise_multiplier, steps=1,
                      orders=RDPAccountant.DEFAULT_ALPHAS)
    return tuple(float(r) for r in rdp)


def _epsilon(history: tuple[HistoryEntry, ...], delta: float) -> float:
    """Epsilon at ``delta`` of the composed history, as opacus' RDPAccountant computes it."""
    runs = [(s, q, n) for s, q, n in history if n > 0]
    if not runs:
        return 0.0
    if any(s == 0 for s, _, _ in runs):
        return math.inf  # a step without noise has no finite guarantee
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis.rdp import get_privacy_spent

    total = sum(n * np.asarray(_step_rdp(s, q)) for s, q, n in runs)
    eps, _ = get_privacy_spent(orders=RDPAccountant.DEFAULT_ALPHAS, rdp=total, delta=delta)
    return float(eps)


class PrivacyAccountant:
    """Counts DP-SGD steps and reports the epsilon they spend at ``delta``.

    ``history`` resumes an earlier count (from a checkpoint). The history is
    replaced, never mutated, on each record, so readers on other threads (the
    admin commands) always see a consistent count.
    """

    def __init__(self, delta: float, history: Iterable[Iterable[object]] = ()) -> None:
        if not 0 < delta < 1:
            raise ValueError(f"delta: expected a number in (0, 1), got {delta}")
        self.delta = float(delta)
        self._history: tuple[HistoryEntry, ...] = tuple(_check_entry(e) for e in history)
        self._cached: tuple[tuple[HistoryEntry, ...], float] | None = None

    @property
    def history(self) -> tuple[HistoryEntry, ...]:
        """Every run of identical steps so far, oldest first."""
        return self._history

    @property
    def steps(self) -> int:
        """Steps counted so far."""
        return sum(n for _, _, n in self._history)

    def resume(self, history: Iterable[Iterable[object]]) -> None:
        """Replace the count by ``history`` (a checkpoint's): later steps add to it."""
        self._history = tuple(_check_entry(e) for e in history)

    def record(self, noise_multiplier: float, sample_rate: float, steps: int = 1) -> None:
        """Count ``steps`` more steps made with this noise and sample rate."""
        entry = _check_entry((noise_multiplier, sample_rate, steps))
        history = self._history
        if history and history[-1][:2] == entry[:2]:
            last = history[-1]
            history = (*history[:-1], (last[0], last[1], last[2] + entry[2]))
        else:
            history = (*history, entry)
        self._history = history

    def epsilon(self) -> float:
        """Epsilon spent so far at ``delta`` (0 before any step)."""
        history = self._history
        cached = self._cached
        if cached is not None and cached[0] == history:
            return cached[1]
        value = _epsilon(history, self.delta)
        self._cached = (history, value)
        return value

    def epsilon_after(self, noise_multiplier: float, sample_rate: float, steps: int) -> float:
        """Epsilon that would be spent after ``steps`` more steps of this kind."""
        return _epsilon((*self._history, _check_entry((noise_multiplier, sample_rate, steps))),
                        self.delta)


def noise_multiplier_for(target_epsilon: float, delta: float, sample_rate: float,
                         steps: int) -> float:
    """The smallest noise multiplier (within opacus' 0.01 tolerance on epsilon) that
    keeps ``steps`` steps at ``sample_rate`` within ``target_epsilon`` at ``delta``.

    Raises ValueError naming the inputs when no noise below opacus' ceiling reaches
    the target.
    """
    if not target_epsilon > 0:
        raise ValueError(f"target epsilon: expected a number > 0, got {target_epsilon}")
    if steps < 1:
        raise ValueError(f"steps: expected an integer >= 1, got {steps}")
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample rate: expected a number in (0, 1], got {sample_rate}")
    from opacus.accountants.utils import get_noise_multiplier

    try:
        return float(get_noise_multiplier(target_epsilon=target_epsilon, target_delta=delta,
                                          sample_rate=sample_rate, steps=steps,
                                          accountant="rdp"))
    except ValueError as exc:
        raise ValueError(f"no noise multiplier reaches epsilon {target_epsilon} at delta "
                         f"{delta} over {steps} steps at sample rate {sample_rate:.3g} "
                         f"({exc})") from None
