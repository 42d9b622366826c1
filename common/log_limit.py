"""Log lines whose volume a peer controls, rate-limited per offender.

A peer that sends a thousand bad frames (or pushes) must not make the node
write a thousand lines: :class:`LogLimiter` writes the first line of each
offender (``key``: an address, a node id) in full, counts the ones that follow
during ``interval`` seconds, and then writes one summary line for them, e.g.
``peer 10.0.0.9: 57 more lines like this in the last 60 s, not logged one by
one (last: closing connection from 10.0.0.9:4242: decrypt failure: ...)``.
So each offender costs at most two lines per interval, whatever it sends.

Sans-IO: every call takes the current time (any monotonic clock; the transport
passes trio's, the push-sum core its ``now``), so tests drive it with plain
numbers. Lives in :mod:`common` so that the wire and the sans-IO packages
share it (the layering rule).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

__all__ = ["DEFAULT_LOG_INTERVAL", "OTHERS", "LogLimiter"]

#: Seconds over which one offender's lines are summarised: at most one line per
#: offender and minute, then the count of what was not logged.
DEFAULT_LOG_INTERVAL = 60.0
#: The key lines of new offenders are counted under once ``max_keys`` are tracked.
OTHERS = "other peers"


@dataclass
class _Window:
    started: float
    suppressed: int = 0
    level: int = logging.DEBUG
    last_msg: str = ""
    last_args: tuple[object, ...] = ()


class LogLimiter:
    """At most one full line and one summary line per key and ``interval``.

    ``max_keys`` bounds the offenders tracked at once (memory an attacker with
    many addresses could otherwise grow); beyond it, new keys share one window
    under :data:`OTHERS`. Summaries are written when the key's interval is
    over: by the next call for any key, or by :meth:`flush` (call it now and
    then so that an offender who went quiet still gets its summary).
    """

    def __init__(self, logger: logging.Logger, *, interval: float = DEFAULT_LOG_INTERVAL,
                 max_keys: int = 1024) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}")
        if max_keys < 1:
            raise ValueError(f"max_keys must be >= 1, got {max_keys!r}")
        self.logger = logger
        self.interval = interval
        self.max_keys = max_keys
        self._windows: dict[str, _Window] = {}
        self._next_due = float("inf")  # earliest end of a window: flush is O(1) before it
        #: Lines counted but not written one by one, over the limiter's life.
        self.suppressed_total = 0
        #: Lines at WARNING or above, written or not: offences (the node's metrics).
        self.warnings_total = 0

    def log(self, now: float, key: str, level: int, msg: str, *args: object) -> bool:
        """Log ``msg % args`` for offender ``key`` unless it already had its line in
        this interval (then count it for the summary). True if it was written."""
        if level >= logging.WARNING:
            self.warnings_total += 1
        self.flush(now)
        window = self._windows.get(key)
        if window is None and len(self._windows) >= self.max_keys:
            key = OTHERS
            window = self._windows.get(key)
        if window is None:
            self._windows[key] = _Window(now)
            self._next_due = min(self._next_due, now + self.interval)
            self.logger.log(level, msg, *args)
            return True
        window.suppressed += 1
        window.level = max(window.level, level)
        window.last_msg, window.last_args = msg, args
        self.suppressed_total += 1
        return False

    def warning(self, now: float, key: str, msg: str, *args: object) -> bool:
        """:meth:`log` at WARNING level."""
        return self.log(now, key, logging.WARNING, msg, *args)

    def flush(self, now: float) -> int:
        """Write the summaries of the windows that are over; return how many were written."""
        if now < self._next_due:
            return 0
        written = 0
        next_due = float("inf")
        for key, window in list(self._windows.items()):
            if now - window.started < self.interval:
                next_due = min(next_due, window.started + self.interval)
                continue
            del self._windows[key]
            if window.suppressed:
                last = window.last_msg % window.last_args if window.last_args else window.last_msg
                self.logger.log(window.level,
                                "%s: %d more lines like this in the last %.0f s, not logged "
                                "one by one (last: %s)", key, window.suppressed,
                                now - window.started, last)
                written += 1
        self._next_due = next_due
        return written

    @property
    def tracked(self) -> int:
        """Offenders with an open window."""
        return len(self._windows)
