"""Waiting for a condition instead of sleeping a fixed time."""

from __future__ import annotations

from collections.abc import Callable

import trio

__all__ = ["DEFAULT_WAIT", "wait_until"]

# Generous on purpose: a condition that holds within a second on an idle
# machine may take many times that on a loaded one; a hang still fails.
DEFAULT_WAIT = 60.0


async def wait_until(predicate: Callable[[], object], timeout: float = DEFAULT_WAIT,
                     interval: float = 0.01, *, what: str = "") -> None:
    """Return once ``predicate()`` is truthy, polling every ``interval`` seconds.

    Raises :class:`trio.TooSlowError` after ``timeout`` seconds (of the run's
    clock, so virtual time under a mock clock); ``what`` names the condition
    in that error.
    """
    try:
        with trio.fail_after(timeout):
            while not predicate():
                await trio.sleep(interval)
    except trio.TooSlowError:
        name = what or getattr(predicate, "__qualname__", repr(predicate))
        raise trio.TooSlowError(f"condition {name} still false after {timeout:g} s") from None
