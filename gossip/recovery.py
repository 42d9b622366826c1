"""Rolling back merges that made a node worse on its own held-out data.

A liar's merges can be bounded (:mod:`gossip.drift_budget`) but not told from
honest ones by their values; this node can tell whether they made its model
worse on data no peer sees. After each round it measures the loss of its
own-trained model and of the merged one on a held-out probe, and
:class:`MergeRecovery` judges the pair: a jump for the worse (over
``worse_ratio`` times and ``worse_margin`` above) rolls the round's merges back
(:meth:`ModelSync.roll_back`) and blames the peers that moved the model most (at
least ``blame_share`` of the largest); one blamed in ``blames`` of the last
``blame_rounds`` judged rounds is struck.

How it works: docs/design/trust.md ("Recovery").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from gossip.errors import InvalidValues


@dataclass(frozen=True)
class RecoverySettings:
    """When merges count as a jump for the worse, and whom it is blamed on."""

    worse_ratio: float = 1.5
    worse_margin: float = 0.25
    blame_share: float = 0.5
    blames: int = 2  # rounds a peer is blamed in before it is struck ...
    blame_rounds: int = 20  # ... out of this many judged rounds

    def __post_init__(self) -> None:
        if not (isinstance(self.blames, int) and isinstance(self.blame_rounds, int)
                and 1 <= self.blames <= self.blame_rounds):
            raise InvalidValues("recovery: expected ints 1 <= blames <= blame_rounds, got "
                                f"{self.blames!r} and {self.blame_rounds!r}")
        for name in ("worse_ratio", "worse_margin", "blame_share"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise InvalidValues(f"recovery.{name}: expected a finite number >= 0, "
                                    f"got {value!r}")
        if self.worse_ratio < 1.0 or not 0.0 < self.blame_share <= 1.0:
            raise InvalidValues("recovery: worse_ratio must be >= 1 and blame_share in (0, 1], "
                                f"got {self.worse_ratio!r} and {self.blame_share!r}")


@dataclass(frozen=True)
class Verdict:
    """What :meth:`MergeRecovery.judge` decided about one round's merges."""

    roll_back: bool
    blamed: tuple[bytes, ...] = ()  # the peers whose merges moved us most (largest first)
    struck: tuple[bytes, ...] = ()  # of those, the ones blamed often enough: distrust them
    reason: str = ""


class MergeRecovery:
    """Judges each round's merges by the loss they cost on held-out data (sans-IO)."""

    def __init__(self, settings: RecoverySettings | None = None) -> None:
        self.settings = settings if settings is not None else RecoverySettings()
        self.rollbacks = 0  # rounds whose merges were rolled back
        self._round = 0  # rounds judged
        self._blamed: dict[bytes, list[int]] = {}  # peer -> rounds it was blamed in

    def judge(self, own_loss: float, merged_loss: float,
              moved_by: Mapping[bytes, float]) -> Verdict:
        """``own_loss``: the own-trained model's loss on the probe; ``merged_loss``: with the
        round's merges; ``moved_by``: how far each peer's merges moved the model.

        A loss that is not finite after the merges is a jump; one that was not finite
        before leaves nothing to compare with (no rollback).
        """
        s = self.settings
        self._round += 1
        if not math.isfinite(own_loss):
            return Verdict(False)
        worse = not math.isfinite(merged_loss) or (
            merged_loss > s.worse_ratio * own_loss and merged_loss > own_loss + s.worse_margin)
        if not worse:
            return Verdict(False)
        self.rollbacks += 1
        largest = max(moved_by.values(), default=0.0)
        blamed = tuple(sorted((p for p, m in moved_by.items()
                               if largest > 0 and m >= s.blame_share * largest),
                              key=lambda p: -moved_by[p]))
        struck = tuple(p for p in blamed if self._blame(p))
        return Verdict(True, blamed, struck, f"held-out loss {own_loss:.3g} -> "
                       f"{merged_loss:.3g} after this round's merges")

    def _blame(self, peer: bytes) -> bool:
        """Record a blame of ``peer`` this round; True once it has ``blames`` in the window
        (its record then starts over)."""
        since = self._round - self.settings.blame_rounds
        for p in [p for p, rounds in self._blamed.items() if rounds[-1] <= since]:
            del self._blamed[p]  # forgiven: bounded by the peers blamed lately
        rounds = [r for r in self._blamed.get(peer, []) if r > since] + [self._round]
        if len(rounds) >= self.settings.blames:
            self._blamed.pop(peer, None)
            return True
        self._blamed[peer] = rounds
        return False
