"""The public testing kit (:mod:`p2p.testing`) and the rules it serves.

The in-memory network is tested where it has logic of its own: delivery,
fault knobs, closing. Structural checks: the kit does not need pytest,
importing :mod:`p2p` does not load it, and no script or test reaches into
``tests/`` or edits the import path.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
import trio.testing

from p2p.testing import (
    MemoryNetwork,
    MemoryTransport,
    Tap,
    run_in_virtual_time,
    virtual_clock,
    wait_until,
)
from p2p.wire import codec
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.messages import Ping, Pong
from p2p.wire.transport import PeerUnreachable

ROOT = Path(__file__).resolve().parents[3]
SOURCE_DIRS = ("p2p", "learner", "gossip", "peersampling", "scripts", "tests")


# --------------------------------------------------------------------------- structure


def _imports_and_path_edits(path: Path) -> tuple[set[str], list[int]]:
    """Top-level modules ``path`` imports, and the lines touching ``sys.path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    path_lines: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
            if node.module == "sys" and any(a.name == "path" for a in node.names):
                path_lines.append(node.lineno)
        elif (isinstance(node, ast.Attribute) and node.attr == "path"
              and isinstance(node.value, ast.Name) and node.value.id == "sys"):
            path_lines.append(node.lineno)
    return roots, path_lines


def test_no_source_file_imports_tests_or_edits_sys_path() -> None:
    offences = []
    for directory in SOURCE_DIRS:
        for path in sorted((ROOT / directory).rglob("*.py")):
            roots, path_lines = _imports_and_path_edits(path)
            where = path.relative_to(ROOT)
            if "tests" in roots:
                offences.append(f"{where} imports from tests/")
            offences += [f"{where}:{line} touches sys.path" for line in path_lines]
    assert not offences, "; ".join(offences)


def test_kit_never_imports_pytest() -> None:
    offences = [str(path.relative_to(ROOT))
                for path in sorted((ROOT / "p2p" / "testing").rglob("*.py"))
                if {"pytest", "tests"} & _imports_and_path_edits(path)[0]]
    assert not offences, f"the testing kit must work without pytest: {offences}"


def test_path_check_sees_every_form(tmp_path: Path) -> None:
    sample = tmp_path / "s.py"
    sample.write_text("import sys\nfrom sys import path\nsys.path.insert(0, '.')\n"
                      "from tests.x import y\n")
    roots, lines = _imports_and_path_edits(sample)
    assert "tests" in roots and lines == [2, 3]


def test_kit_imports_without_pytest_and_p2p_does_not_load_it() -> None:
    """In a fresh interpreter where pytest cannot be imported; every public name resolves."""
    probe = (
        "import sys\n"
        "sys.modules['pytest'] = None  # any import of pytest now fails\n"
        "import p2p\n"
        "assert 'p2p.testing' not in sys.modules, 'import p2p loaded p2p.testing'\n"
        "import p2p.testing\n"
        "assert 'p2p.runtime.node' not in sys.modules, 'the light part loaded the node'\n"
        "missing = [n for n in p2p.testing.__all__ if getattr(p2p.testing, n, None) is None]\n"
        "assert not missing, missing\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=ROOT / "scripts", timeout=300)
    assert proc.returncode == 0, proc.stderr


# --------------------------------------------------------------------------- memory network


@dataclass(frozen=True)
class KitNote:
    text: str


codec.register(KitNote, "test_kit_note")


class Inbox:
    """A request handler that records what it got and echoes it upper-cased."""

    def __init__(self) -> None:
        self.received: list[tuple[bytes, str]] = []

    async def __call__(self, peer: PeerInfo, msg: object) -> object | None:
        if isinstance(msg, KitNote):
            self.received.append((peer.node_id, msg.text))
            return KitNote(msg.text.upper())
        return None


async def _serve(nursery: trio.Nursery, net: MemoryNetwork, address: str,
                 inbox: Inbox | None = None, **options: float) -> MemoryTransport:
    transport = net.transport(Identity.generate(), address, **options)  # type: ignore[arg-type]
    started = await nursery.start(transport.serve, inbox or Inbox())
    assert started == address
    return transport


async def test_requests_are_delivered_through_the_real_stack(nursery: trio.Nursery) -> None:
    net = MemoryNetwork()
    inbox = Inbox()
    server = await _serve(nursery, net, "10.0.0.1:7000", inbox)
    client = net.transport(Identity.generate(), "10.0.0.2:7000")
    assert await client.request(server.listen_address, KitNote("hi")) == KitNote("HI")
    assert await client.request(server.listen_address, Ping(3)) == Pong(3)
    assert inbox.received == [(client.identity.node_id, "hi")]  # authenticated sender
    assert net.connections == 1  # pooled, as over TCP
    await client.aclose()


async def test_unknown_and_unreachable_addresses_are_refused(nursery: trio.Nursery) -> None:
    net = MemoryNetwork()
    server = await _serve(nursery, net, "10.0.0.1:7000")
    client = net.transport(Identity.generate(), "10.0.0.2:7000")
    with pytest.raises(PeerUnreachable, match="refused"):
        await client.request("10.0.0.9:7000", Ping(1))
    net.unreachable.add(server.listen_address)
    with pytest.raises(PeerUnreachable, match="refused"):
        await client.request(server.listen_address, Ping(1))
    net.unreachable.clear()
    assert await client.request(server.listen_address, Ping(2)) == Pong(2)


async def test_connection_loss_refuses_every_attempt_at_one(nursery: trio.Nursery) -> None:
    net = MemoryNetwork(loss=1.0)
    server = await _serve(nursery, net, "10.0.0.1:7000")
    client = net.transport(Identity.generate(), "10.0.0.2:7000")
    with pytest.raises(PeerUnreachable):
        await client.request(server.listen_address, Ping(1))
    assert net.connections == 0
    net.loss = 0.0
    assert await client.request(server.listen_address, Ping(2)) == Pong(2)


async def test_a_lost_write_darkens_the_connection(
        nursery: trio.Nursery, autojump_clock: trio.testing.MockClock) -> None:
    net = MemoryNetwork(message_loss=1.0)
    server = await _serve(nursery, net, "10.0.0.1:7000")
    client = net.transport(Identity.generate(), "10.0.0.2:7000", connect_timeout=2.0,
                           read_timeout=2.0)
    with pytest.raises(PeerUnreachable, match="timed out"):
        await client.request(server.listen_address, Ping(1))
    assert net.messages_dropped >= 1
    # faults can stop mid-run: new connections are clean again
    net.message_loss = 0.0
    assert await client.request(server.listen_address, Ping(2)) == Pong(2)


async def test_delay_holds_each_write_within_the_bound(
        nursery: trio.Nursery, autojump_clock: trio.testing.MockClock) -> None:
    net = MemoryNetwork(max_delay=0.5, seed=1)
    server = await _serve(nursery, net, "10.0.0.1:7000")
    client = net.transport(Identity.generate(), "10.0.0.2:7000", connect_timeout=30.0,
                           read_timeout=30.0)
    start = trio.current_time()
    assert await client.request(server.listen_address, Ping(1)) == Pong(1)
    elapsed = trio.current_time() - start
    # handshake (3 messages) + request + reply, each write delayed at most 0.5 virtual s
    assert 0.0 < elapsed <= 5 * 2 * 0.5
    assert net.messages_dropped == 0


async def test_closing_a_transport_unregisters_its_address(nursery: trio.Nursery) -> None:
    net = MemoryNetwork()
    server = await _serve(nursery, net, "10.0.0.1:7000")
    client = net.transport(Identity.generate(), "10.0.0.2:7000")
    assert await client.request(server.listen_address, Ping(1)) == Pong(1)
    await server.aclose()
    await wait_until(lambda: server.listen_address not in net.servers, 10)
    await client.aclose()  # drop the pooled connection, which the server's end closed
    other = net.transport(Identity.generate(), "10.0.0.3:7000")
    with pytest.raises(PeerUnreachable, match="refused"):
        await other.request(server.listen_address, Ping(2))
    with pytest.raises(RuntimeError, match="closed"):
        await server.serve(Inbox())


async def test_an_address_serves_one_transport_at_a_time(nursery: trio.Nursery) -> None:
    net = MemoryNetwork()
    await _serve(nursery, net, "10.0.0.1:7000")
    with pytest.raises(OSError, match="already in use"):
        await net.transport(Identity.generate(), "10.0.0.1:7000").serve(Inbox())


def test_bad_knobs_and_addresses_are_named() -> None:
    with pytest.raises(ValueError, match="loss"):
        MemoryNetwork(loss=1.5)
    with pytest.raises(ValueError, match="message_loss"):
        MemoryNetwork(message_loss=-0.1)
    with pytest.raises(ValueError, match="max_delay"):
        MemoryNetwork(max_delay=-1.0)
    with pytest.raises(ValueError, match="'nowhere'"):
        MemoryNetwork().transport(Identity.generate(), "nowhere")


async def test_tap_records_both_directions() -> None:
    log = bytearray()
    left, right = trio.testing.memory_stream_pair()
    tapped = Tap(left, log)
    await tapped.send_all(b"ping")
    assert await right.receive_some(4) == b"ping"
    await right.send_all(b"pong")
    assert await tapped.receive_some(4) == b"pong"
    assert bytes(log) == b"pingpong"
    await tapped.aclose()


# --------------------------------------------------------------------------- clock, waiting, nodes


async def test_wait_until_returns_once_true_and_names_what_never_held(
        autojump_clock: trio.testing.MockClock) -> None:
    ticks: list[int] = []

    async def tick() -> None:
        for i in range(5):
            await trio.sleep(1.0)
            ticks.append(i)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(tick)
        await wait_until(lambda: len(ticks) >= 3, 10)
    with pytest.raises(trio.TooSlowError, match="the sky is green"):
        await wait_until(lambda: False, 5, what="the sky is green")


def test_virtual_time_costs_no_wall_time() -> None:
    async def nap() -> float:
        await trio.sleep(3600)
        return trio.current_time()

    assert run_in_virtual_time(nap) == pytest.approx(3600)
    frozen = virtual_clock(autojump=False)
    assert frozen.autojump_threshold == float("inf")


def test_memory_swarm_builds_connected_nodes(tmp_path: Path) -> None:
    # imported here: the builders load the node runtime, the rest of this file does not
    from p2p.testing import fast_spec, memory_addresses, memory_swarm

    spec = fast_spec(nodes=2)
    nodes = memory_swarm(tmp_path, MemoryNetwork(), spec, push_timeout=0.7)
    addresses = memory_addresses(2)
    assert [n.transport.listen_address for n in nodes] == addresses
    for node in nodes:
        assert node.transport.tags == frozenset(node.by_fingerprint)  # advertised models
        assert node.config.gossip.push_timeout == 0.7
    assert [str(b) for b in nodes[1].config.node.bootstrap] == addresses[:1]
    assert list(nodes[0].config.node.bootstrap) == []
    with pytest.raises(ValueError, match="3 nodes need as many addresses"):
        memory_swarm(tmp_path / "x", MemoryNetwork(), fast_spec(nodes=3), addresses=addresses)
