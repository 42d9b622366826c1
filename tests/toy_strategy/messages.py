"""The toy's wire messages: a question and its answer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ToyAsk:
    """How many rounds did you train?"""

    asked_at: int


@dataclass(frozen=True)
class ToyTell:
    """This many."""

    rounds: int


TOY_MESSAGES: tuple[tuple[type, str], ...] = ((ToyAsk, "toy.ask"), (ToyTell, "toy.tell"))
