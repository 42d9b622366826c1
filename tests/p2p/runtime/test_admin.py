"""Admin socket: real Unix socket, fake handler, client and table rendering."""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path
from typing import Any

import pytest
import trio

from p2p.cli.admin_client import (
    AdminClient,
    AdminCommandError,
    AdminConnectionError,
)
from p2p.cli.render import (
    fmt_bytes,
    fmt_duration,
    render_checkpoint,
    render_metrics,
    render_models,
    render_peers,
    render_status,
    render_stop,
    to_text,
)
from p2p.runtime.admin_server import (
    ADMIN_COMMANDS,
    AdminError,
    AdminHandler,
    AdminServer,
    CheckpointReport,
    MetricsReport,
    ModelReport,
    ModelsReport,
    PeerReport,
    PeersReport,
    StatusReport,
    StopReport,
    TimingReport,
    admin_socket_path,
    serve_admin,
    to_jsonable,
)
from p2p.runtime.collaboration import CollaborationStatus, assess
from p2p.runtime.grouping.status import GroupsStatus

NODE_ID = "9f" * 32


class FakeHandler:
    """Answers like a small node would; counts calls; can be told to fail."""

    def __init__(self) -> None:
        self.stopped = False
        self.fail_metrics = False
        self.peers_calls = 0

    def status(self) -> StatusReport:
        return StatusReport(
            id=NODE_ID, name="node-7", addresses=["127.0.0.1:7407"], uptime=3725.0,
            round=42, steps=420, loss=0.3141, accuracy=0.9275, isolated=False,
            view_size=2, connections=3, data_dir="/var/lib/p2p/n7",
        )

    def peers(self) -> PeersReport:
        self.peers_calls += 1
        a = PeerReport(id="a1" * 32, address="127.0.0.1:7401", age=2, last_contact=1.5,
                       failures=0, models=["global", "perm-8-9"])
        b = PeerReport(id="b2" * 32, address="127.0.0.1:7402", age=5, last_contact=None,
                       failures=2, models=["global"])
        return PeersReport(view=[b, a], models={"global": [a, b], "perm-8-9": [a]})

    def models(self) -> dict[str, Any]:  # a plain dict works as well as a report
        return {"models": [
            {"name": "global", "kind": "global", "size": 5046, "fingerprint": "c0ffee" * 10,
             "weight": 0.8125, "holders": 2, "pushes_sent": 40, "pushes_received": 38,
             "pushes_rejected": 1, "bytes_sent": 1_620_000, "bytes_received": 1_540_000},
            {"name": "local", "kind": "local", "size": 298},
        ]}

    def metrics(self) -> MetricsReport:
        if self.fail_metrics:
            raise RuntimeError("metrics exploded")
        return MetricsReport(
            counters={"pushes_sent": 40, "frames_in": 1234, "test_loss": 0.25},
            timings={"train_round": TimingReport(count=42, mean=0.0123, max=0.05, total=0.52)},
        )

    async def checkpoint(self) -> CheckpointReport:
        await trio.sleep(0)
        return CheckpointReport(path="/var/lib/p2p/n7/checkpoint.pt", bytes=48213, round=42,
                                seconds=0.004)

    def stop(self) -> StopReport:
        self.stopped = True
        return StopReport()

    def groups(self) -> GroupsStatus:
        return GroupsStatus.off()


EXPECTED_FIELDS = {
    "status": {"id", "name", "addresses", "uptime", "round", "steps", "loss", "accuracy",
               "isolated", "view_size", "connections", "pid", "data_dir"},
    "peers": {"view", "models"},
    "models": {"models"},
    "metrics": {"counters", "timings"},
    "checkpoint": {"path", "bytes", "round", "seconds"},
    "stop": {"stopping"},
    # FakeHandler has no groups method: the server answers that grouping is off
    "groups": {"phase", "epoch", "records", "fingerprint", "groups", "own"},
}


async def _request(path: Path, cmd: str) -> dict[str, Any]:
    # generous: a hang guard, not a speed requirement (the machine may be loaded)
    return await trio.to_thread.run_sync(lambda: AdminClient(path, timeout=60).request(cmd))


async def _raw(path: Path, payload: bytes, *, replies: int = 1) -> list[dict[str, Any]]:
    """Send raw bytes, read ``replies`` reply lines."""
    stream = await trio.open_unix_socket(os.fspath(path))
    async with stream:
        await stream.send_all(payload)
        buffer = b""
        with trio.fail_after(60):
            while buffer.count(b"\n") < replies:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                buffer += chunk
    return [json.loads(line) for line in buffer.splitlines() if line.strip()]


@pytest.fixture
def handler() -> FakeHandler:
    return FakeHandler()


@pytest.fixture
async def server(tmp_path: Path, handler: FakeHandler, nursery: trio.Nursery) -> Path:
    path = admin_socket_path(tmp_path)
    await nursery.start(serve_admin, path, handler)
    return path


def test_fake_handler_satisfies_protocol(handler: FakeHandler) -> None:
    assert isinstance(handler, AdminHandler)


async def test_every_command_returns_its_fields(server: Path, handler: FakeHandler) -> None:
    for cmd in ADMIN_COMMANDS:
        result = await _request(server, cmd)
        assert EXPECTED_FIELDS[cmd] <= set(result), cmd
    status = await _request(server, "status")
    assert status["id"] == NODE_ID and status["round"] == 42 and status["isolated"] is False
    peers = await _request(server, "peers")
    assert [p["address"] for p in peers["models"]["global"]] == ["127.0.0.1:7401",
                                                                 "127.0.0.1:7402"]
    assert {"id", "address", "age", "last_contact", "failures", "models"} <= set(peers["view"][0])
    models = await _request(server, "models")
    assert models["models"][0]["pushes_rejected"] == 1
    metrics = await _request(server, "metrics")
    assert metrics["timings"]["train_round"]["count"] == 42
    assert handler.stopped  # the stop command reached the handler


async def test_socket_is_private(server: Path) -> None:
    mode = os.stat(server).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600


async def test_bare_word_and_several_requests_per_line_batch(server: Path) -> None:
    replies = await _raw(server, b'status\n\n{"cmd": "models"}\n', replies=2)
    assert [r["ok"] for r in replies] == [True, True]
    assert replies[0]["result"]["name"] == "node-7"
    assert "models" in replies[1]["result"]


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b"{not json\n", "expected one JSON object per line"),
        (b"[1, 2]\n", '"cmd"'),
        (b'{"command": "status"}\n', '"cmd"'),
        (b'{"cmd": 5}\n', '"cmd"'),
        (b"\xff\xfe\n", "not UTF-8"),
        (b'{"cmd": "reboot"}\n', "unknown command 'reboot'; known commands: status, peers"),
        (b"[" * 100_000 + b"\n", "too long"),
    ],
)
async def test_malformed_requests_get_error_replies(server: Path, payload: bytes,
                                                    fragment: str) -> None:
    (reply,) = await _raw(server, payload)
    assert reply["ok"] is False
    assert fragment in reply["error"]
    # ... and the server keeps serving
    assert (await _request(server, "status"))["round"] == 42


async def test_deeply_nested_json_is_an_error_not_a_crash(server: Path) -> None:
    (reply,) = await _raw(server, b"[" * 20_000 + b"]" * 20_000 + b"\n")
    assert reply["ok"] is False


async def test_handler_exception_is_reported(server: Path, handler: FakeHandler) -> None:
    handler.fail_metrics = True
    with pytest.raises(AdminCommandError, match="metrics exploded"):
        await _request(server, "metrics")
    handler.fail_metrics = False
    assert "counters" in await _request(server, "metrics")


async def test_last_request_without_newline_is_answered(server: Path) -> None:
    def send_and_shutdown() -> bytes:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(60)
            s.connect(os.fspath(server))
            s.sendall(b'{"cmd": "status"}')
            s.shutdown(socket.SHUT_WR)
            return s.recv(65536)

    reply = json.loads(await trio.to_thread.run_sync(send_and_shutdown))
    assert reply["ok"] is True


async def test_disconnecting_clients_do_not_affect_the_server(server: Path,
                                                              handler: FakeHandler) -> None:
    def rude_clients() -> None:
        for payload in (b"", b'{"cmd": "sta', b'{"cmd": "peers"}\n'):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(os.fspath(server))
            if payload:
                s.sendall(payload)
            s.close()  # gone before (or while) the reply is written

    await trio.to_thread.run_sync(rude_clients)
    # the last rude client's request reached the handler: the server has seen them all
    with trio.fail_after(60):
        while handler.peers_calls < 1:
            await trio.sleep(0.01)
    assert (await _request(server, "status"))["name"] == "node-7"


async def test_several_requests_share_one_connection(server: Path) -> None:
    client = AdminClient(server, timeout=60)
    status, models, metrics = await trio.to_thread.run_sync(
        client.request_many, ["status", "models", "metrics"])
    assert status["round"] == 42 and "models" in models and "counters" in metrics
    with pytest.raises(AdminCommandError, match="unknown command"):
        await trio.to_thread.run_sync(client.request_many, ["status", "nope"])


async def test_too_many_clients_are_refused_politely(tmp_path: Path,
                                                     handler: FakeHandler) -> None:
    path = admin_socket_path(tmp_path)
    async with trio.open_nursery() as nursery:
        server = AdminServer(path, handler, max_clients=1)
        await nursery.start(server.serve)
        idle = await trio.open_unix_socket(os.fspath(path))  # holds the only slot
        with trio.fail_after(60):
            while server.clients < 1:
                await trio.sleep(0.01)
        with pytest.raises(AdminCommandError, match="too many admin clients"):
            await _request(path, "status")
        with pytest.raises(AdminCommandError, match="too many admin clients"):  # not "closed"
            await trio.to_thread.run_sync(AdminClient(path, timeout=60).request_many,
                                          ["status", "models", "peers"])
        await idle.aclose()
        with trio.fail_after(60):
            while server.clients > 0:
                await trio.sleep(0.01)
        assert (await _request(path, "status"))["round"] == 42
        nursery.cancel_scope.cancel()


async def test_socket_file_removed_on_shutdown_and_stale_socket_replaced(
    tmp_path: Path, handler: FakeHandler
) -> None:
    path = admin_socket_path(tmp_path)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(os.fspath(path))  # a socket file nobody listens on, as after a crash
    stale.close()
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_admin, path, handler)
        assert (await _request(path, "status"))["round"] == 42
        # a second node on the same data directory is refused
        with pytest.raises(AdminError, match="already running"):
            await AdminServer(path, handler).serve()
        nursery.cancel_scope.cancel()
    assert not path.exists()


async def test_non_socket_file_is_not_replaced(tmp_path: Path, handler: FakeHandler) -> None:
    path = admin_socket_path(tmp_path)
    path.write_text("precious")
    with pytest.raises(AdminError, match="not a socket"):
        await AdminServer(path, handler).serve()
    assert path.read_text() == "precious"


async def test_too_long_socket_path_is_a_clear_error(tmp_path: Path,
                                                     handler: FakeHandler) -> None:
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    with pytest.raises(AdminError, match="shorter data directory"):
        await AdminServer(admin_socket_path(deep), handler).serve()


def test_client_errors_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(AdminConnectionError, match="is the node running"):
        AdminClient.for_data_dir(tmp_path).request("status")
    path = admin_socket_path(tmp_path)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(os.fspath(path))
    stale.close()
    with pytest.raises(AdminConnectionError, match="not running"):
        AdminClient(path).request("status")


def test_to_jsonable_handles_node_values() -> None:
    import numpy as np

    value = {"b": b"\x01\xff", "p": Path("/x"), "n": np.float64(1.5), "a": np.arange(3),
             "nan": float("nan"), "t": (1, 2), "r": StopReport()}
    assert to_jsonable(value) == {"b": "01ff", "p": "/x", "n": 1.5, "a": [0, 1, 2],
                                  "nan": None, "t": [1, 2], "r": {"stopping": True}}


# --------------------------------------------------------------------------- rendering


def _as_json(report: object) -> dict[str, Any]:
    return json.loads(json.dumps(to_jsonable(report)))


def test_status_table_is_readable(handler: FakeHandler) -> None:
    text = to_text(render_status(_as_json(handler.status())))
    for expected in ("node id", NODE_ID, "1h 02m 05s", "420", "0.3141", "92.8%",
                     "127.0.0.1:7407", "isolated", "no"):
        assert expected in text, expected
    isolated = to_text(render_status({"isolated": True, "extra_field": 3}))
    assert "yes (no peer reachable)" in isolated and "extra field" in isolated


def test_peer_tables_are_readable(handler: FakeHandler) -> None:
    text = to_text(render_peers(_as_json(handler.peers())), width=120)
    assert "view (2 peers)" in text and "model 'perm-8-9' (1 holders)" in text
    lines = [line for line in text.splitlines() if "127.0.0.1:740" in line]
    assert "1.5s ago" in lines[0] and "never" in lines[1]  # sorted by age
    assert "a1a1a1a1a1…" in text


def test_models_table_is_readable(handler: FakeHandler) -> None:
    text = to_text(render_models(handler.models()), width=140)
    assert "global" in text and "5,046" in text and "0.8125" in text
    assert "1.5 MiB" in text and "c0ffeec0ff…" in text
    local_line = next(line for line in text.splitlines() if line.strip().startswith("│ local"))
    assert "298" in local_line and "-" in local_line


def test_metrics_and_small_renderers(handler: FakeHandler) -> None:
    text = to_text(render_metrics(_as_json(handler.metrics())))
    assert "frames_in" in text and "1,234" in text and "12.3 ms" in text and "520.0 ms" in text
    line = to_text(render_checkpoint(_as_json(CheckpointReport("/d/c.pt", 48213, 42, 2.5))))
    assert line.strip() == "checkpoint written: /d/c.pt (47.1 KiB, round 42, 2.50 s)"
    assert "stopping" in to_text(render_stop({"stopping": True}))


@pytest.mark.parametrize("renderer", [render_status, render_peers, render_models,
                                      render_metrics, render_checkpoint, render_stop])
def test_renderers_survive_missing_and_odd_fields(renderer: Any) -> None:
    for result in ({}, {"view": "oops", "models": 3, "counters": None, "timings": [1]},
                   {"view": [{"id": None}], "models": [{"name": 1, "size": "big"}]}):
        assert isinstance(to_text(renderer(result)), str)


def test_formatters() -> None:
    assert fmt_duration(59.94) == "59.9s"
    assert fmt_duration(61) == "1m 01s"
    assert fmt_duration(90061) == "1d 01h 01m"
    assert fmt_duration(None) == "-" and fmt_duration(float("inf")) == "-"
    assert fmt_bytes(1023) == "1023 B" and fmt_bytes(1536) == "1.5 KiB"


def test_model_report_serialises_to_the_documented_fields(handler: FakeHandler) -> None:
    report = ModelsReport(models=[ModelReport(name="local", kind="local", size=298)])
    as_dict = _as_json(report)
    assert set(as_dict["models"][0]) == set(handler.models()["models"][0])
    assert as_dict["models"][0]["weight"] is None


class _Source:
    """An :class:`AdminSource` that is not a node: what NodeAdmin reads, and nothing else."""

    def __init__(self, tmp_path: Path) -> None:
        import random
        from types import SimpleNamespace

        from p2p.runtime.timing import TimingStats
        from peersampling import Descriptor, PeerSampler

        me = Descriptor(b"\x9f" * 32, "10.0.0.1:7400", 0, frozenset())
        self.identity = SimpleNamespace(node_id=me.node_id)
        self.config = SimpleNamespace(node=SimpleNamespace(name="fake"),
                                      training=SimpleNamespace(rounds=0))
        self.resumed_at = None
        self.checkpoint_note = None
        self.started = 0.0
        self.data_dir = tmp_path
        self.progress = SimpleNamespace(round=3, steps=30, loss=0.5, accuracy=0.75,
                                        test_loss=None, metrics={"accuracy": 0.75})
        self.transport = SimpleNamespace(listen_address=me.address, open_connections=2)
        self.sampler = PeerSampler(me, rng=random.Random(1))
        self.sampler.restore([Descriptor(b"\x01" * 32, "10.0.0.2:7400", 1, frozenset())])
        self.learning = None  # only the models command reads the layout
        self.by_fingerprint: dict[bytes, str] = {}
        self.cores: dict[str, object] = {}
        self.peer_failures = {b"\x01" * 32: 4}
        self.counters = {"rejected_messages": 1}
        self.timings = {"push": TimingStats()}
        self.store = SimpleNamespace(path=tmp_path / "checkpoint.pt")
        self.stop_requested = False

    def model_counters(self, name: str) -> dict[str, int]:
        return {}

    def flat_model_counters(self) -> dict[str, int]:
        return {"global.pushes_sent": 7}

    def collaboration(self) -> CollaborationStatus:
        return assess({}, [], isolated=False)

    def privacy_spent(self) -> None:
        return None  # no DP-SGD

    def masking_status(self) -> None:
        return None  # no masking epochs

    def groups_status(self) -> Any:
        from p2p.runtime.grouping.status import GroupsStatus

        return GroupsStatus.off()  # no automatic grouping

    def strategy_status(self) -> dict[str, Any]:
        return {"name": "partial"}  # the default strategy reports only its name

    def reachability(self) -> Any:
        from p2p.runtime.connectivity import ReachabilityStatus

        return ReachabilityStatus("no", "2 peers could not dial back", "10.0.0.1:7400", ())

    def relay_status(self) -> dict[str, Any]:
        return {"serving": False, "reserved_with": [
            {"relay": "203.0.113.1:7661", "state": "active", "reason": "", "circuits": 2}]}
    def training_note(self) -> None:
        return None  # neither waiting for peers nor stopped

    async def save_checkpoint(self) -> int:
        return 123

    def request_stop(self) -> None:
        self.stop_requested = True


async def test_node_admin_needs_only_its_narrow_source(tmp_path: Path) -> None:
    from p2p.runtime.admin_commands import NodeAdmin

    source = _Source(tmp_path)
    admin = NodeAdmin(source)  # type: ignore[arg-type]
    status = admin.status()
    assert (status.id, status.name, status.round, status.view_size, status.connections) == (
        "9f" * 32, "fake", 3, 1, 2)
    assert status.strategy == {"name": "partial"}
    (peer,) = admin.peers().view
    assert (peer.address, peer.failures) == ("10.0.0.2:7400", 4)
    assert status.metrics == {"accuracy": 0.75}
    counters = admin.metrics().counters
    assert counters["rejected_messages"] == 1 and counters["global.pushes_sent"] == 7
    assert counters["task.accuracy"] == 0.75  # the test set's metrics, for the endpoint
    assert counters["round"] == 3 and "test_loss" not in counters
    assert counters["relay.reservations_active"] == 1
    assert status.relay is not None and status.relay["reserved_with"][0]["state"] == "active"
    report = await admin.checkpoint()
    assert (report.bytes, report.round) == (123, 3)
    assert admin.stop().stopping and source.stop_requested
