"""Virtual time: trio's :class:`~trio.testing.MockClock` set to jump ahead when idle.

Under an autojump clock, ``trio.sleep`` and timeouts cost no wall time: as
soon as every task is blocked, the clock jumps to the next deadline. Timing
logic (retries, periods, idle timeouts) then runs the same on a loaded
machine as on an idle one. Under pytest-trio, ask for the ``autojump_clock``
fixture instead; these helpers are for scripts and benchmarks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio
import trio.testing

__all__ = ["run_in_virtual_time", "virtual_clock"]

T = TypeVar("T")


def virtual_clock(*, autojump: bool = True) -> trio.testing.MockClock:
    """A fresh mock clock at time 0; with ``autojump`` it jumps as soon as all tasks block.

    Without ``autojump`` time only moves when the caller calls ``jump``.
    """
    return trio.testing.MockClock(autojump_threshold=0.0 if autojump else float("inf"))


def run_in_virtual_time(async_fn: Callable[..., Awaitable[T]], *args: object) -> T:
    """``trio.run(async_fn, *args)`` on an autojump :func:`virtual_clock`."""
    return trio.run(async_fn, *args, clock=virtual_clock())
