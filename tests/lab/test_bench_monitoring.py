"""scripts/bench/monitoring.py: the node's CPU figures, the spread and the page's CPU reading.

The paired swarm runs take minutes (daemons): they are the benchmark, not a test.
"""

from __future__ import annotations

from lab.bench import monitoring


def test_node_costs_time_real_scrapes_and_polls_of_a_training_node() -> None:
    costs = monitoring.node_costs(samples=5, count=2)
    assert {len(v) for v in costs.values()} == {5}
    assert all(ms > 0 for ms in costs["scrape"])
    # status is part of a full poll's work
    assert all(0 < s < p for s, p in zip(costs["status"], costs["poll"], strict=True))
    assert min(costs["bytes"]) > 5_000  # rendered every time: the node's and process families


def test_spread_is_the_median_and_range() -> None:
    assert monitoring.spread([0.9, 1.2, 1.0], 100, 1) == "100.0 [90.0-120.0]"


def test_no_browser_costs_nothing() -> None:
    assert monitoring._browser_cpu(None) == 0.0
