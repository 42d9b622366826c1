"""Local hardening: files and sockets another local user could plant or read.

A node refuses (exit 2) a data directory, identity key or swarm key that another
user owns or can write (keys: or read); its admin server refuses clients of
other users (SO_PEERCRED); the CLI refuses a socket that is not the node's.

The pure checks run anywhere; the tests that hand files to another user need
root (CI runs as root) and are skipped otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import trio

from p2p.cli.admin_client import AdminClient, AdminSocketUntrusted
from p2p.cli.main import main
from p2p.config import encode_swarm_key, generate_swarm_key, load_swarm_key
from p2p.file_safety import (
    UnsafeFileError,
    admin_socket_problem,
    check_private_dir,
    ownership_problem,
)
from p2p.peer_credentials import admin_peer_refusal, read_peer_credentials
from p2p.runtime.admin_server import admin_socket_path, serve_admin
from p2p.runtime.datadir_lock import DataDirLock
from p2p.wire.identity import IDENTITY_FILE, Identity

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
OTHER_UID = 65534  # nobody
ME = os.geteuid()

needs_root = pytest.mark.skipif(ME != 0, reason="needs root to give files to another user")


def _stat(mode: int, uid: int) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))


DIR, REG, SOCK = stat.S_IFDIR, stat.S_IFREG, stat.S_IFSOCK


# --------------------------------------------------------------------------- pure checks


@pytest.mark.parametrize(("mode", "uid", "secret", "fragment"), [
    (DIR | 0o700, 1000, False, None),
    (DIR | 0o755, 1000, False, None),  # readable is fine for the directory
    (REG | 0o600, 1000, True, None),
    (REG | 0o400, 1000, True, None),
    (DIR | 0o700, 1001, False, "owned by uid 1001"),
    (REG | 0o600, 0, True, "owned by uid 0"),  # root's file is not the node's file either
    (DIR | 0o770, 1000, False, "its group can write it"),
    (DIR | 0o707, 1000, False, "other users can write it"),
    (DIR | 0o777, 1000, False, "its group and other users can write it"),
    (REG | 0o640, 1000, True, "its group can read it"),
    (REG | 0o604, 1000, True, "other users can read it"),
    (REG | 0o644, 1000, False, None),  # not a secret: readable is fine
    (REG | 0o620, 1000, True, "its group can write it"),
])
def test_ownership_problem(mode: int, uid: int, secret: bool, fragment: str | None) -> None:
    problem = ownership_problem(_stat(mode, uid), 1000, secret=secret)
    if fragment is None:
        assert problem is None
    else:
        assert problem is not None and fragment in problem


def test_unsafe_file_error_names_path_owner_mode_and_fix() -> None:
    path = Path("/srv/p2p")
    foreign = UnsafeFileError("data directory", path, _stat(DIR | 0o777, OTHER_UID), 0,
                              "it is owned by someone else", secret=False, origin="o")
    text = str(foreign)
    assert text.startswith("refusing to use data directory /srv/p2p: it is owned by")
    assert f"owner uid {OTHER_UID}" in text and "mode 0777" in text
    assert "`chown" in text and "remove it (o)" in text
    assert (foreign.owner, foreign.mode) == (OTHER_UID, 0o777)
    readable = UnsafeFileError("identity key", path / IDENTITY_FILE, _stat(REG | 0o644, 0), 0,
                               "other users can read it", secret=True, origin="new key")
    assert "mode 0644" in str(readable) and f"`chmod 600 {path / IDENTITY_FILE}`" in str(readable)


def test_admin_socket_problem() -> None:
    sock_path = Path("/d/admin.sock")
    mine, theirs = _stat(SOCK | 0o600, 1000), _stat(SOCK | 0o600, 1001)
    private_dir = _stat(DIR | 0o700, 1000)
    assert admin_socket_problem(sock_path, mine, private_dir, 1000) is None
    assert admin_socket_problem(sock_path, mine, private_dir, 0) is None  # root may ask
    other = admin_socket_problem(sock_path, theirs, private_dir, 1000)
    assert other is not None and "admin socket /d/admin.sock is owned by uid 1001" in other
    assert "not the daemon's user (uid 1000" in other and "refusing to talk to it" in other
    open_dir = admin_socket_problem(sock_path, mine, _stat(DIR | 0o777, 1000), 1000)
    assert open_dir is not None and "mode 0777" in open_dir
    not_mine = admin_socket_problem(sock_path, theirs, _stat(DIR | 0o700, 1001), 1000)
    assert not_mine is not None and "not by you" in not_mine


def test_admin_peer_refusal() -> None:
    assert admin_peer_refusal(1000, 1000) is None
    assert admin_peer_refusal(0, 1000) is None
    refusal = admin_peer_refusal(1001, 1000)
    assert refusal is not None and "uid 1001" in refusal


def test_peer_credentials_of_a_real_socket_are_ours() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        creds = read_peer_credentials(a)
    if not hasattr(socket, "SO_PEERCRED"):
        assert creds is None
        return
    assert creds is not None
    assert (creds.pid, creds.uid, creds.gid) == (os.getpid(), ME, os.getegid())


# --------------------------------------------------------------------------- the node's files


def test_node_created_files_pass_and_load_again(tmp_path: Path) -> None:
    data_dir = tmp_path / "fresh"
    first = Identity.load_or_create(data_dir)
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((data_dir / IDENTITY_FILE).stat().st_mode) == 0o600
    assert Identity.load_or_create(data_dir).node_id == first.node_id
    with DataDirLock(data_dir) as lock:
        assert lock.held
    key = generate_swarm_key()
    from p2p.config import write_swarm_key

    write_swarm_key(tmp_path / "swarm.key", key)
    assert load_swarm_key(tmp_path / "swarm.key") == key


@pytest.mark.parametrize("mode", [0o770, 0o777, 0o757])
def test_writable_data_dir_is_refused(tmp_path: Path, mode: int) -> None:
    data_dir = tmp_path / "d"
    Identity.load_or_create(data_dir)
    data_dir.chmod(mode)
    with pytest.raises(UnsafeFileError, match=f"mode {mode:04o}") as info:
        Identity.load_or_create(data_dir)
    assert info.value.path == data_dir and "can write it" in str(info.value)
    with pytest.raises(UnsafeFileError):
        DataDirLock(data_dir).acquire()
    assert not (data_dir / "node.lock").exists()  # refused before anything is written


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o666])
def test_open_identity_key_is_refused(tmp_path: Path, mode: int) -> None:
    Identity.load_or_create(tmp_path)
    (tmp_path / IDENTITY_FILE).chmod(mode)
    with pytest.raises(UnsafeFileError, match=f"identity key .*mode {mode:04o}"):
        Identity.load_or_create(tmp_path)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o602])
def test_open_swarm_key_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "swarm.key"
    path.write_text(encode_swarm_key(generate_swarm_key()))
    path.chmod(mode)
    with pytest.raises(UnsafeFileError, match=f"swarm key file {path}: .*mode {mode:04o}.*"
                                              f"chmod 600 {path}"):
        load_swarm_key(path)


def test_planted_fifo_key_is_refused_without_hanging(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / IDENTITY_FILE, 0o600)
    with pytest.raises(UnsafeFileError, match="not a regular file"):
        Identity.load_or_create(tmp_path)


@needs_root
def test_data_dir_of_another_user_is_refused(tmp_path: Path) -> None:
    data_dir = tmp_path / "planted"
    data_dir.mkdir(mode=0o700)
    planted = Identity.generate()
    planted.save(data_dir / IDENTITY_FILE)
    os.chown(data_dir, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeFileError, match=f"owned by uid {OTHER_UID}") as info:
        Identity.load_or_create(data_dir)
    assert info.value.owner == OTHER_UID
    with pytest.raises(UnsafeFileError):
        DataDirLock(data_dir).acquire()


@needs_root
def test_keys_of_another_user_are_refused(tmp_path: Path) -> None:
    Identity.load_or_create(tmp_path)
    os.chown(tmp_path / IDENTITY_FILE, OTHER_UID, -1)
    with pytest.raises(UnsafeFileError, match=f"identity key .* owned by uid {OTHER_UID}"):
        Identity.load_or_create(tmp_path)
    path = tmp_path / "swarm.key"
    path.write_text(encode_swarm_key(generate_swarm_key()))
    path.chmod(0o600)
    os.chown(path, OTHER_UID, -1)
    with pytest.raises(UnsafeFileError, match=f"owned by uid {OTHER_UID}"):
        load_swarm_key(path)


# --------------------------------------------------------------------------- `p2p run`


def _error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("p2p: error: "), err
    return lines[0]


def test_run_refuses_a_world_writable_data_dir_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], restore_logging: None
) -> None:
    data_dir = tmp_path / "d"
    data_dir.mkdir()
    data_dir.chmod(0o777)
    code = main(["run", "--config", str(EXAMPLES / "local.toml"), "--data-dir", str(data_dir),
                 "--listen", "127.0.0.1:0", "--bootstrap", ""])
    line = _error_line(capsys.readouterr().err)
    assert code == 2
    assert line.startswith(f"p2p: error: refusing to use data directory {data_dir}: its group "
                           "and other users can write it")
    assert "mode 0777" in line and f"chmod 700 {data_dir}" in line
    assert not (data_dir / IDENTITY_FILE).exists()


@needs_root
def test_run_refuses_a_data_dir_planted_by_another_user(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], restore_logging: None
) -> None:
    data_dir = tmp_path / "d"
    data_dir.mkdir(mode=0o700)
    os.chown(data_dir, OTHER_UID, OTHER_UID)
    code = main(["run", "--config", str(EXAMPLES / "local.toml"), "--data-dir", str(data_dir),
                 "--listen", "127.0.0.1:0", "--bootstrap", ""])
    line = _error_line(capsys.readouterr().err)
    assert code == 2
    assert f"refusing to use data directory {data_dir}: it is owned by uid {OTHER_UID}" in line
    assert "mode 0700" in line and f"chown root {data_dir}" in line


def test_run_refuses_a_readable_swarm_key_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], restore_logging: None
) -> None:
    key = tmp_path / "swarm.key"
    key.write_text(encode_swarm_key(generate_swarm_key()))
    key.chmod(0o644)
    code = main(["run", "--config", str(EXAMPLES / "local.toml"), "--data-dir",
                 str(tmp_path / "d"), "--listen", "127.0.0.1:0", "--bootstrap", "",
                 "--swarm-key-file", str(key)])
    line = _error_line(capsys.readouterr().err)
    assert code == 2
    assert f"refusing to use swarm key file {key}: its group and other users can read it" in line
    assert "mode 0644" in line


# --------------------------------------------------------------------------- admin socket


class _Handler:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def _record(self, name: str) -> dict[str, Any]:
        self.calls.append(name)
        return {"stopping": True} if name == "stop" else {"id": "ab" * 32, "round": 1}

    def status(self) -> dict[str, Any]:
        return self._record("status")

    def peers(self) -> dict[str, Any]:
        return self._record("peers")

    def models(self) -> dict[str, Any]:
        return self._record("models")

    def metrics(self) -> dict[str, Any]:
        return self._record("metrics")

    def checkpoint(self) -> dict[str, Any]:
        return self._record("checkpoint")

    def stop(self) -> dict[str, Any]:
        return self._record("stop")

    def groups(self) -> dict[str, Any]:
        return self._record("groups")


def _system_python() -> str:
    """A Python that another user can run (the venv's may live under /root)."""
    for candidate in ("/usr/bin/python3", shutil.which("python3")):
        if candidate and os.access(candidate, os.X_OK) and not candidate.startswith("/root"):
            return candidate
    pytest.skip("no Python runnable by another user")


_CLIENT = """
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
try:
    s.sendall(b'{"cmd": "stop"}\\n')
except BrokenPipeError:  # refused: the reason is waiting to be read
    pass
data = b""
while not data.endswith(b"\\n"):
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
print(data.decode().strip())
"""


@needs_root
async def test_admin_server_refuses_a_client_of_another_user() -> None:
    python = _system_python()
    handler = _Handler()
    # a directory `nobody` can reach, with the socket opened up as if misconfigured:
    # only the kernel's word (SO_PEERCRED) still stands between it and the node
    data_dir = Path(tempfile.mkdtemp(prefix="p2p-hardening-", dir="/tmp"))
    try:
        data_dir.chmod(0o711)
        async with trio.open_nursery() as nursery:
            path = await nursery.start(serve_admin, admin_socket_path(data_dir), handler)
            path.chmod(0o666)
            other = await trio.to_thread.run_sync(lambda: subprocess.run(
                [python, "-c", _CLIENT, str(path)], user=OTHER_UID, capture_output=True,
                text=True, timeout=60))
            assert other.returncode == 0, other.stderr
            reply = json.loads(other.stdout)
            assert reply["ok"] is False and f"uid {OTHER_UID}" in reply["error"]
            assert handler.calls == []  # the node was never asked
            own = await trio.to_thread.run_sync(lambda: subprocess.run(
                [python, "-c", _CLIENT, str(path)], capture_output=True, text=True,
                timeout=60))
            assert json.loads(own.stdout) == {"ok": True, "result": {"stopping": True}}
            assert handler.calls == ["stop"]
            nursery.cancel_scope.cancel()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


async def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await trio.to_thread.run_sync(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@needs_root
async def test_cli_refuses_a_socket_owned_by_another_user(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    handler = _Handler()
    async with trio.open_nursery() as nursery:
        path = await nursery.start(serve_admin, admin_socket_path(tmp_path), handler)
        code, out, _ = await _cli(capsys, "status", "--data-dir", str(tmp_path), "--json")
        assert code == 0 and json.loads(out)["round"] == 1  # trusted as it is
        os.chown(path, OTHER_UID, -1)  # a socket someone else made
        for verb in ("status", "stop"):
            code, out, err = await _cli(capsys, verb, "--data-dir", str(tmp_path))
            line = _error_line(err)
            assert code == 1 and out == ""
            assert line == (f"p2p: error: admin socket {path} is owned by uid {OTHER_UID} "
                            f"(nobody), not the daemon's user (uid 0 (root), the owner of "
                            f"{tmp_path}): refusing to talk to it")
        os.chown(path, 0, -1)
        tmp_path.chmod(0o777)  # anyone could have replaced the socket
        code, _, err = await _cli(capsys, "stop", "--data-dir", str(tmp_path))
        assert code == 1 and "mode 0777" in _error_line(err)
        tmp_path.chmod(0o700)
        os.chown(tmp_path, OTHER_UID, -1)  # the directory is someone else's
        with pytest.raises(AdminSocketUntrusted, match=f"admin socket {path} is owned by uid 0"):
            await trio.to_thread.run_sync(AdminClient(path).request, "stop")
        os.chown(tmp_path, 0, -1)
        assert handler.calls == ["status"]  # no stop ever reached the node
        nursery.cancel_scope.cancel()


_FAKE_SERVER = """
import json, os, socket, sys
path = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
os.chmod(path, 0o600)
s.listen(1)
print("ready", flush=True)
c, _ = s.accept()
while not c.recv(4096).endswith(b"\\n"):
    pass
c.sendall(json.dumps({"ok": True, "result": {"stopping": True}}).encode() + b"\\n")
c.close()
if len(sys.argv) > 2:
    os.unlink(path)  # the socket goes, the process stays
sys.stdin.read()
"""


@needs_root
async def test_cli_refuses_a_server_process_of_another_user(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if not hasattr(socket, "SO_PEERCRED"):
        pytest.skip("no SO_PEERCRED on this platform")
    python = _system_python()
    data_dir = Path(tempfile.mkdtemp(prefix="p2p-hardening-", dir="/tmp"))
    path = admin_socket_path(data_dir)
    try:
        os.chown(data_dir, OTHER_UID, -1)
        server = subprocess.Popen([python, "-c", _FAKE_SERVER, str(path)], user=OTHER_UID,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            assert await trio.to_thread.run_sync(server.stdout.readline) == "ready\n"
            # files that look like root's, served by a process that is not
            os.chown(path, 0, -1)
            os.chown(data_dir, 0, -1)
            code, _, err = await _cli(capsys, "stop", "--data-dir", str(data_dir))
            line = _error_line(err)
            assert code == 1
            assert f"(pid {server.pid}) runs as uid {OTHER_UID} (nobody), not as the daemon's " \
                   "user (uid 0 (root)): refusing to talk to it" in line
        finally:
            server.kill()
            server.wait()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


async def test_stop_wait_waits_for_the_process_not_the_socket(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that answers `stop`, removes its socket and keeps running: the
    node has not stopped, so `p2p stop --wait` must not say it has."""
    if not hasattr(socket, "SO_PEERCRED"):
        pytest.skip("no SO_PEERCRED on this platform")
    path = admin_socket_path(tmp_path)
    server = subprocess.Popen([sys.executable, "-c", _FAKE_SERVER, str(path), "unlink"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert await trio.to_thread.run_sync(server.stdout.readline) == "ready\n"
        code, out, err = await _cli(capsys, "stop", "--data-dir", str(tmp_path), "--wait",
                                    "--wait-timeout", "0.5")
        assert code == 1, out
        assert f"waiting up to 0.5 s for the node to exit (pid {server.pid})" in out
        assert f"the node (pid {server.pid}) is still running" in _error_line(err)
        assert server.poll() is None
    finally:
        server.kill()
        server.wait()


def test_check_private_dir_accepts_a_private_dir(tmp_path: Path) -> None:
    assert check_private_dir(tmp_path).st_uid == ME
