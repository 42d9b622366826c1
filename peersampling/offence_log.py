"""Where peer sampling writes the lines whose volume a peer controls.

A member can send a thousand malformed shuffles; the node must not write a
thousand lines. Peer sampling may not import :mod:`gossip` (the layering
rule), so the core takes any object with this one method, and the node hands
it :class:`gossip.log_limit.LogLimiter` (one line per offender and interval,
then a summary with the count). Without one, :class:`EveryLine` writes every
line, as the simulator and small tools want.
"""

from __future__ import annotations

import logging
from typing import Protocol


class OffenceLog(Protocol):
    """Writes (or counts) one line that peer ``key`` caused at time ``now``.

    :class:`gossip.log_limit.LogLimiter` is one; the core calls :meth:`flush`
    once per period so that an offender who went quiet still gets its summary.
    """

    def log(self, now: float, key: str, level: int, msg: str, *args: object) -> bool:
        """Log ``msg % args`` at ``level``; True if written now (not only counted)."""
        ...

    def flush(self, now: float) -> int:
        """Write the summaries that are due; how many were written."""
        ...


class EveryLine:
    """An :class:`OffenceLog` without a limit: every line goes to ``logger``."""

    __slots__ = ("logger",)

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger

    def log(self, now: float, key: str, level: int, msg: str, *args: object) -> bool:
        self.logger.log(level, msg, *args)
        return True

    def flush(self, now: float) -> int:
        return 0
