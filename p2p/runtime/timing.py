"""Constant-memory summaries of repeated timings (for the admin ``metrics``)."""

from __future__ import annotations

from p2p.runtime.admin_server import TimingReport


class TimingStats:
    """Count, total and maximum of observed durations; never grows."""

    __slots__ = ("count", "total", "max")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.max = 0.0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.total += seconds
        self.max = max(self.max, seconds)

    def report(self) -> TimingReport:
        mean = self.total / self.count if self.count else 0.0
        return TimingReport(count=self.count, mean=mean, max=self.max, total=self.total)
