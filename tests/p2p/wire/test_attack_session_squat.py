"""Session squatting: a few sources cannot keep every other source out.

Two holes combined: any non-ping message counted as work (a junk Pong,
answered with bad_request, kept a session from ever looking silent), and a
full session table refused every newcomer while its sessions were active
(two sources at sessions_per_source, half the table each, held all of it).
Now only requests a handler answered without an error are work, and a full
table makes room by fair shares, as the handshake slots already did.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import trio
import trio.testing

from p2p.testing import wait_until
from p2p.wire import codec
from p2p.wire.admission import Admission, AdmissionLimits
from p2p.wire.codec import Message
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.messages import Error, Ping, Pong
from p2p.wire.transport import ConnectionFailure, MessageStream, Rejected, Transport


@dataclass(frozen=True)
class _Work:
    """A request the test handler serves (or refuses, when ``refuse``)."""

    refuse: bool


codec.register(_Work, "test_squat_work")


def test_two_busy_sources_cannot_lock_every_other_source_out_of_the_session_table() -> None:
    limits = AdmissionLimits.for_connections(64)  # the daemon's default
    adm = Admission(limits)
    conn = 0
    for source in ("198.51.100.1", "198.51.100.2"):
        for _ in range(limits.sessions_per_source):
            conn += 1
            assert adm.open_handshake(conn, source, 0.0).admitted
            assert adm.finish_handshake(conn, Identity.generate().node_id, 0.0).admitted
    for now in range(10, 1000, 10):  # the squatters do "work" every 10 s: never silent
        for c in range(1, conn + 1):
            adm.request(c, 1000.0 if c == 5 else float(now))  # 5: the most recently active
    honest = conn + 1
    assert adm.open_handshake(honest, "203.0.113.7", 1000.0).admitted
    decision = adm.finish_handshake(honest, Identity.generate().node_id, 1000.0)
    assert decision.admitted, (
        f"an honest peer from a third source is refused: {decision.reason} "
        f"(2 sources hold all {limits.max_sessions} slots)")
    # one session of a source holding the most gave way: its least recently active
    assert decision.close == (1,) and "holds the most" in decision.why_close
    # a squatter's own source gains nothing: within one of the largest, no room
    assert adm.open_handshake(honest + 1, "198.51.100.1", 1000.0).admitted
    again = adm.finish_handshake(honest + 1, Identity.generate().node_id, 1000.0)
    assert not again.admitted and "taken by active sessions" in again.reason


class _Handler:
    served = 0

    async def __call__(self, peer: PeerInfo, msg: Message) -> Message:
        self.served += 1
        if isinstance(msg, _Work) and msg.refuse:
            raise Rejected("rejected", "not now")
        return Pong(0)


async def _session(node: Transport, nursery: trio.Nursery, handler: _Handler,
                   remote: str) -> MessageStream:
    """An authenticated session to ``node`` that ``node`` sees coming from ``remote``."""
    client_end, server_end = trio.testing.memory_stream_pair()
    nursery.start_soon(node.serve_stream, server_end, handler, remote)
    me = Transport(Identity.generate(), "127.0.0.1", 0)
    ms = MessageStream(client_end, write_timeout=5.0)
    await me._handshake(ms, initiator=True, expected_node_id=None)
    return ms


@pytest.mark.trio
async def test_junk_and_refused_requests_do_not_keep_a_session_from_looking_silent(
        autojump_clock: trio.testing.MockClock) -> None:
    node = Transport(Identity.generate(), "127.0.0.1", 0, max_connections=16, idle_timeout=60)
    handler = _Handler()
    idle_limit = node.admission.limits.idle_limit  # 120 s: no slot pressure here
    async with trio.open_nursery() as nursery:
        sessions = [(await _session(node, nursery, handler, f"198.51.100.{i}:4000"), msg)
                    for i, msg in enumerate((Pong(0), _Work(True), _Work(False)))]
        await wait_until(lambda: node.admission.sessions == 3)
        for _ in range(int(idle_limit / 10) + 1):
            await trio.sleep(10)
            for ms, msg in sessions:  # junk, a refused request, a served one
                await ms.send(msg)
                reply = await ms.receive(5, 5)
                assert isinstance(reply, Error) == (msg != _Work(False))
        # the junk and the refused sessions are silent; the working one is not
        assert len(node.admission.expired(trio.current_time())) == 2
        assert node.admission.sessions == 1
        nursery.cancel_scope.cancel()


@pytest.mark.trio
async def test_junk_pongs_do_not_keep_squatted_sessions_alive_and_honest_peers_out(
        autojump_clock: trio.testing.MockClock) -> None:
    node = Transport(Identity.generate(), "127.0.0.1", 0, max_connections=16, idle_timeout=60)
    per_source = node.admission.limits.sessions_per_source  # 8 of 16
    handler = _Handler()
    async with trio.open_nursery() as nursery:
        squats = [await _session(node, nursery, handler, f"198.51.100.{s}:{4000 + i}")
                  for s in (1, 2) for i in range(per_source)]
        await wait_until(lambda: node.admission.sessions == node.admission.limits.max_sessions)
        for _ in range(30):  # 300 s: far past the 15 s silence and the 120 s idle limit
            await trio.sleep(10)
            for ms in squats:
                await ms.send(Pong(0))  # not a request: refused, never reaches a handler
                reply = await ms.receive(5, 5)
                assert isinstance(reply, Error) and reply.code == "bad_request"
        assert handler.served == 0  # the squatters did no work at all
        honest = await _session(node, nursery, handler, "203.0.113.7:5000")
        try:
            await honest.send(Ping(7))
            answer: object = await honest.receive(5, 5)
        except ConnectionFailure as exc:
            answer = exc.reason
        assert answer == Pong(7), (
            f"honest peer refused after 300 s of junk keep-alives: {answer!r} "
            f"(refusals so far: {node.admission.refused})")
        nursery.cancel_scope.cancel()
