"""scripts/bench/monitoring.py: the scrape's CPU figure and the page's CPU reading.

The paired swarm runs take minutes (daemons): they are the benchmark, not a test.
"""

from __future__ import annotations

from lab.bench import monitoring


def test_scrape_cpu_times_real_scrapes_of_a_training_node() -> None:
    figures = monitoring.scrape_cpu(samples=5, count=2)
    assert 0 < figures["median_ms"] <= figures["max_ms"]
    assert figures["bytes"] > 5_000  # the node's families and the process collectors


def test_no_browser_costs_nothing() -> None:
    assert monitoring._browser_cpu(None) == 0.0
