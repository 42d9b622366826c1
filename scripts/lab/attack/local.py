"""Local attacks on a node's files and admin socket, replayed against the real ``p2p`` command.

Run as root (it hands files to ``nobody`` to play the local attacker)::

    sudo .venv/bin/python scripts/attack/local.py

Each case prepares what a local user could leave behind, runs ``p2p run`` (or
``p2p stop`` / a raw admin client) and prints the exit status and the first
error line. The node should refuse every one: ``p2p run`` with exit status 2,
``p2p stop`` with 1, and the admin server with an error reply.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # the checkout (scripts/lab/GROUP/FILE)
CONFIG = ROOT / "examples" / "local.toml"
NOBODY = 65534

_FAKE_ADMIN = """
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o777); s.listen(4)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.recv(4096)
    c.sendall(json.dumps({"ok": True, "result": {"stopping": True}}).encode() + b"\\n")
    c.close()
"""

_CLIENT = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
try:
    s.sendall(b'{"cmd": "status"}\\n')
except BrokenPipeError:
    pass
print(s.recv(65536).decode().strip())
"""


def _p2p(*argv: str, timeout: float = 120.0) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "p2p", *argv], capture_output=True,
                          text=True, timeout=timeout)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("p2p: error:")]
    return proc.returncode, lines[0] if lines else (proc.stderr.strip().splitlines() or [""])[-1]


def _run_node(data_dir: Path, *extra: str) -> tuple[int, str]:
    return _p2p("run", "--config", str(CONFIG), "--data-dir", str(data_dir),
                "--listen", "127.0.0.1:0", "--bootstrap", "", "--rounds", "1", *extra)


def _system_python() -> str:
    for candidate in ("/usr/bin/python3", shutil.which("python3")):
        if candidate and not candidate.startswith("/root") and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit("no Python runnable by another user")


def _planted_data_dir(work: Path) -> tuple[int, str]:
    """A world-writable data directory made by another user, with its identity key."""
    data_dir = work / "planted"
    data_dir.mkdir()
    subprocess.run([sys.executable, "-c", "import sys; from p2p.wire.identity import Identity;"
                    " Identity.generate().save(__import__('pathlib').Path(sys.argv[1]))",
                    str(data_dir / "identity.key")], check=True)
    data_dir.chmod(0o777)
    os.chown(data_dir / "identity.key", NOBODY, NOBODY)
    os.chown(data_dir, NOBODY, NOBODY)
    return _run_node(data_dir)


def _world_writable_data_dir(work: Path) -> tuple[int, str]:
    data_dir = work / "open"
    data_dir.mkdir()
    data_dir.chmod(0o777)
    return _run_node(data_dir)


def _readable_identity_key(work: Path) -> tuple[int, str]:
    data_dir = work / "readable"
    data_dir.mkdir(mode=0o700)
    subprocess.run([sys.executable, "-c", "import sys, pathlib; from p2p.wire.identity import "
                    "Identity; Identity.load_or_create(pathlib.Path(sys.argv[1]))",
                    str(data_dir)], check=True)
    (data_dir / "identity.key").chmod(0o644)
    return _run_node(data_dir)


def _swarm_key(work: Path, *, owner: int | None, mode: int) -> tuple[int, str]:
    key = work / f"swarm-{mode:o}-{owner}.key"
    code, _ = _p2p("keygen", "--out", str(key))
    assert code == 0
    key.chmod(mode)
    if owner is not None:
        os.chown(key, owner, -1)
    return _run_node(work / f"node-{mode:o}-{owner}", "--swarm-key-file", str(key))


def _fake_admin_socket(work: Path) -> tuple[int, str]:
    """Another user's directory with a socket that says "stopping" to anything."""
    data_dir = work / "fake"
    data_dir.mkdir(mode=0o777)
    data_dir.chmod(0o777)
    os.chown(data_dir, NOBODY, NOBODY)
    server = subprocess.Popen([_system_python(), "-c", _FAKE_ADMIN,
                               str(data_dir / "admin.sock")], user=NOBODY,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline() == "ready\n"
        return _p2p("stop", "--data-dir", str(data_dir))
    finally:
        server.kill()
        server.wait()


def _admin_client_of_another_user(work: Path) -> tuple[int, str]:
    """``nobody`` connects to a node's admin socket that was opened up (mode 0666)."""
    data_dir = work / "node-admin"
    data_dir.mkdir(mode=0o711)
    data_dir.chmod(0o711)
    node = subprocess.Popen([sys.executable, "-m", "p2p", "run", "--config", str(CONFIG),
                             "--data-dir", str(data_dir), "--listen", "127.0.0.1:0",
                             "--bootstrap", ""], stderr=subprocess.PIPE, text=True)
    path = data_dir / "admin.sock"
    try:
        for _ in range(600):  # the node starts in seconds; give up after 60 s
            if path.exists():
                break
            if node.poll() is not None:
                return node.returncode, "the node did not start"
            subprocess.run(["sleep", "0.1"], check=True)
        path.chmod(0o666)
        out = subprocess.run([_system_python(), "-c", _CLIENT, str(path)], user=NOBODY,
                             capture_output=True, text=True, timeout=30).stdout
        reply = json.loads(out)
        return (0 if reply.get("ok") else 1), out
    finally:
        node.terminate()
        node.wait(timeout=60)


CASES: dict[str, Callable[[Path], tuple[int, str]]] = {
    "planted data dir (nobody's, 0777, with identity.key)": _planted_data_dir,
    "world-writable data dir (0777)": _world_writable_data_dir,
    "identity.key readable by others (0644)": _readable_identity_key,
    "swarm key readable by others (0644)": lambda w: _swarm_key(w, owner=None, mode=0o644),
    "swarm key owned by nobody (0600)": lambda w: _swarm_key(w, owner=NOBODY, mode=0o600),
    "fake admin.sock in nobody's dir: p2p stop": _fake_admin_socket,
    "admin socket opened to all, client runs as nobody": _admin_client_of_another_user,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run only the cases whose name contains this")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("run as root: the attacker is played by uid 65534 (nobody)", file=sys.stderr)
        return 2
    if not hasattr(socket, "SO_PEERCRED"):
        print("note: no SO_PEERCRED here; the admin socket relies on its file mode only")
    work = Path(tempfile.mkdtemp(prefix="p2p-attack-local-", dir="/tmp"))
    work.chmod(0o711)  # nobody may pass through, not list or write
    try:
        for name, case in CASES.items():
            if args.only and args.only not in name:
                continue
            code, line = case(work)
            print(f"{name}: exit {code}: {line}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
