"""The [limits] section reaches a running node and each limit holds.

- ``max_frame_size``: a member's frame one byte over is refused from its header
  (connection closed, one line), a push under it is merged.
- ``max_connections``: see also tests/test_hostile_node.py (flood); here the
  configured value is what the live transport enforces.
- ``max_messages_per_second``: a per-connection token bucket, checked on a live
  node under a frozen mock clock (no timing assertions): a burst gets exactly
  the bucket's capacity of replies until virtual time moves.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from gossip import PushAck
from p2p.config import LimitsConfig, parse_config_text, render_config_toml
from p2p.runtime.node import Node
from p2p.swarm import node_config
from p2p.testing import ask, fast_spec, open_session, tcp_node, valid_push, wait_until
from p2p.wire import codec
from p2p.wire.messages import Ping, Pong
from p2p.wire.transport import ConnectionFailure, parse_address


def test_limits_from_toml_reach_the_transport(tmp_path: Path) -> None:
    text = render_config_toml(node_config(fast_spec(), 0, tmp_path / "n", None))
    head, _, tail = text.partition("[limits]")
    body, sep, rest = tail.partition("\n[")
    limits = ("\nmax_connections = 7\nmax_frame_size = 65536\n"
              "max_messages_per_second = 3.5\nconnect_timeout = 1.5\nread_timeout = 2.5\n")
    config = parse_config_text(head + "[limits]" + limits + sep + rest)
    assert config.limits == LimitsConfig(7, 65536, 3.5, 1.5, 2.5)
    t = Node(config.with_overrides(listen="127.0.0.1:0")).transport
    assert (t.max_connections, t.max_frame_size, t.max_messages_per_second,
            t.connect_timeout, t.read_timeout) == (7, 65536, 3.5, 1.5, 2.5)


async def test_max_frame_size_on_a_live_node(tmp_path: Path, nursery: trio.Nursery,
                                             caplog: pytest.LogCaptureFixture) -> None:
    limit = 64 * 1024
    node = tcp_node(tmp_path / "n", fast_spec(), limits=LimitsConfig(max_frame_size=limit))
    address = await nursery.start(node.run)
    core = node.cores["global"]
    assert core.values.nbytes < limit  # a whole push fits
    ms, _ = await open_session(address)
    assert isinstance(await ask(ms, codec.encode(valid_push(core.fingerprint, core.values.size,
                                                            near=core.estimate))), PushAck)
    with caplog.at_level(logging.WARNING, logger="p2p"):
        await ms.stream.send_all(struct.pack(">I", limit + 1) + b"\0" * 100)
        with pytest.raises(ConnectionFailure):
            await ms.receive_payload(5, 5)
        # only the wire's lines: other subsystems may warn meanwhile (a lone node
        # says it collaborates with nobody), which is not what this test is about
        await wait_until(lambda: _wire_lines(caplog))
    lines = _wire_lines(caplog)
    assert len(lines) == 1 and f"exceeds the maximum frame size of {limit}" in lines[0], lines
    node.request_stop()


def _wire_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name.startswith("p2p.wire") and r.levelno >= logging.WARNING]


async def test_max_connections_on_a_live_node(tmp_path: Path, nursery: trio.Nursery) -> None:
    node = tcp_node(tmp_path / "n", fast_spec(), limits=LimitsConfig(max_connections=3))
    address = await nursery.start(node.run)
    sessions = [(await open_session(address))[0] for _ in range(3)]
    for ms in sessions:
        assert isinstance(await ask(ms, codec.encode(Ping(1))), Pong)
    extra = await trio.open_tcp_stream(*parse_address(address))
    with trio.fail_after(60):  # a hang guard; the node closes it at once
        assert await extra.receive_some(10) == b""  # closed at once: over the limit
    await extra.aclose()
    await sessions[0].aclose()
    await wait_until(lambda: node.transport.open_connections == 2)
    ms, _ = await open_session(address)  # a slot is free again
    assert isinstance(await ask(ms, codec.encode(Ping(2))), Pong)
    node.request_stop()


async def _real_sleep(seconds: float) -> None:
    await trio.to_thread.run_sync(time.sleep, seconds)


async def _really_wait_until(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll ``predicate`` in real time while the mock clock stands still.

    Real sockets deliver at the machine's pace: wait for what must happen
    instead of sleeping a fixed time (the virtual clock only moves on jump()).
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition still false after {timeout:g} s of real time")
        await _real_sleep(0.01)


async def test_per_peer_message_rate_on_a_live_node(
        tmp_path: Path, nursery: trio.Nursery, mock_clock: trio.testing.MockClock) -> None:
    rate = 2.0  # bucket capacity max(1, rate) = 2
    node = tcp_node(tmp_path / "n", fast_spec(),
                    limits=LimitsConfig(max_messages_per_second=rate))
    address = await nursery.start(node.run)
    ms, _ = await open_session(address)
    other, _ = await open_session(address)
    replies: list[object] = []

    async def read_replies() -> None:
        while True:
            replies.append(codec.decode(await ms.receive_payload(1e9, 1e9)))

    nursery.start_soon(read_replies)
    for i in range(8):  # a flood, pipelined
        await ms.send_payload(codec.encode(Ping(i)))
    await _really_wait_until(lambda: len(replies) >= 2)
    assert len(replies) == 2  # the burst; the rest waits for (virtual) time
    # another connection is not slowed down by the flooding one
    assert isinstance(await ask(other, codec.encode(Ping(99))), Pong)
    mock_clock.jump(1.0 / rate)
    await _really_wait_until(lambda: len(replies) >= 3)
    assert len(replies) == 3
    mock_clock.jump(10.0)
    deadline = time.monotonic() + 60.0
    while len(replies) < 8 and time.monotonic() < deadline:
        mock_clock.jump(1.0)
        await _real_sleep(0.02)
    assert [r.nonce for r in replies] == list(range(8))  # type: ignore[attr-defined]
    nursery.cancel_scope.cancel()
