"""What an operator sees when a node cannot start, and when it stops (issue 14).

One real daemon (``p2p run`` in a subprocess) serves the process tests: a
second daemon on its data directory or its port is refused with one line
naming the cause and the fix (exit status 3), and ``p2p stop --wait``
returns only once the daemon's process is gone.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from p2p.cli.failures import describe, root_cause
from p2p.cli.main import EXIT_IN_USE, main
from p2p.runtime.datadir_lock import DataDirLock, DataDirLocked, lock_owner, process_exited
from p2p.wire.listen import ListenError, bind_tcp_listeners

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "examples" / "local.toml"
LIMIT = 120.0  # only a hang reaches it (a daemon imports torch on a loaded machine)


def _p2p(*args: str, timeout: float = LIMIT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "p2p", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


def _wait_for(predicate: object, what: str) -> None:
    deadline = time.monotonic() + LIMIT
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("p2p: error: "), stderr
    return lines[0]


class Daemon:
    """A ``p2p run`` process on ``data_dir``, listening on 127.0.0.1:``port``."""

    def __init__(self, data_dir: Path, port: int) -> None:
        self.data_dir = data_dir
        self.port = port
        self.log = data_dir.parent / "daemon.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "p2p", "run", "--config", str(CONFIG), "--data-dir",
                 str(data_dir), "--listen", f"127.0.0.1:{port}", "--bootstrap", ""],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    def wait_ready(self) -> None:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"daemon exited: {self.log.read_text()}")
            return (self.data_dir / "admin.sock").exists()

        _wait_for(ready, "the daemon's admin socket")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("daemon")
    for _ in range(5):  # a free port may be taken by someone else before the daemon binds it
        d = Daemon(root / "node", _free_port())
        try:
            d.wait_ready()
            break
        except AssertionError:
            if "address already in use" not in d.log.read_text():
                raise
    yield d
    if d.process.poll() is None:
        d.process.send_signal(signal.SIGTERM)
        d.process.wait(LIMIT)


# --------------------------------------------------------------------------- startup failures


@pytest.mark.e2e
def test_second_node_on_a_running_nodes_data_dir_is_refused_in_one_line(daemon: Daemon) -> None:
    proc = _p2p("run", "--config", str(CONFIG), "--data-dir", str(daemon.data_dir),
                "--listen", "127.0.0.1:0", "--bootstrap", "")
    assert proc.returncode == EXIT_IN_USE == 3
    line = _one_error_line(proc.stderr)  # nothing logged before: no "resumed", no "listening"
    assert line == (f"p2p: error: another node (pid {daemon.process.pid}) is already running "
                    f"with data directory {daemon.data_dir} (stop it with `p2p stop --data-dir "
                    f"{daemon.data_dir}`, or give this node another --data-dir)")
    assert daemon.process.poll() is None  # the running node is untouched


@pytest.mark.e2e
def test_busy_port_is_refused_in_one_line(daemon: Daemon, tmp_path: Path) -> None:
    proc = _p2p("run", "--config", str(CONFIG), "--data-dir", str(tmp_path / "other"),
                "--listen", f"127.0.0.1:{daemon.port}", "--bootstrap", "")
    assert proc.returncode == EXIT_IN_USE
    assert _one_error_line(proc.stderr) == (
        f"p2p: error: cannot listen on 127.0.0.1:{daemon.port}: address already in use "
        "(another program holds it; choose another port with --listen, or port 0 for any "
        "free port)")


@pytest.mark.e2e
def test_stop_wait_returns_once_the_process_is_gone(daemon: Daemon) -> None:
    assert lock_owner(daemon.data_dir) == daemon.process.pid
    proc = _p2p("stop", "--data-dir", str(daemon.data_dir), "--wait", "--wait-timeout", "60")
    assert proc.returncode == 0, proc.stderr
    # the process had exited (a zombie until reaped here) when `stop --wait` returned
    assert daemon.process.poll() == 0
    pid = daemon.process.pid
    lines = proc.stdout.splitlines()
    assert lines[0] == "node is stopping (it checkpoints and exits)"
    assert lines[1] == f"waiting up to 60 s for the node to exit (pid {pid})"
    assert lines[2].startswith(f"node has exited (pid {pid}, ")
    log = daemon.log.read_text()
    assert "p2p.runtime.node: stopped" in log
    assert lock_owner(daemon.data_dir) is None


# --------------------------------------------------------------------------- in-process pieces


def test_lock_names_the_owner_and_is_free_after_release(tmp_path: Path) -> None:
    with DataDirLock(tmp_path):
        assert lock_owner(tmp_path) == os.getpid()
        with pytest.raises(DataDirLocked, match=rf"another node \(pid {os.getpid()}\)"):
            DataDirLock(tmp_path).acquire()
    assert lock_owner(tmp_path) is None
    DataDirLock(tmp_path).acquire()  # free again (released when the object is collected)


def test_process_exited_sees_zombies_as_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    _wait_for(lambda: process_exited(child.pid), "the child to exit")  # a zombie until reaped
    assert child.wait(LIMIT) == 0
    assert not process_exited(os.getpid())


def test_process_exited_waits_for_every_thread() -> None:
    # the main thread exits first: the process reads as a zombie while a thread still runs
    code = ("import ctypes, sys, threading; t = threading.Thread(target=sys.stdin.read); "
            "t.start(); ctypes.CDLL(None).pthread_exit(None)")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    try:
        def leader_is_zombie() -> bool:
            stat = Path(f"/proc/{child.pid}/stat").read_text()
            return stat.rsplit(")", 1)[-1].split()[0] == "Z"

        _wait_for(leader_is_zombie, "the child's main thread to exit")
        assert not process_exited(child.pid)
        assert child.poll() is None  # not reapable either
    finally:
        assert child.stdin is not None
        child.stdin.close()  # the thread's read returns, the process exits
    _wait_for(lambda: process_exited(child.pid), "the child to exit")
    assert child.wait(LIMIT) == 0


def test_listen_errors_name_the_cause_and_the_fix() -> None:
    held = bind_tcp_listeners("127.0.0.1", 0)
    port = held[0].getsockname()[1]
    try:
        with pytest.raises(ListenError) as info:
            bind_tcp_listeners("127.0.0.1", port)
        assert info.value.in_use
        assert "address already in use" in str(info.value) and "--listen" in str(info.value)
    finally:
        for s in held:
            s.close()
    with pytest.raises(ListenError, match="192.0.2.1 is not an address of this machine"):
        bind_tcp_listeners("192.0.2.1", 0)  # TEST-NET-1: never local


def test_nursery_error_groups_are_unwrapped() -> None:
    class Cancelled(BaseException):  # stands for trio.Cancelled, matched by name and module
        pass

    Cancelled.__module__ = "trio._core._run"
    inner = ListenError("h:1", "cannot listen on h:1: address already in use")
    group = ExceptionGroup("Exceptions from Trio nursery (1 sub-exception)",
                           [ExceptionGroup("nested", [inner])])
    assert root_cause(group) is inner
    assert root_cause(BaseExceptionGroup("g", [inner, Cancelled()])) is inner
    both = ExceptionGroup("g", [ValueError("a"), KeyError("b")])
    assert root_cause(both) is both and describe(both) == "ValueError: a; KeyError: 'b'"


@pytest.mark.usefixtures("restore_logging")  # `p2p run` in-process configures logging
def test_a_node_error_inside_the_nursery_prints_its_own_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = sys.modules["p2p.cli.main"]  # p2p.cli.main, the attribute, is the function

    def crash(config: object, **options: object) -> int:
        raise ExceptionGroup("Exceptions from Trio nursery (1 sub-exception)",
                             [RuntimeError("the admin socket vanished")])

    monkeypatch.setattr(cli, "_start_node", crash)
    code = main(["run", "--config", str(CONFIG), "--data-dir", str(tmp_path / "d"),
                 "--listen", "127.0.0.1:0"])
    err = capsys.readouterr().err
    assert code == 1
    line = _one_error_line(err)
    assert "RuntimeError: the admin socket vanished" in line
    assert "ExceptionGroup" not in line and "Trio nursery" not in line
