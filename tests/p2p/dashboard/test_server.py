"""The dashboard's HTTP side: the token gate, the static files shipped in the package,
the JSON, a non-loopback --listen refused without --allow-remote, and the command's
usage errors."""

from __future__ import annotations

import json
import os
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import trio

from p2p.cli.main import EXIT_USAGE, main
from p2p.dashboard import Dashboard, DashboardThread, SocketSource
from p2p.dashboard.cli import DashboardUsage, check_listen, sources_for
from p2p.dashboard.server import STATIC_FILES
from p2p.web import bind_http, listen_url


def _fetch(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return int(reply.status), reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


async def test_the_page_needs_the_token_and_ships_its_files(tmp_path: Path) -> None:
    empty = tmp_path / "no-node-here"
    empty.mkdir()
    dashboard = Dashboard(lambda: [SocketSource(empty)], interval=0.2)
    listeners = bind_http("127.0.0.1", 0, setting="--listen")
    base = listen_url(listeners)
    async with trio.open_nursery() as nursery:
        await nursery.start(dashboard.run, listeners)
        while dashboard.polls < 1:
            await trio.sleep(0.05)
        fetch = trio.to_thread.run_sync
        assert (await fetch(_fetch, base + "/"))[0] == 403
        assert (await fetch(_fetch, base + "/api/state?token=wrong"))[0] == 403
        code, page = await fetch(_fetch, f"{base}/?token={dashboard.token}")
        assert code == 200 and b"static/uPlot.iife.min.js" in page
        code, body = await fetch(_fetch, f"{base}/api/state?token={dashboard.token}")
        state = json.loads(body)
        assert code == 200 and [(n["label"], n["state"]) for n in state["nodes"]] == [
            ("no-node-here", "no-node")]
        for name in STATIC_FILES:
            code, data = await fetch(_fetch, f"{base}/static/{name}")
            assert code == 200 and data, name
        license_text = (await fetch(_fetch, f"{base}/static/uPlot-LICENSE.txt"))[1]
        assert b"MIT License" in license_text
        assert (await fetch(_fetch, f"{base}/static/../server.py"))[0] == 404
        nursery.cancel_scope.cancel()
    assert len(dashboard.token) >= 24


def test_listen_beyond_loopback_needs_allow_remote() -> None:
    assert check_listen("127.0.0.1:0", False) == ("127.0.0.1", 0)
    assert check_listen("[::1]:9480", False) == ("::1", 9480)
    with pytest.raises(DashboardUsage, match="needs --allow-remote"):
        check_listen("0.0.0.0:9480", False)
    assert check_listen("0.0.0.0:9480", True) == ("0.0.0.0", 9480)


def test_globs_and_dirs_make_one_source_each(tmp_path: Path) -> None:
    for name in ("n0", "n1"):
        (tmp_path / name).mkdir()
    (tmp_path / "file").write_text("")
    sources = sources_for([str(tmp_path / "n0")], [str(tmp_path / "*")],
                          ["http://h:9400/metrics"])
    assert [s.label for s in sources] == ["n0", "n1", "h:9400"]


def test_the_command_says_what_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard"]) == EXIT_USAGE
    assert "nothing to watch" in capsys.readouterr().err
    assert main(["dashboard", "--data-dir", "x", "--listen", "0.0.0.0:0"]) == EXIT_USAGE
    assert "--allow-remote" in capsys.readouterr().err
    assert main(["dashboard", "--data-dir", "x", "--nice", "-5"]) == EXIT_USAGE
    assert "--nice: expected 0" in capsys.readouterr().err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="nice is per thread on Linux")
def test_the_dashboard_thread_lowers_only_its_own_priority() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    board = DashboardThread(Dashboard(list), "127.0.0.1", 0, nice=3)
    board.start()
    try:
        (thread,) = [t for t in threading.enumerate() if t.name == "dashboard"]
        assert thread.native_id is not None
        assert os.getpriority(os.PRIO_PROCESS, thread.native_id) == min(19, base + 3)
        assert os.getpriority(os.PRIO_PROCESS, 0) == base  # the caller's is unchanged
    finally:
        board.stop()
