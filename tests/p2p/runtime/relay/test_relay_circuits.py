"""Circuits through a relay, in memory: a node nobody can dial is reached through the
relay it reserved with; the relay reaches no one else, cannot read what it forwards
(a recording relay) nor alter it (a bit-flipping relay: the frame is refused and the
session is re-established)."""

from __future__ import annotations

import logging

import pytest
import trio
from relay_kit import RELAY, Echo, relay_lab

from p2p.runtime.relay.service import RelayService
from p2p.testing import Tap
from p2p.wire.identity import Identity
from p2p.wire.transport import PeerUnreachable

KEY = bytes(range(32))
# A push's stand-in: bytes no frame of the session carries in clear.
SECRET = b"model values of node A: " + bytes(range(256)) * 16


async def test_a_node_nobody_can_dial_is_reached_through_its_relay(
        autojump_clock: trio.abc.Clock) -> None:
    async with relay_lab() as lab:
        with pytest.raises(PeerUnreachable):  # its own address: behind a NAT
            await lab.peer.request(lab.behind.listen_address, Echo(b"direct"))
        reply = await lab.peer.request(lab.circuit, Echo(b"hello"),
                                       node_id=lab.behind.identity.node_id)
        assert reply == Echo(b"hello") and lab.received == [b"hello"]
        assert lab.peer.path_to(lab.circuit) == "relayed"
        again = await lab.peer.request(lab.circuit, Echo(b"again"))  # the pooled circuit
        assert again == Echo(b"again")
        status = lab.service.status()
        assert status["circuits"] == 1 and status["circuits_opened"] == 1
        assert status["bytes_relayed"] > 2 * len(b"again")
        assert lab.reservations.status()[0]["circuits"] == 1


async def test_the_relay_itself_reaches_a_node_that_reserved_with_it(
        autojump_clock: trio.abc.Clock) -> None:
    async with relay_lab() as lab:  # its own shuffle to a node behind: a local circuit
        reply = await lab.relay.request(lab.circuit, Echo(b"from the relay"),
                                        node_id=lab.behind.identity.node_id)
        assert reply == Echo(b"from the relay") and lab.received == [b"from the relay"]
        assert lab.relay.path_to(lab.circuit) == "relayed"
        assert lab.service.status()["circuits"] == 1
        assert lab.dialled and all(address == RELAY for address in lab.dialled)


async def test_the_relay_reaches_no_node_that_did_not_reserve_it(
        autojump_clock: trio.abc.Clock) -> None:
    async with relay_lab() as lab:
        stranger = lab.net.transport(Identity.generate(), "10.3.0.10:7661")
        async with trio.open_nursery() as nursery:
            await nursery.start(stranger.serve, lambda peer, msg: None)
            address = f"{RELAY}/circuit/{stranger.identity.node_id.hex()}"
            with pytest.raises(PeerUnreachable, match="no reservation"):
                await lab.peer.request(address, Echo(b"x"))
            nursery.cancel_scope.cancel()
        # nobody connected to the stranger, nor to the node behind the NAT: the
        # relay only ever answered connections made to it
        assert lab.dialled and all(address == RELAY for address in lab.dialled)
        assert lab.service.status()["circuits_refused"] == 1


class RecordingRelay(RelayService):
    """Keeps a copy of every byte it forwards."""

    log = bytearray()

    def wrap(self, stream: trio.abc.Stream, side: int) -> trio.abc.Stream:
        return Tap(stream, RecordingRelay.log)


@pytest.mark.parametrize("swarm_key", [KEY, None], ids=["keyed", "open swarm"])
async def test_a_recording_relay_learns_nothing_but_sizes(
        autojump_clock: trio.abc.Clock, swarm_key: bytes | None) -> None:
    RecordingRelay.log = bytearray()
    async with relay_lab(swarm_key=swarm_key, service=RecordingRelay) as lab:
        reply = await lab.peer.request(lab.circuit, Echo(SECRET))
        assert reply == Echo(SECRET) and lab.received == [SECRET]
    recorded = bytes(RecordingRelay.log)
    assert len(recorded) > 2 * len(SECRET)  # both ways went through the relay
    # sealed end to end, even in a swarm without a key: not a 16-byte run of it
    assert not any(SECRET[i:i + 16] in recorded for i in range(0, len(SECRET) - 16, 16))
    assert b"relay_test_echo" not in recorded  # not even the message type


class FlippingRelay(RelayService):
    """Flips one bit of the first large chunk it forwards to the node behind the NAT."""

    flipped = 0

    def wrap(self, stream: trio.abc.Stream, side: int) -> trio.abc.Stream:
        return _Flipper(stream) if side == 0 else stream


class _Flipper(trio.abc.Stream):
    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.inner.receive_some(max_bytes)
        if len(data) > 1000 and not FlippingRelay.flipped:
            FlippingRelay.flipped += 1
            data = bytearray(data)
            data[len(data) // 2] ^= 0x10
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_frame_a_relay_flips_is_refused_and_the_session_reestablished(
        autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture) -> None:
    FlippingRelay.flipped = 0
    caplog.set_level(logging.WARNING)
    async with relay_lab(swarm_key=KEY, service=FlippingRelay) as lab:
        with pytest.raises(PeerUnreachable) as failed:
            await lab.peer.request(lab.circuit, Echo(SECRET))
        assert failed.value.maybe_delivered
        assert FlippingRelay.flipped == 1
        assert lab.received == []  # the altered frame never reached a handler
        assert any("decrypt failure" in r.getMessage() for r in caplog.records)
        # the next request opens a new circuit and a new session
        reply = await lab.peer.request(lab.circuit, Echo(SECRET))
        assert reply == Echo(SECRET) and lab.received == [SECRET]
        assert lab.service.status()["circuits_opened"] == 2
