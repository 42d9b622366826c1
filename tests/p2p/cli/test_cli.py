"""The p2p command line: help, keygen, run wiring, client verbs, exit codes."""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import socket
import stat
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import trio

from p2p.cli.main import JsonLogFormatter, main, setup_logging
from p2p.config import HostPort, NodeConfig, load_config, load_swarm_key
from p2p.runtime.admin_server import admin_socket_path, serve_admin
from p2p.runtime.grouping.status import GroupsStatus

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse --help / usage errors
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("p2p: error: ")
    return lines[0]


# --------------------------------------------------------------------------- help


def test_run_help_documents_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "run", "--help")
    assert code == 0
    for option in ("--config", "--data-dir", "--listen", "--bootstrap", "--swarm-key-file",
                   "--log-format", "--log-level"):
        assert option in out
    assert "overrides node.listen" in out


def test_top_level_help_lists_the_verbs(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--help")
    assert code == 0
    for verb in ("run", "status", "peers", "models", "metrics", "stop", "keygen"):
        assert verb in out


def test_python_dash_m_works() -> None:
    proc = subprocess.run([sys.executable, "-m", "p2p", "keygen"], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert len(base64.b64decode(proc.stdout.strip(), validate=True)) == 32


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(capsys, "frobnicate")[0] == 2
    assert _run(capsys, "run")[0] == 2  # --config is required
    assert _run(capsys, "status", "--data-dir", "a", "--socket", "b")[0] == 2


# --------------------------------------------------------------------------- keygen


def test_keygen_stdout_is_fresh_base64(capsys: pytest.CaptureFixture[str]) -> None:
    code, first, _ = _run(capsys, "keygen")
    _, second, _ = _run(capsys, "keygen")
    assert code == 0
    assert len(base64.b64decode(first.strip(), validate=True)) == 32
    assert first != second


def test_keygen_file_is_private_and_not_overwritten(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "swarm.key"
    code, _, err = _run(capsys, "keygen", "--out", str(out))
    assert code == 0 and "mode 0600" in err
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    key = load_swarm_key(out)
    code, _, err = _run(capsys, "keygen", "--out", str(out))
    assert code == 1 and "--force" in _one_error_line(err)
    assert load_swarm_key(out) == key
    code, _, _ = _run(capsys, "keygen", "--out", str(out), "--force")
    assert code == 0
    assert load_swarm_key(out) != key
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["swarm.key"]


def test_keygen_into_missing_directory_fails_cleanly(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "keygen", "--out", str(tmp_path / "no" / "k"))
    assert code == 1 and "cannot write" in _one_error_line(err)


# --------------------------------------------------------------------------- run


@pytest.fixture
def fake_node(monkeypatch: pytest.MonkeyPatch) -> list[NodeConfig]:
    """Replace p2p.runtime.node with a stub that records the config it is given."""
    seen: list[NodeConfig] = []
    module = types.ModuleType("p2p.runtime.node")

    def run_node(config: NodeConfig, *, fresh: bool = False) -> int:
        seen.append(config)
        logging.getLogger("p2p.runtime.node").info("started", extra={"round": 3})
        return 0

    module.run_node = run_node  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "p2p.runtime.node", module)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield seen
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_run_applies_overrides_and_starts_the_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_node: list[NodeConfig]
) -> None:
    key = tmp_path / "swarm.key"
    assert _run(capsys, "keygen", "--out", str(key))[0] == 0
    data = tmp_path / "state"
    port = _free_port()  # `run` checks that it can listen before starting the node
    code, _, err = _run(capsys, "run", "--config", str(EXAMPLES / "partial.toml"),
                        "--data-dir", str(data), "--listen", f"127.0.0.1:{port}",
                        "--bootstrap", "10.0.0.1:1,10.0.0.2:2", "--swarm-key-file", str(key),
                        "--log-format", "json", "--log-level", "INFO")
    assert code == 0, err
    (config,) = fake_node
    assert config.node.listen == HostPort("127.0.0.1", port)
    assert config.node.bootstrap == (HostPort("10.0.0.1", 1), HostPort("10.0.0.2", 2))
    assert config.node.data_dir == data and data.is_dir()
    assert config.security.swarm_key_file == key
    assert config.models == load_config(EXAMPLES / "partial.toml").models
    record = json.loads(err.strip().splitlines()[-1])
    assert record["message"] == "started" and record["round"] == 3
    assert record["level"] == "info" and record["logger"] == "p2p.runtime.node"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--config", "/nonexistent/n.toml", "--data-dir", "d"], "does not exist"),
        (["--config", "{bad}", "--data-dir", "d"], "training.lr"),
        (["--config", "{good}"], "--data-dir"),
        (["--config", "{good}", "--data-dir", "d", "--listen", "nope"], "--listen"),
        (["--config", "{good}", "--data-dir", "{file}/sub"], "data directory"),
        (["--config", "{good}", "--data-dir", "d", "--swarm-key-file", "{file}"], "base64"),
    ],
)
def test_run_errors_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_node: list[NodeConfig],
    monkeypatch: pytest.MonkeyPatch, args: list[str], fragment: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_text("[training]\nlr = 0\n")
    plain = tmp_path / "plain"
    plain.write_text("not a key")
    plain.chmod(0o600)  # a private file: the content is what is wrong
    names = {"bad": str(bad), "good": str(EXAMPLES / "local.toml"), "file": str(plain)}
    code, _, err = _run(capsys, "run", *[a.format(**names) for a in args])
    assert code == 2
    assert fragment in _one_error_line(err)
    assert fake_node == []


def test_unexpected_node_crash_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    fake_node: list[NodeConfig],
) -> None:
    def boom(config: NodeConfig, *, fresh: bool = False) -> int:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(sys.modules["p2p.runtime.node"], "run_node", boom)
    code, _, err = _run(capsys, "run", "--config", str(EXAMPLES / "local.toml"),
                        "--data-dir", str(tmp_path / "d"))
    assert code == 1
    assert "RuntimeError: kaboom" in _one_error_line(err)


# --------------------------------------------------------------------------- client verbs


def test_query_without_daemon_fails_cleanly(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = _run(capsys, "status", "--data-dir", str(tmp_path))
    assert code == 1 and "is the node running" in _one_error_line(err)
    monkeypatch.delenv("P2P_DATA_DIR", raising=False)
    code, _, err = _run(capsys, "peers")
    assert code == 2 and "--data-dir" in _one_error_line(err)
    code, _, err = _run(capsys, "stop", "--socket", str(tmp_path / "x.sock"))
    assert code == 1


class _Handler:
    def __init__(self) -> None:
        self.stopped = False

    def status(self) -> dict[str, Any]:
        return {"id": "ab" * 32, "name": "cli-test", "round": 7, "isolated": True}

    def peers(self) -> dict[str, Any]:
        return {"view": [{"id": "cd" * 32, "address": "h:1", "age": 1}], "models": {}}

    def models(self) -> dict[str, Any]:
        return {"models": [{"name": "global", "kind": "global", "size": 10}]}

    def metrics(self) -> dict[str, Any]:
        return {"counters": {"x": 1}, "timings": {}}

    def checkpoint(self) -> dict[str, Any]:
        return {"path": "/c", "bytes": 10, "round": 7, "seconds": 0.1}

    def stop(self) -> dict[str, Any]:
        self.stopped = True
        return {"stopping": True}

    def groups(self) -> GroupsStatus:
        return GroupsStatus.off()


async def test_client_verbs_against_a_live_socket(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    handler = _Handler()
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_admin, admin_socket_path(tmp_path), handler)

        async def cli(*argv: str) -> tuple[int, str, str]:
            code = await trio.to_thread.run_sync(main, list(argv))
            out, err = capsys.readouterr()
            return code, out, err

        code, out, _ = await cli("status", "--data-dir", str(tmp_path))
        assert code == 0 and "cli-test" in out and "no peer reachable" in out
        code, out, _ = await cli("status", "--socket", str(admin_socket_path(tmp_path)),
                                 "--json")
        assert code == 0 and json.loads(out)["round"] == 7
        for verb, expected in (("peers", "h:1"), ("models", "global"), ("metrics", "x"),
                               ("checkpoint", "checkpoint written")):
            code, out, _ = await cli(verb, "--data-dir", str(tmp_path))
            assert code == 0 and expected in out, verb
        code, out, _ = await cli("stop", "--data-dir", str(tmp_path))
        assert code == 0 and "stopping" in out and handler.stopped
        nursery.cancel_scope.cancel()


def test_config_verb_prints_a_reloadable_config(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "config", "--config", str(EXAMPLES / "semi-local.toml"))
    assert code == 0
    path = tmp_path / "resolved.toml"
    path.write_text(out)
    assert load_config(path) == load_config(EXAMPLES / "semi-local.toml")


def test_setup_logging_text_and_json() -> None:
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    try:
        text = io.StringIO()
        setup_logging("text", "warning", stream=text)
        logging.getLogger("p2p.x").info("hidden")
        logging.getLogger("p2p.x").warning("shown %d", 5)
        assert "hidden" not in text.getvalue() and "WARNING p2p.x: shown 5" in text.getvalue()
        stream = io.StringIO()
        setup_logging("json", "debug", stream=stream)
        try:
            raise ValueError("bad")
        except ValueError:
            logging.getLogger("p2p.y").exception("failed", extra={"peer": "h:1"})
        entry = json.loads(stream.getvalue())
        assert entry["message"] == "failed" and entry["peer"] == "h:1"
        assert "ValueError: bad" in entry["exc"] and entry["time"].endswith("Z")
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved:
            root.addHandler(h)
        root.setLevel(level)


def test_json_formatter_handles_odd_extra_values() -> None:
    record = logging.LogRecord("n", logging.INFO, "f", 1, "m %s", ("x",), None)
    record.blob = b"\x00"  # not JSON-serialisable as such
    assert json.loads(JsonLogFormatter().format(record))["blob"] == "b'\\x00'"


def test_env_var_selects_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("P2P_DATA_DIR", str(tmp_path))
    code, _, err = _run(capsys, "models")
    assert code == 1 and str(tmp_path) in err
    assert os.environ["P2P_DATA_DIR"] == str(tmp_path)
