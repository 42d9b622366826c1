"""Requests are routed by their exact type to the handler a subsystem registered."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import trio
import trio.testing

from p2p.wire import codec
from p2p.wire.dispatch import RequestDispatcher
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.messages import ERROR_BAD_REQUEST, Error, Ping, Pong
from p2p.wire.transport import Transport

PEER = PeerInfo(node_id=b"p" * 32, listen_address="10.0.0.1:1", tags=frozenset())


@dataclass(frozen=True)
class Ask:
    n: int


@dataclass(frozen=True)
class Answer:
    n: int


@dataclass(frozen=True)
class Other:
    n: int


codec.register_messages([(Ask, "test_dispatch_ask"), (Answer, "test_dispatch_answer"),
                         (Other, "test_dispatch_other")])


async def _double(peer: PeerInfo, msg: Ask) -> Answer:
    return Answer(msg.n * 2)


async def test_routes_by_type_and_refuses_the_rest() -> None:
    dispatcher = RequestDispatcher()
    dispatcher.add(Ask, _double)
    assert dispatcher.request_types == frozenset({Ask})
    assert await dispatcher(PEER, Ask(4)) == Answer(8)
    reply = await dispatcher(PEER, Other(1))
    assert reply == Error(ERROR_BAD_REQUEST, "Other is not a request")


async def test_unknown_requests_go_to_on_unknown() -> None:
    seen: list[object] = []

    async def on_unknown(peer: PeerInfo, msg: object) -> Error:
        seen.append(msg)
        return Error("custom", type(msg).__name__)

    dispatcher = RequestDispatcher(on_unknown=on_unknown)
    dispatcher.add(Ask, _double)
    assert await dispatcher(PEER, Answer(1)) == Error("custom", "Answer")
    assert seen == [Answer(1)]


def test_add_names_what_is_wrong() -> None:
    @dataclass(frozen=True)
    class Unregistered:
        n: int

    dispatcher = RequestDispatcher()
    dispatcher.add(Ask, _double)
    with pytest.raises(ValueError, match="Ask already has a handler"):
        dispatcher.add(Ask, _double)
    with pytest.raises(ValueError, match="Unregistered is not a registered wire message"):
        dispatcher.add(Unregistered, _double)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Ping is answered by the transport"):
        dispatcher.add(Ping, _double)  # type: ignore[arg-type]


async def test_transport_answers_ping_before_the_dispatcher() -> None:
    seen: list[object] = []

    async def on_unknown(peer: PeerInfo, msg: object) -> Error:
        seen.append(msg)
        return Error(ERROR_BAD_REQUEST, "no")

    dispatcher = RequestDispatcher(on_unknown=on_unknown)
    dispatcher.add(Ask, _double)
    server = Transport(Identity.generate(), "127.0.0.1", 0)

    async with trio.open_nursery() as nursery:

        async def connect(address: str) -> trio.abc.Stream:
            client_end, server_end = trio.testing.memory_stream_pair()
            nursery.start_soon(server.serve_stream, server_end, dispatcher, "mem-client")
            return client_end

        client = Transport(Identity.generate(), "127.0.0.1", 0, connector=connect)
        assert await client.request("mem:1", Ping(7)) == Pong(7)
        assert await client.request("mem:1", Ask(3)) == Answer(6)
        assert seen == []  # the ping never reached the node's handlers
        await client.aclose()
        nursery.cancel_scope.cancel()
