"""What watching a swarm costs its nodes: the metrics endpoint and the dashboard.

Paired, interleaved runs of the same swarm of daemons (seed, data, rounds):
"off" (no [metrics]) and "on" (every daemon serves /metrics on a port of its
own, a scraper fetches every endpoint once a second, and a dashboard polls
every admin socket once a second with its page open: Debian's headless
Chromium when installed, else a client fetching the page's JSON once a
second). The order alternates from pair to pair. Prints the median ratio
on/off of the daemons' training rounds per second with its min-max spread
over the pairs; the same for the daemons' CPU seconds per round (what the
nodes themselves pay, less sensitive to other load on the machine); the
page's own CPU (Chromium's processes) as a share of one core; and the CPU
one scrape costs on the node's thread (a node in this process, measured
with thread CPU time, median over scrapes).

    python scripts/bench/monitoring.py              # 5 pairs, 4 daemons, 60 rounds
    python scripts/bench/monitoring.py --pairs 7 --nodes 8
    python scripts/bench/monitoring.py --quick      # 1 pair, 20 rounds: a smoke run
"""

from __future__ import annotations

import argparse
import json
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
from p2p.dashboard import Dashboard, DashboardThread, SocketSource
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
                    urls[d.index] = str(d.client.request("status")["metrics"])
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
            _get(api) for _ in iter(lambda: stop.wait(1.0), True)], daemon=True))
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


def daemons_cpu(swarm: Swarm) -> float:
    return sum(cpu_seconds(d.process.pid) for d in swarm.daemons if d.process is not None)


def one_run(spec: SwarmSpec, workdir: Path, on: bool, use_browser: bool) -> dict[str, Any]:
    """One swarm run; the daemons' median rounds per second and what watching did."""
    with Swarm(spec, workdir=workdir) as swarm:
        watcher: AbstractContextManager[dict[str, Any]] = (
            watching(swarm, use_browser) if on else nullcontext({}))
        with watcher as stats:
            swarm.start()
            cpu = -daemons_cpu(swarm)  # from here: training, not start-up (torch's import)
            swarm.run_until_done(timeout=900)
            cpu += daemons_cpu(swarm)
        summary = swarm.summary()
        rounds = sum(int(d.status.get("round", 0)) for d in swarm.daemons)
        swarm.stop()
    rates = [r for r in summary["rounds_per_second"].values() if r is not None]
    return {"on": on, "rounds_per_second": statistics.median(rates),
            "cpu_per_round": cpu / max(1, rounds), **stats}


def scrape_cpu(samples: int, count: int = 4) -> dict[str, float]:
    """Thread CPU milliseconds of one scrape of a training node, one of ``count`` in this
    process."""
    out: dict[str, float] = {}

    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            nodes = memory_swarm(Path(tmp), MemoryNetwork(seed=0),
                                 fast_spec(nodes=count, rounds=0), metrics="127.0.0.1:0")
            async with running(nodes):
                await wait_until(lambda: nodes[0].progress.round >= 3, timeout=120)
                costs = []
                for _ in range(samples):
                    t0 = time.thread_time()
                    body, _ = nodes[0].metrics_endpoint.exposition()
                    costs.append(1000 * (time.thread_time() - t0))
                    await trio.sleep(0.01)  # the node trains between scrapes
                out.update(median_ms=statistics.median(costs), max_ms=max(costs),
                           bytes=float(len(body)))
                for node in nodes:
                    node.request_stop()

    trio.run(main)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=5, help="on/off pairs (default 5)")
    p.add_argument("--nodes", type=int, default=4, help="daemons per run (default 4)")
    p.add_argument("--rounds", type=int, default=60, help="rounds per run (default 60)")
    p.add_argument("--no-browser", action="store_true",
                   help="keep the page open with a JSON poller even where Chromium exists")
    p.add_argument("--scrapes", type=int, default=200, help="scrapes timed for the CPU figure")
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
    runs: list[dict[str, Any]] = []
    ratios: list[float] = []
    cpu_ratios: list[float] = []
    for pair in range(args.pairs):
        order = (False, True) if pair % 2 == 0 else (True, False)
        got, cpu = {}, {}
        for on in order:
            spec = SwarmSpec(nodes=args.nodes, rounds=args.rounds, seed=0,
                             template=str(templates[on]))
            run = one_run(spec, root / f"p{pair}-{'on' if on else 'off'}", on,
                          not args.no_browser)
            got[on], cpu[on] = run["rounds_per_second"], run["cpu_per_round"]
            runs.append({"pair": pair, **run})
            page = (f" ({run['scrapes']} scrapes, page: {run['page']}"
                    + (f", {100 * run['page_core_share']:.1f}% of a core"
                       if "page_core_share" in run else "") + ")") if on else ""
            print(f"pair {pair} {'on ' if on else 'off'}: {run['rounds_per_second']:.2f} "
                  f"rounds/s per daemon, {1000 * run['cpu_per_round']:.1f} ms CPU per round"
                  + page, flush=True)
        ratios.append(got[True] / got[False])
        cpu_ratios.append(cpu[True] / cpu[False])
    scrape = scrape_cpu(args.scrapes)
    shutil.rmtree(root, ignore_errors=True)
    print(f"rounds/s on/off over {args.pairs} interleaved pairs, {args.nodes} daemons x "
          f"{args.rounds} rounds: median ratio {statistics.median(ratios):.3f} "
          f"[{min(ratios):.3f}-{max(ratios):.3f}]")
    print(f"daemons' CPU per round on/off: median ratio {statistics.median(cpu_ratios):.3f} "
          f"[{min(cpu_ratios):.3f}-{max(cpu_ratios):.3f}]")
    shares = [r["page_core_share"] for r in runs if "page_core_share" in r]
    if shares:
        print(f"the open page (headless Chromium): median {100 * statistics.median(shares):.1f}% "
              "of one core")
    print(f"one scrape of a training node: median {scrape['median_ms']:.2f} ms CPU (max "
          f"{scrape['max_ms']:.2f} ms over {args.scrapes}), {scrape['bytes'] / 1e3:.1f} kB of "
          "text")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "ratios": ratios,
                                         "cpu_ratios": cpu_ratios, "scrape_cpu": scrape},
                                        indent=2))
    return 0
