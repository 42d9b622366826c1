"""The dashboard in a real browser: Debian's headless Chromium driven by Selenium.

Four in-process nodes train over a memory network, each with its admin socket;
the dashboard polls them and serves its page; the browser opens the page and
the test reads the page's own data: four rows in the node table, an accuracy
series that grows, and the row of a node that was killed marked dead. A
screenshot goes to the test's directory (and to ``$P2P_DASHBOARD_SCREENSHOT``
when set: docs/figures/dashboard.png was made so).

The browser is the system's (``apt-get install chromium chromium-driver``;
``make test`` installs them where it can): where it is missing the test skips
and says why, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from p2p.dashboard import Dashboard, SocketSource
from p2p.runtime.node import Node
from p2p.testing import MemoryNetwork
from p2p.testing.nodes import fast_spec, memory_swarm
from p2p.web import bind_http, listen_url

pytestmark = pytest.mark.e2e

BROWSER_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--window-size=1400,1400")


def _browser() -> tuple[str, str]:
    """(chromium, chromedriver) of the system, or skip (fail under CI=true) saying why."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    missing = [name for name, path in (("chromium", chromium), ("chromium-driver", driver))
               if path is None]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install -e '.[test]')")
    if missing:
        why = (f"dashboard browser test: {', '.join(missing)} missing; install with `apt-get "
               "install -y chromium chromium-driver` (make test does it as root)")
        if os.environ.get("CI") == "true":
            pytest.fail(why + " -- required under CI=true")
        pytest.skip(why)
    assert chromium is not None and driver is not None
    return chromium, driver


def _open_browser(chromium: str, driver: str, profile: Path) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in BROWSER_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


def _wait(browser: Any, what: str, condition: Callable[[Any], Any], timeout: float) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout, poll_frequency=0.2).until(condition, message=what)


ROWS = "return document.querySelectorAll('#nodes tbody tr').length"
ACCURACY_POINTS = ("const c = window.p2pDashboard.charts.accuracy; if (!c) return 0;"
                   "return c.data.slice(1, -1).map(s => s.filter(v => v != null).length)"
                   ".reduce((a, b) => a + b, 0)")
STATES = ("return Array.from(document.querySelectorAll('#nodes tbody tr'))"
          ".map(r => [r.dataset.key, r.dataset.state])")


async def test_dashboard_in_a_real_browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    chromium, driver = _browser()
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager: never download anything
    spec = fast_spec(nodes=4, rounds=0, round_interval=0.1)
    nodes = memory_swarm(tmp_path / "swarm", MemoryNetwork(seed=3), spec)
    dashboard = Dashboard(lambda: [SocketSource(n.data_dir) for n in nodes], interval=0.5)
    listeners = bind_http("127.0.0.1", 0, setting="--listen")
    url = f"{listen_url(listeners)}/?token={dashboard.token}"
    scopes: list[trio.CancelScope] = []

    async def run_node(node: Node, *, task_status: trio.TaskStatus[None]) -> None:
        with trio.CancelScope() as scope:
            scopes.append(scope)
            await node.run(task_status=task_status)

    async with trio.open_nursery() as nursery:
        for node in nodes:
            await nursery.start(run_node, node)
        await nursery.start(dashboard.run, listeners)
        browser = await trio.to_thread.run_sync(_open_browser, chromium, driver,
                                                tmp_path / "profile")
        try:
            def first_look() -> int:
                browser.get(url)
                _wait(browser, "4 rows in the node table",
                      lambda b: b.execute_script(ROWS) == 4, 60)
                return int(_wait(browser, "accuracy points",
                                 lambda b: b.execute_script(ACCURACY_POINTS), 60))

            points = await trio.to_thread.run_sync(first_look)
            await trio.to_thread.run_sync(lambda: _wait(
                browser, f"the accuracy series to grow past {points} points",
                lambda b: b.execute_script(ACCURACY_POINTS) > points + 4, 60))
            assert await trio.to_thread.run_sync(browser.execute_script, ROWS) == 4
            scopes[3].cancel()  # node 3 dies: its admin socket goes away
            killed = time.monotonic()

            def dead() -> list[list[str]]:
                return _wait(browser, "the killed node's row marked dead within 10 s",
                             lambda b: (s := b.execute_script(STATES)) and dict(s).get(
                                 str(nodes[3].data_dir)) == "dead" and s, 10)

            states = await trio.to_thread.run_sync(dead)
            seconds = time.monotonic() - killed
            assert [state for _, state in states[:3]] != ["dead"] * 3
            assert {state for _, state in states[:3]} <= {"alive", "isolated"}, states
            print(f"killed node marked dead after {seconds:.1f} s")
            await trio.to_thread.run_sync(browser.execute_script, "window.scrollTo(0, 0)")
            shot = tmp_path / "dashboard.png"
            await trio.to_thread.run_sync(browser.save_screenshot, str(shot))
            assert shot.stat().st_size > 10_000
            target = os.environ.get("P2P_DASHBOARD_SCREENSHOT")
            if target:
                shutil.copy(shot, target)
        finally:
            await trio.to_thread.run_sync(browser.quit)
            for node in nodes:
                node.request_stop()
            nursery.cancel_scope.cancel()
