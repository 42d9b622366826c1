"""What watching a swarm costs its nodes: the metrics endpoint and the dashboard.

Paired, interleaved runs of the same swarm of daemons (seed, data, rounds):
"off" (no [metrics]) and "on" (every daemon serves /metrics, a scraper fetches
every endpoint once a second, and a dashboard polls every admin socket once a
second with its page open: Debian's headless Chromium when installed, else a
client fetching the page's JSON every two seconds). The order alternates from
pair to pair (off/on, on/off). Prints, as medians with the min-max over the
pairs: the ratio on/off of the daemons' rounds per second; each daemon's own
CPU seconds per round on and off and their ratio (what the node pays, less
sensitive to other load); the CPU of this process (scraper and dashboard) and
of the page's browser as shares of one core; and the CPU a scrape and a poll
cost on a node's thread (a node in this process, thread CPU time).

    python scripts/bench/monitoring.py --pairs 8 --rounds 150   # the figures of results
    python scripts/bench/monitoring.py --quick      # 1 pair, 20 rounds: a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import trio

from lab.procfs import cpu_seconds
from p2p.cli.admin_client import AdminClientError
from p2p.dashboard import READ_COMMANDS, SLOW_EVERY, Dashboard, DashboardThread, SocketSource
from p2p.runtime.admin_server import to_jsonable
from p2p.swarm import Swarm, SwarmSpec
from p2p.testing import MemoryNetwork, wait_until
from p2p.testing.nodes import fast_spec, memory_swarm, running

METRICS_ON = '[metrics]\nlisten = "127.0.0.1:0"\n'


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return bytes(reply.read())


@contextmanager
def watching(swarm: Swarm, use_browser: bool) -> Iterator[dict[str, Any]]:
    """Scrape every daemon's endpoint and keep a dashboard open, once a second each;
    entered before the swarm starts (the browser takes seconds to start), it finds
    the daemons and their endpoints as they come up."""
    stats: dict[str, Any] = {"scrapes": 0, "scrape_failures": 0, "page": None}
    stop = threading.Event()
    urls: dict[int, str] = {}

    def scrape() -> None:
        while not stop.wait(1.0):
            for d in list(swarm.daemons):
                if d.index not in urls and d.address is not None:
                    try:
                        url = d.client.request("status").get("metrics_url")
                    except (AdminClientError, OSError):
                        continue
                    if isinstance(url, str):
                        urls[d.index] = url
                if d.index not in urls:
                    continue
                try:
                    _get(urls[d.index])
                    stats["scrapes"] += 1
                except OSError:
                    stats["scrape_failures"] += 1

    board = DashboardThread(Dashboard(lambda: [SocketSource(d.data_dir)
                                               for d in swarm.daemons]), "127.0.0.1", 0)
    page_url = board.start()
    threads = [threading.Thread(target=scrape, daemon=True)]
    browser = _open_browser(page_url) if use_browser else None
    if browser is None:
        api = page_url.replace("/?token=", "/api/state?token=")
        threads.append(threading.Thread(target=lambda: [
            _get(api) for _ in iter(lambda: stop.wait(2.0), True)], daemon=True))
    stats["page"] = "headless chromium" if browser is not None else "JSON poller"
    for t in threads:
        t.start()
    page_cpu = _browser_cpu(browser)
    started = time.monotonic()
    try:
        yield stats
        if browser is not None:
            stats["page_core_share"] = ((_browser_cpu(browser) - page_cpu)
                                        / (time.monotonic() - started))
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        if browser is not None:
            browser.quit()
        board.stop()


def _browser_cpu(browser: Any) -> float:
    """CPU seconds of the browser's processes (chromedriver's descendants)."""
    if browser is None:
        return 0.0
    root = browser.service.process.pid
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        try:
            total += cpu_seconds(pid)
        except (OSError, IndexError, ValueError):
            pass
        todo += children.get(pid, [])
    return total


def _open_browser(url: str) -> Any:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"):
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='bench-chromium-')}")
    browser = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    browser.get(url)
    return browser


def daemons_cpu(swarm: Swarm) -> list[float]:
    return [cpu_seconds(d.process.pid) if d.process is not None else 0.0
            for d in swarm.daemons]


def one_run(spec: SwarmSpec, workdir: Path, on: bool, use_browser: bool) -> dict[str, Any]:
    """One swarm run: the daemons' median rounds per second, each daemon's CPU seconds
    per round, this process's CPU share of a core, and what watching did."""
    with Swarm(spec, workdir=workdir) as swarm:
        watcher: AbstractContextManager[dict[str, Any]] = (
            watching(swarm, use_browser) if on else nullcontext({}))
        with watcher as stats:
            swarm.start()
            before = daemons_cpu(swarm)  # from here: training, not start-up (torch's import)
            own, wall = cpu_seconds(), time.monotonic()
            swarm.run_until_done(timeout=900)
            after = daemons_cpu(swarm)
            own, wall = cpu_seconds() - own, time.monotonic() - wall
        summary = swarm.summary()
        rounds = [int(d.status.get("round", 0)) for d in swarm.daemons]
        swarm.stop()
    rates = [r for r in summary["rounds_per_second"].values() if r is not None]
    return {"on": on, "rounds_per_second": statistics.median(rates),
            "cpu_per_round": [(b - a) / max(1, n) for a, b, n in zip(before, after, rounds,
                                                                      strict=True)],
            "bench_core_share": own / wall, **stats}


def node_costs(samples: int, count: int = 4) -> dict[str, list[float]]:
    """Thread CPU milliseconds, on a training node (one of ``count`` in this process), of
    rendering a scrape and of the admin commands' work for a dashboard poll (status
    alone, and all four; the socket's own work aside)."""
    out: dict[str, list[float]] = {"scrape": [], "status": [], "poll": [], "bytes": []}

    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            nodes = memory_swarm(Path(tmp), MemoryNetwork(seed=0),
                                 fast_spec(nodes=count, rounds=0), metrics="127.0.0.1:0")
            endpoint, admin = nodes[0].metrics_endpoint, nodes[0].admin
            endpoint.max_age = 0.0  # render every time: the cost of one scrape
            async with running(nodes):
                await wait_until(lambda: nodes[0].progress.round >= 3, timeout=120)
                for _ in range(samples):
                    t0 = time.thread_time()
                    body, _ = endpoint.exposition()
                    t1 = time.thread_time()
                    json.dumps(to_jsonable(admin.status()))
                    t2 = time.thread_time()
                    for command in READ_COMMANDS[1:]:
                        json.dumps(to_jsonable(getattr(admin, command)()))
                    t3 = time.thread_time()
                    out["scrape"].append(1000 * (t1 - t0))
                    out["status"].append(1000 * (t2 - t1))
                    out["poll"].append(1000 * (t3 - t1))
                    out["bytes"].append(float(len(body)))
                    await trio.sleep(0.01)  # the node trains between scrapes
                for node in nodes:
                    node.request_stop()

    trio.run(main)
    return out


def spread(values: list[float], scale: float = 1.0, digits: int = 3) -> str:
    """``median [min-max]`` of ``values`` times ``scale``."""
    v = sorted(x * scale for x in values)
    return f"{statistics.median(v):.{digits}f} [{v[0]:.{digits}f}-{v[-1]:.{digits}f}]"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=8, help="on/off pairs (default 8)")
    p.add_argument("--nodes", type=int, default=4, help="daemons per run (default 4)")
    p.add_argument("--rounds", type=int, default=150, help="rounds per run (default 150)")
    p.add_argument("--no-browser", action="store_true",
                   help="keep the page open with a JSON poller even where Chromium exists")
    p.add_argument("--scrapes", type=int, default=200,
                   help="scrapes and polls timed for the node's CPU figures")
    p.add_argument("--json", type=Path, metavar="PATH", help="write every figure as JSON")
    p.add_argument("--quick", action="store_true",
                   help="1 pair of 20 rounds and 20 scrapes (checks the bench runs; no figure)")
    args = p.parse_args(argv)
    if args.quick:
        args.pairs, args.rounds, args.scrapes = 1, 20, 20
    root = Path(tempfile.mkdtemp(prefix="bench-monitoring-"))
    templates = {True: root / "on.toml", False: root / "off.toml"}
    templates[True].write_text(METRICS_ON)
    templates[False].write_text("")
    load = [os.getloadavg()[0]]
    runs: list[dict[str, Any]] = []
    ratios: list[float] = []
    cpu: dict[bool, list[float]] = {True: [], False: []}  # per pair: median over daemons
    cpu_ratios: list[float] = []
    for pair in range(args.pairs):
        order = (False, True) if pair % 2 == 0 else (True, False)
        got: dict[bool, dict[str, Any]] = {}
        for on in order:
            spec = SwarmSpec(nodes=args.nodes, rounds=args.rounds, seed=0,
                             template=str(templates[on]))
            run = got[on] = one_run(spec, root / f"p{pair}-{'on' if on else 'off'}", on,
                                    not args.no_browser)
            runs.append({"pair": pair, **run})
            if on and not run["scrapes"]:
                raise SystemExit("monitoring bench: no scrape succeeded in an 'on' run (do the "
                                 "daemons' status still give metrics_url?); no figure")
            load.append(os.getloadavg()[0])
            page = (f"; {run['scrapes']} scrapes, page: {run['page']}"
                    + (f" {100 * run['page_core_share']:.1f}% of a core"
                       if "page_core_share" in run else "")) if on else ""
            print(f"pair {pair} {'on ' if on else 'off'}: {run['rounds_per_second']:.2f} rounds/s "
                  f"per daemon; CPU per round per daemon {spread(run['cpu_per_round'], 1e3, 1)} "
                  f"ms; this process {100 * run['bench_core_share']:.1f}% of a core{page}",
                  flush=True)
        ratios.append(got[True]["rounds_per_second"] / got[False]["rounds_per_second"])
        for on in (True, False):
            cpu[on].append(statistics.median(got[on]["cpu_per_round"]))
        cpu_ratios.append(cpu[True][-1] / cpu[False][-1])
    costs = node_costs(args.scrapes)
    shutil.rmtree(root, ignore_errors=True)
    print(f"\n{args.pairs} interleaved pairs (order alternating), {args.nodes} daemons x "
          f"{args.rounds} rounds; load average {min(load):.1f}-{max(load):.1f}; "
          "median [min-max] over the pairs:")
    print(f"  rounds/s on/off:                  {spread(ratios)}")
    print(f"  CPU per round per daemon, off:    {spread(cpu[False], 1e3, 2)} ms")
    print(f"  CPU per round per daemon, on:     {spread(cpu[True], 1e3, 2)} ms")
    print(f"  CPU per round on/off:             {spread(cpu_ratios)}")
    for on in (False, True):
        shares = [r["bench_core_share"] for r in runs if r["on"] is on]
        print(f"  this process ({'scraper, dashboard, ' if on else ''}launcher), "
              f"{'on' if on else 'off'}: {spread(shares, 100, 1)} % of a core")
    shares = [r["page_core_share"] for r in runs if "page_core_share" in r]
    if shares:
        print(f"  the open page (headless Chromium): {spread(shares, 100, 1)} % of a core")
    per_second = [a + b + (c - b) / SLOW_EVERY for a, b, c in zip(
        costs["scrape"], costs["status"], costs["poll"], strict=True)]
    print(f"one training node, over {args.scrapes} samples, thread CPU in ms, median [min-max]:"
          f"\n  a scrape (rendering {statistics.median(costs['bytes']) / 1e3:.1f} kB): "
          f"{spread(costs['scrape'], 1, 2)}\n  a poll's command work, status alone: "
          f"{spread(costs['status'], 1, 2)}; all four: {spread(costs['poll'], 1, 2)}\n"
          f"  per second watched (a scrape, a status, a fifth of the rest): "
          f"{spread(per_second, 1, 2)}")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "ratios": ratios, "cpu_per_round": {
            "on": cpu[True], "off": cpu[False]}, "cpu_ratios": cpu_ratios, "load": load,
            "node_costs_ms": costs}, indent=2))
    return 0
