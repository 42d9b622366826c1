"""How many exchanges a node makes after each training round (sans-IO).

``pushes_per_round`` is a fixed count or ``"auto"``: mix until the model is as
close to its partners as one round of training moves it, and no further. After
a round the node makes exchange waves while the last answered exchange's gap
(:attr:`PushSum.last_gap`) exceeds ``gap_ratio`` times the round's drift
(:attr:`PushSum.round_drift`), at least once, at most ``max_waves`` times, and
stops when the gap stops shrinking. When a round's first exchange already finds
the gap within the drift, the next exchange waits one more round (up to
``max_interval`` rounds apart). Where no gap is measured (one-way or masked
pushes) it makes ``blind_waves`` waves after every round.

How it works: docs/design/gossip.md ("How often to exchange").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

AUTO = "auto"

#: Auto stops once the partner gap is at most this many rounds of drift.
GAP_RATIO = 2.0
#: Auto's most waves after one round.
MAX_WAVES = 4
#: Auto's most rounds between two exchanging rounds.
MAX_INTERVAL = 4
#: Auto's waves per round when no gap can be measured (one-way pushes).
BLIND_WAVES = 2
#: A relative gap below which mixing more is pointless whatever the drift
#: (a node that no longer trains has no drift, yet stops mixing here).
GAP_FLOOR = 1e-4


class Next(Enum):
    """What the rule says about the next exchange of a round."""

    START = "start"  # make another exchange now
    WAIT = "wait"  # an answer still due would decide: wait for it
    STOP = "stop"  # this round's mixing is done


@dataclass(frozen=True)
class WaveRule:
    """Fixed (``fixed`` exchanges per round) or adaptive (``fixed is None``) mixing.

    One instance per driver; the per-model state lives in :class:`WavePlan`.
    """

    fixed: int | None = None
    gap_ratio: float = GAP_RATIO
    max_waves: int = MAX_WAVES
    max_interval: int = MAX_INTERVAL
    blind_waves: int = BLIND_WAVES
    gap_floor: float = GAP_FLOOR

    def __post_init__(self) -> None:
        if self.fixed is not None and (isinstance(self.fixed, bool)
                                       or not isinstance(self.fixed, int) or self.fixed < 1):
            raise ValueError(f"pushes_per_round: expected {AUTO!r} or an int >= 1, "
                             f"got {self.fixed!r}")
        if not (self.gap_ratio > 0 and math.isfinite(self.gap_ratio)):
            raise ValueError(f"gap_ratio: expected a finite number > 0, got {self.gap_ratio!r}")
        for name in ("max_waves", "max_interval", "blind_waves"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
        if not self.gap_floor >= 0:
            raise ValueError(f"gap_floor: expected a number >= 0, got {self.gap_floor!r}")

    @classmethod
    def parse(cls, pushes_per_round: int | str) -> WaveRule:
        """``"auto"`` or a count >= 1 (the config's ``gossip.pushes_per_round``)."""
        if pushes_per_round == AUTO:
            return cls()
        if isinstance(pushes_per_round, bool) or not isinstance(pushes_per_round, int):
            raise ValueError(f"pushes_per_round: expected {AUTO!r} or an int >= 1, "
                             f"got {pushes_per_round!r}")
        return cls(fixed=pushes_per_round)

    @property
    def adaptive(self) -> bool:
        """True for ``"auto"``."""
        return self.fixed is None

    def plan(self) -> WavePlan:
        """Fresh per-model state (one per shared model of a driver)."""
        return WavePlan(self)


class WavePlan:
    """One model's mixing decisions, round after round."""

    def __init__(self, rule: WaveRule) -> None:
        self.rule = rule
        self.interval = 1  # rounds between exchanging rounds (auto)
        self._rounds_since = 0  # rounds ended since the last exchanging round
        self.waves = 0  # waves made this round
        self.gaps: list[float] = []  # gaps measured this round, in answer order
        self._drift: float | None = None  # the last positive round drift seen

    def begin_round(self) -> bool:
        """A round ended: True if this model exchanges after it (auto may skip)."""
        self.waves = 0
        self.gaps = []
        self._rounds_since += 1
        if self.rule.adaptive and self._rounds_since < self.interval:
            return False
        self._rounds_since = 0
        return True

    def next(self, drift: float | None, answers_due: int) -> Next:
        """Whether to start another wave, given the round's ``drift`` and answers still due."""
        rule = self.rule
        if rule.fixed is not None:
            return Next.START if self.waves < rule.fixed else Next.STOP
        if self.waves < 1:
            return Next.START
        if self.waves >= rule.max_waves:
            return Next.STOP
        if not self.gaps:
            if answers_due:
                return Next.WAIT
            return Next.START if self.waves < rule.blind_waves else Next.STOP
        if self._mixed_enough(self.gaps[-1], drift):
            return Next.STOP
        if len(self.gaps) >= 2 and self.gaps[-1] >= self.gaps[-2]:
            return Next.STOP  # no longer shrinking: the partners are as close as it gets
        return Next.START

    def end_round(self, drift: float | None) -> None:
        """The round's mixing is over: space the next exchanges out, or not (auto)."""
        if not self.rule.adaptive or not self.gaps:
            return
        if self.waves <= 1 and self._mixed_enough(self.gaps[0], drift):
            self.interval = min(self.interval + 1, self.rule.max_interval)
        elif self.waves > 1:
            self.interval = 1

    def _mixed_enough(self, gap: float, drift: float | None) -> bool:
        # A round without training (the node finished, or only merges moved
        # it) keeps the scale of the last one that trained: mixing continues
        # at the same pace for late peers instead of racing to the floor.
        if drift is not None and drift > 0:
            self._drift = drift
        threshold = self.rule.gap_ratio * self._drift if self._drift is not None else 0.0
        return gap <= max(threshold, self.rule.gap_floor)


__all__ = [
    "AUTO",
    "BLIND_WAVES",
    "GAP_FLOOR",
    "GAP_RATIO",
    "MAX_INTERVAL",
    "MAX_WAVES",
    "Next",
    "WavePlan",
    "WaveRule",
]
