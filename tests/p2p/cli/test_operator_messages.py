"""Messages an operator reads in a node's log and tables (issue 14, items 6 and 9).

A real node over TCP bootstraps from things that are not healthy peers (an
HTTP server, a closed port, a silent port, a node of a private swarm) and
each failed shuffle must say why, once, from this node's point of view.
"""

from __future__ import annotations

import functools
import logging
import re
from pathlib import Path

import pytest
import trio

from p2p.cli.render import render_result, render_status, to_text
from p2p.testing import MemoryNetwork, wait_until
from p2p.testing.nodes import fast_spec, memory_swarm, running, tcp_node
from p2p.wire import codec
from p2p.wire.identity import Identity
from p2p.wire.messages import Ping
from p2p.wire.transport import PeerUnreachable, Transport

KEY = b"k" * 32


async def _http_server(stream: trio.SocketStream) -> None:
    # answers anything at once, as an HTTP server answers a request it cannot parse
    await stream.send_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    await trio.sleep(5)


async def _serve(nursery: trio.Nursery, handler: object) -> str:
    listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0,
                                                      host="127.0.0.1"))
    return f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"


async def _silent(stream: trio.SocketStream) -> None:
    await trio.sleep(60)  # accepts, never answers


async def test_failed_shuffles_say_why_from_this_nodes_side(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, nursery: trio.Nursery
) -> None:
    http = await _serve(nursery, _http_server)
    silent = await _serve(nursery, _silent)
    with trio.socket.socket() as s:  # a port nothing listens on
        await s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    keyed = Transport(Identity.generate(), "127.0.0.1", 0, swarm_key=KEY)
    private = await nursery.start(keyed.serve, _echo)
    node = tcp_node(tmp_path / "n", fast_spec(rounds=1, shuffle_period=0.5),
                    bootstrap=[http, closed, silent, private])
    expected = {
        http: f"shuffle with {http} failed: unreachable: handshake failed: the peer does not "
              "speak this protocol: its first bytes look like an HTTP response (is this the "
              "address of a p2p node?)",
        closed: f"shuffle with {closed} failed: unreachable: connect failed: connection "
                "refused (nothing listens on that port)",
        silent: f"shuffle with {silent} failed: no reply within "
                f"{node.shuffle_timeout:g} s",  # a shuffle gets a period, at least 1 s
        # a keyed node tells a non-member nothing: this node names the likely causes
        private: f"shuffle with {private} failed: unreachable: handshake failed: connection "
                 "closed by peer before answering the first handshake message: the peer "
                 "closed the handshake: a different swarm key, no swarm key where one is "
                 "needed, or another protocol version (this node speaks wire protocol "
                 f"version {codec.PROTOCOL_VERSION}; a node with a swarm key does not tell "
                 "a non-member why; this node has no swarm key: to join a private swarm, pass "
                 "its --swarm-key-file; or it had no room for this connection)",
    }
    with caplog.at_level(logging.INFO, logger="peersampling.driver"):
        await nursery.start(node.run)

        def said() -> set[str]:
            return {r.getMessage() for r in caplog.records if r.name == "peersampling.driver"}

        await wait_until(lambda: set(expected.values()) <= said(), 60)
    for line in said():
        if line.startswith("shuffle with"):
            assert not line.endswith("failed: "), line  # never an empty reason
            assert not re.search(r"peer (\S+) peer \1", line), line  # the address once
    node.request_stop()
    await keyed.aclose()


async def _echo(peer: object, msg: object) -> object:
    return msg


async def test_keyed_node_is_told_the_peer_has_no_key() -> None:
    keyless = Transport(Identity.generate(), "127.0.0.1", 0)
    keyed = Transport(Identity.generate(), "127.0.0.1", 0, swarm_key=KEY)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(keyless.serve, _echo)
        with pytest.raises(PeerUnreachable) as info:
            await keyed.request(address, Ping(1))
        assert info.value.reason == (
            "handshake failed: peer refused the handshake: swarm key mismatch: the peer has no "
            "swarm key and this node uses one (start the peer with the same --swarm-key-file)")
        await keyless.aclose()
        await keyed.aclose()


async def test_each_evaluation_logs_one_progress_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    nodes = memory_swarm(tmp_path, MemoryNetwork(), fast_spec(rounds=4, eval_every=2))
    with caplog.at_level(logging.INFO, logger="p2p.runtime.node"):
        async with running(nodes):
            await wait_until(lambda: all(n.progress.finished for n in nodes), 60)
    progress = [r.getMessage() for r in caplog.records
                if r.name == "p2p.runtime.node" and r.getMessage().startswith("round ")]
    pattern = (r"round (\d+): train loss [0-9.e+-]+, test accuracy \d+\.\d%"
               r" \(test loss [0-9.e+-]+\), \d+ peers in view, pushes \d+ sent / \d+ received")
    assert progress and all(re.fullmatch(pattern, line) for line in progress), progress
    rounds = sorted({int(re.match(pattern, line)[1]) for line in progress})  # type: ignore[index]
    assert rounds[:2] == [2, 4]


def test_tables_label_train_and_test_loss_and_explain_weight() -> None:
    status = to_text(render_status({"round": 3, "loss": 0.25, "accuracy": 0.9}))
    assert "train loss" in status and "0.25" in status and "test accuracy" in status
    models = to_text(render_result("models", {"models": [
        {"name": "global", "kind": "global", "size": 10, "fingerprint": "ab12", "weight": 1.3,
         "holders": 2, "pushes_sent": 5, "pushes_received": 4, "pushes_rejected": 0,
         "bytes_sent": 10, "bytes_received": 10}]}), width=200)
    assert "weight: the node's push-sum weight for the model" in " ".join(models.split())


def test_narrow_tables_keep_names_whole_where_they_fit() -> None:
    result = {"counters": {"a_rather_long_counter_name.with_a_suffix": 12345678}, "timings": {}}
    for width in (60, 80, 120):
        text = to_text(render_result("metrics", result, width), width=width)
        assert "a_rather_long_counter_name.with_a_suffix" in text, text
        assert "12,345,678" in text
