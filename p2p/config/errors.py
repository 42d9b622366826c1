"""The config's error type and the helpers that make its messages useful."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["ConfigError", "did_you_mean", "show"]


class ConfigError(ValueError):
    """A configuration value is missing, of the wrong type, or out of range.

    ``key`` is the dotted key (``training.lr``) or command-line option at fault
    (empty when the whole file is unreadable); the message says what was
    expected.
    """

    def __init__(self, message: str, *, key: str = "", source: str | None = None) -> None:
        self.key = key
        self.source = source
        prefix = f"{source}: " if source else ""
        super().__init__(prefix + message)


def show(value: object) -> str:
    """Describe a bad value for an error message (type and a short repr)."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest option, or ``""``."""
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
