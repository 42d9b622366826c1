"""Which exchanges of each shared model were accepted lately, and why others were refused.

:class:`ExchangeLedger` hears every push outcome of a node: its own pushes
acknowledged or refused by a peer, and peers' pushes it merged or refused. A
model *exchanges* when, within the window (``max(30 s, 3 rounds)``), a push of
this node was acknowledged, or a peer's push was merged here while no push of
this node was refused: what ``collaborating: yes`` means
(:func:`p2p.runtime.collaboration.with_exchanges`). Refusals are counted by
*kind* (the rule or field that refused, e.g. ``flag_mode``, ``values``), so the
status can name the most frequent one. Sans-IO: the caller passes the time.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass

__all__ = ["MIN_WINDOW", "WINDOW_ROUNDS", "ExchangeLedger", "ModelExchanges", "refusal_kind"]

#: The shortest window of the verdict (seconds) ...
MIN_WINDOW = 30.0
#: ... and the rounds it spans when rounds are slower.
WINDOW_ROUNDS = 3
_MAX_EVENTS = 4096  # refusals remembered (a flood of them must not grow memory)


def refusal_kind(reason: str) -> str:
    """The rule or field a refusal names (``"clip_debt: a clipped merge ..."`` ->
    ``"clip_debt"``), else its first words: what refusals are counted by."""
    head, sep, _ = reason.partition(":")
    head = head.strip()
    if sep and head and len(head) <= 40:
        return head
    return " ".join(reason.split()[:6])


@dataclass(frozen=True)
class ModelExchanges:
    """One model over the window: whether it exchanges, and the refusals seen."""

    exchanging: bool
    sent_accepted: int
    sent_refused: int
    merged: int
    refused_here: int
    #: the most frequent refusal: (kind, count, its last full reason, by peers?) or None
    top_refusal: tuple[str, int, str, bool] | None


@dataclass
class _Event:
    time: float
    model: str
    outcome: str  # "acked", "refused-out", "merged", "refused-in"
    kind: str = ""
    reason: str = ""


class ExchangeLedger:
    """Push outcomes per model over a sliding window (see the module docstring)."""

    def __init__(self) -> None:
        self._events: deque[_Event] = deque(maxlen=_MAX_EVENTS)
        self._rounds: deque[tuple[float, int]] = deque(maxlen=8)  # (time, round) at changes
        # kept apart from the events, which a flood of refusals could push out
        self._last: dict[tuple[str, str], float] = {}  # (model, "acked"/"merged") -> time

    def _add(self, event: _Event) -> None:
        """Keep ``event``, dropping those already out of the window."""
        start = event.time - self.window()
        while self._events and self._events[0].time < start:
            self._events.popleft()
        self._events.append(event)

    def acked(self, model: str, now: float) -> None:
        """A push of this node for ``model`` was acknowledged (merged by the peer)."""
        self._add(_Event(now, model, "acked"))
        self._last[(model, "acked")] = now

    def refused_by_peer(self, model: str, reason: str, now: float) -> None:
        """A peer refused a push of this node for ``model``, saying ``reason``."""
        self._add(_Event(now, model, "refused-out", refusal_kind(reason), reason))

    def merged(self, model: str, now: float) -> None:
        """A peer's push for ``model`` was merged here."""
        self._add(_Event(now, model, "merged"))
        self._last[(model, "merged")] = now

    def refused_here(self, model: str, reason: str, now: float) -> None:
        """This node refused a peer's push for ``model`` for ``reason``."""
        self._add(_Event(now, model, "refused-in", refusal_kind(reason), reason))

    def round_seen(self, round_number: int, now: float) -> None:
        """The node's round counter at ``now`` (the window spans 3 rounds when slower)."""
        if not self._rounds or self._rounds[-1][1] != round_number:
            self._rounds.append((now, round_number))

    def window(self) -> float:
        """Seconds of the window: ``max(30, 3 x the recent seconds per round)``."""
        if len(self._rounds) < 2:
            return MIN_WINDOW
        (t0, r0), (t1, r1) = self._rounds[0], self._rounds[-1]
        per_round = (t1 - t0) / max(r1 - r0, 1)
        return max(MIN_WINDOW, WINDOW_ROUNDS * per_round)

    def model(self, name: str, now: float) -> ModelExchanges:
        """What ``name`` did within the window ending at ``now``."""
        start = now - self.window()
        counts: Counter[str] = Counter()
        refusals: Counter[tuple[str, bool]] = Counter()
        last: dict[tuple[str, bool], str] = {}
        for event in self._events:
            if event.model != name or event.time < start:
                continue
            counts[event.outcome] += 1
            if event.outcome.startswith("refused"):
                key = (event.kind, event.outcome == "refused-out")
                refusals[key] += 1
                last[key] = event.reason
        top = None
        if refusals:
            (kind, by_peer), count = refusals.most_common(1)[0]
            top = (kind, count, last[(kind, by_peer)], by_peer)
        acked = self._last.get((name, "acked"), -float("inf")) >= start
        merged = self._last.get((name, "merged"), -float("inf")) >= start
        exchanging = acked or (merged and not counts["refused-out"])
        return ModelExchanges(exchanging, counts["acked"], counts["refused-out"],
                              counts["merged"], counts["refused-in"], top)
