"""The README's tutorial, run as a newcomer would run it.

Every ```sh block of the README's tutorial section runs in order, with bash
``-e``, in a copy of the working tree (the files git tracks plus the untracked
ones it does not ignore), so that the files the tutorial writes (``wine.npz``)
never land in the real tree. The copy uses the environment this test runs in:
its ``bin`` directory comes first on ``PATH`` (as ``. .venv/bin/activate``
would put it), ``PYTHONPATH`` names the copy so that its packages are the ones
imported, and ``.venv`` in the copy is a symlink to that environment, so that
``make swarm`` finds it built. Only the environment set-up lines (``make
venv``, ``. .venv/bin/activate``) are left out. Every fixed port becomes a
free one and every ``/tmp`` path a path under ``tmp_path``.

Each block may take up to :data:`BLOCK_TIMEOUT` seconds: a limit that only a
hang reaches. Whatever happens, every daemon a block left running is stopped
(``p2p stop --wait`` on every data directory under ``tmp_path``, then the
blocks' process groups are killed).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TUTORIAL_HEADING = "## A five-minute tutorial"
BLOCK_TIMEOUT = 300.0
# lines that set up the environment, which this test provides itself
SETUP_LINES = ("make venv", ". .venv/bin/activate", "source .venv/bin/activate")
# what `make` rebuilds the environment from (the Makefile's $(STAMP) rule)
STAMP_PREREQUISITES = ("pyproject.toml", "scripts/pyproject.toml")
PORT = re.compile(r"\b(127\.0\.0\.1|localhost):(\d{2,5})\b")
TMP_PATH = re.compile(r"(?<![\w./-])/tmp/")


def tutorial_blocks(text: str) -> list[str]:
    """The ```sh blocks of the tutorial section, in order, set-up lines removed."""
    start = text.index(TUTORIAL_HEADING)
    end = text.find("\n## ", start + len(TUTORIAL_HEADING))
    section = text[start:] if end == -1 else text[start:end]
    blocks = []
    for body in re.findall(r"^```sh\n(.*?)^```", section, flags=re.M | re.S):
        lines = [line for line in body.splitlines()
                 if line.split("#", 1)[0].strip() not in SETUP_LINES]
        if any(line.strip() for line in lines):
            blocks.append("\n".join(lines) + "\n")
    return blocks


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def localize(blocks: list[str], work: Path) -> list[str]:
    """Every fixed port replaced by a free one (the same port by the same free one
    across blocks) and every /tmp path moved under ``work``."""
    ports: dict[str, int] = {}
    chosen: set[int] = set()

    def new_port(match: re.Match[str]) -> str:
        host, port = match.group(1), match.group(2)
        if port == "0":
            return match.group(0)
        if port not in ports:
            port_number = free_port()
            while port_number in chosen:
                port_number = free_port()
            chosen.add(port_number)
            ports[port] = port_number
        return f"{host}:{ports[port]}"

    return [TMP_PATH.sub(f"{work}/", PORT.sub(new_port, block)) for block in blocks]


def copy_tree(dest: Path) -> None:
    """The files git lists (tracked, and untracked but not ignored) copied into
    ``dest`` with their modification times."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True).stdout.decode()
    for name in sorted(set(filter(None, listed.split("\0")))):
        src = ROOT / name
        if not (src.is_file() or src.is_symlink()):
            continue  # removed from the working tree but still in the index
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)


def use_built_environment(copy: Path, venv: Path) -> None:
    """Point the copy's ``.venv`` at the built environment, and keep ``make`` from
    rebuilding it: that would install the copy into the shared environment."""
    (copy / ".venv").symlink_to(venv, target_is_directory=True)
    stamp = venv / ".installed"
    if not stamp.exists():
        return
    built = stamp.stat().st_mtime
    for name in STAMP_PREREQUISITES:
        path = copy / name
        if path.exists() and path.stat().st_mtime >= built:
            os.utime(path, (built - 1, built - 1))


def environment(copy: Path, venv_bin: Path, work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "VIRTUAL_ENV", "PYTHONHOME"}}
    tmp = work / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env.update(
        PATH=f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        VIRTUAL_ENV=str(venv_bin.parent),
        PYTHONPATH=f"{copy}{os.pathsep}{copy / 'scripts'}",
        TMPDIR=str(tmp),
        COLUMNS="120",
        PYTHONUNBUFFERED="1",
    )
    return env


def data_dirs(work: Path) -> Iterator[Path]:
    """Every node data directory under ``work`` (it holds the node's lock)."""
    for lock in work.rglob("node.lock"):
        yield lock.parent


def stop_everything(work: Path, env: dict[str, str], groups: list[int]) -> None:
    for data_dir in data_dirs(work):
        if (data_dir / "admin.sock").exists():
            subprocess.run(["p2p", "stop", "--data-dir", str(data_dir), "--wait",
                            "--wait-timeout", "30"], env=env, capture_output=True,
                           timeout=60, check=False)
    for group in groups:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(group, sig)
            except (ProcessLookupError, PermissionError):
                break
            time.sleep(0.2)


def log_tails(work: Path, lines: int = 15) -> str:
    out = []
    for log in sorted(work.rglob("*.log")):
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        out.append(f"--- {log} (last {len(tail)} lines)\n" + "\n".join(tail))
    return "\n".join(out)


def test_tutorial_blocks_are_found() -> None:
    """The section exists and holds the commands the tutorial is about."""
    blocks = tutorial_blocks(README.read_text())
    text = "\n".join(blocks)
    assert blocks, f"no ```sh block under {TUTORIAL_HEADING!r} in README.md"
    assert "p2p run" in text and "p2p stop" in text and "make swarm" in text
    assert all(setup not in line.strip() for line in text.splitlines()
               for setup in ("make venv", ".venv/bin/activate"))


def test_localize_replaces_fixed_ports_and_tmp_paths(tmp_path: Path) -> None:
    blocks = ["p2p run --data-dir /tmp/w/n0 --listen 127.0.0.1:7500 > /tmp/w/n0.log &\n",
              "p2p run --bootstrap 127.0.0.1:7500 --listen 127.0.0.1:0\n"]
    first, second = localize(blocks, tmp_path)
    assert "/tmp/w" not in first and f"{tmp_path}/w/n0" in first
    port = re.search(r"127\.0\.0\.1:(\d+)", first)
    assert port is not None and port.group(1) != "7500"
    assert f"--bootstrap 127.0.0.1:{port.group(1)}" in second
    assert "--listen 127.0.0.1:0" in second


@pytest.mark.e2e
def test_readme_tutorial_runs(tmp_path: Path) -> None:
    venv_bin = Path(sys.executable).parent
    if not (venv_bin / "p2p").exists():
        pytest.skip(f"no `p2p` next to {sys.executable}: run the suite from the built .venv")
    copy = tmp_path / "clone"
    copy.mkdir()
    # short: the swarm's admin sockets lie under it, and a Unix socket path has at most
    # 107 bytes (pytest-xdist's basetemp adds popen-gwN/ to tmp_path)
    work = Path(tempfile.mkdtemp(prefix="readme-", dir="/tmp"))
    copy_tree(copy)
    blocks = localize(tutorial_blocks((copy / "README.md").read_text()), work)
    env = environment(copy, venv_bin, work)
    if any(re.search(r"^\s*make\b", block, flags=re.M) for block in blocks):
        use_built_environment(copy, venv_bin.parent)
        fresh = subprocess.run(["make", "-q", ".venv/.installed"], cwd=copy, env=env,
                               capture_output=True, check=False)
        if fresh.returncode != 0:
            pytest.fail("the built environment is older than pyproject.toml: run `make venv` "
                        "first (this test never rebuilds it)")
    groups: list[int] = []
    try:
        for number, block in enumerate(blocks, 1):
            output = work / f"block{number}.out"
            with output.open("wb") as out:
                process = subprocess.Popen(["bash", "-e", "-c", block], cwd=copy, env=env,
                                           stdin=subprocess.DEVNULL, stdout=out,
                                           stderr=subprocess.STDOUT, start_new_session=True)
                groups.append(process.pid)
                try:
                    status = process.wait(timeout=BLOCK_TIMEOUT)
                except subprocess.TimeoutExpired:
                    status = None
            text = output.read_text(errors="replace")
            if status != 0:
                why = (f"did not finish within {BLOCK_TIMEOUT:.0f} s" if status is None
                       else f"exited with status {status}")
                pytest.fail(f"README tutorial block {number} {why}:\n{block}\n"
                            f"--- its output:\n{text[-6000:]}\n{log_tails(work)}",
                            pytrace=False)
    finally:
        stop_everything(work, env, groups)
        shutil.rmtree(work, ignore_errors=True)
