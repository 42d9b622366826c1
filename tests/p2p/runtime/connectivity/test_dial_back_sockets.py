"""Observe and dial-backs over real loopback sockets: what a peer sees, and a dial-back
that reaches the requester, one that cannot, and one the gate refuses; names that do
not resolve, reported once."""

from __future__ import annotations

import logging
import socket

import pytest
import trio

from common.address import HostPort, parse_host_port
from p2p.runtime.connectivity import NodeConnectivity
from p2p.runtime.connectivity.dialback import DialBackReply, DialBackRequest
from p2p.runtime.protocol import register_node_messages
from p2p.wire.dispatch import RequestDispatcher
from p2p.wire.identity import Identity
from p2p.wire.messages import Observe, Observed
from p2p.wire.transport import Transport


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_observe_and_dial_back_over_loopback() -> None:
    register_node_messages()
    asker = Transport(Identity.generate(), "127.0.0.1", 0, connect_timeout=5.0)
    helper = Transport(Identity.generate(), "127.0.0.1", 0, connect_timeout=5.0)
    service = NodeConnectivity(helper, advertise=None, bootstrap=[])
    requests = RequestDispatcher()
    requests.add(DialBackRequest, service.serve_dial_back)
    async with trio.open_nursery() as nursery:
        mine = await nursery.start(asker.serve, RequestDispatcher())
        theirs = await nursery.start(helper.serve, requests)
        seen = await asker.request(theirs, Observe())
        assert isinstance(seen, Observed)
        assert parse_host_port(seen.address).host == "127.0.0.1"

        port = parse_host_port(mine).port
        back = await asker.request(theirs, DialBackRequest(port))
        assert back == DialBackReply(f"127.0.0.1:{port}", True, "")

        service.gate.interval = 0.0  # the next one at once, to a port nobody listens on
        dead = free_port()
        back = await asker.request(theirs, DialBackRequest(dead))
        assert isinstance(back, DialBackReply) and not back.ok and not back.refused
        assert back.address == f"127.0.0.1:{dead}" and "connect failed" in back.reason

        service.gate.interval = 30.0
        back = await asker.request(theirs, DialBackRequest(port))
        assert isinstance(back, DialBackReply) and back.refused and "per 30 s" in back.reason
        assert service.gate.running == 0
        nursery.cancel_scope.cancel()
    await asker.aclose()
    await helper.aclose()


async def test_names_that_do_not_resolve_are_reported_once_and_checked_again(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    resolvable = {"bootstrap.example.org": False, "me.example.org": False}

    async def getaddrinfo(host: str, *args: object, **kwargs: object) -> list[object]:
        if not resolvable.get(host, True):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return []

    monkeypatch.setattr(trio.socket, "getaddrinfo", getaddrinfo)
    t = Transport(Identity.generate(), "127.0.0.1", 0)
    connectivity = NodeConnectivity(t, advertise=HostPort("me.example.org", 7661),
                                    bootstrap=[HostPort("bootstrap.example.org", 7661)])
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(t.serve, lambda peer, msg: None)
        connectivity.start(bound)
        assert connectivity.core is not None
        with caplog.at_level(logging.WARNING):
            for _ in range(3):  # the probe loop checks names each time round
                await connectivity._check_names(connectivity.core)
        state = connectivity.status()
        assert state.reachable == "unknown"
        assert "node.advertise host 'me.example.org' does not resolve" in state.reason
        assert "bootstrap host 'bootstrap.example.org' does not resolve" in state.reason
        lines = [r for r in caplog.records if "does not resolve" in r.getMessage()]
        assert len(lines) == 1  # once, not every round
        resolvable.update({"bootstrap.example.org": True, "me.example.org": True})
        await connectivity._check_names(connectivity.core)
        assert "does not resolve" not in connectivity.status().reason
        nursery.cancel_scope.cancel()
    await t.aclose()
