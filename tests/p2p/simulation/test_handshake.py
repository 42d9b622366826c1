"""The simulation's trusted handshake: the Noise handshake's outcomes and identity checks,
without its cryptography (p2p/simulation/handshake.py)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import trio
import trio.testing

from p2p.simulation.handshake import TrustedHandshake
from p2p.simulation.network import SimNetwork
from p2p.wire import codec
from p2p.wire.codec import Message
from p2p.wire.handshake import Handshake, HandshakeError, PeerInfo
from p2p.wire.identity import Identity

SWARM = b"s" * 32
TAG = b"t" * 32


@dataclass(frozen=True)
class WhoAmI:
    nonce: int


@dataclass(frozen=True)
class YouAre:
    node_id: bytes


codec.register(WhoAmI, "test_sim_who_am_i")
codec.register(YouAre, "test_sim_you_are")


def _run(a: Handshake, b: Handshake) -> None:
    to_b, to_a = a.start(), b.start()
    while to_a or to_b:
        next_to_a = [out for p in to_b for out in b.receive(p)]
        next_to_b = [out for p in to_a for out in a.receive(p)]
        to_a, to_b = next_to_a, next_to_b


def _outcome(kind: type[Handshake], swarm_i: bytes | None, swarm_r: bytes | None, *,
             same_identity: bool = False, expect_other: bool = False) -> tuple[str, bool]:
    """What happens: "ok" or the error's reason, and whether the peer is told."""
    me = Identity.generate()
    a = kind(me, initiator=True, listen_address="10.0.0.1:1", tags=frozenset({TAG}),
             swarm_key=swarm_i,
             expected_node_id=Identity.generate().node_id if expect_other else None)
    b = kind(me if same_identity else Identity.generate(), initiator=False,
             listen_address="10.0.0.2:2", swarm_key=swarm_r, cipher="aes-gcm")
    try:
        _run(a, b)
    except HandshakeError as exc:
        return exc.reason.split(":")[0], exc.tell_peer
    assert a.result is not None and b.result is not None
    assert (a.result.peer.node_id, b.result.peer.node_id) == (b.identity.node_id,
                                                              a.identity.node_id)
    assert b.result.peer == PeerInfo(a.identity.node_id, "10.0.0.1:1", frozenset({TAG}))
    ka, kb = a.result.keys, b.result.keys
    if swarm_i is None:
        assert ka is None and kb is None
    else:
        assert ka is not None and kb is not None
        assert ka.send_key == kb.recv_key and ka.recv_key == kb.send_key != ka.send_key
        assert (ka.send_cipher, ka.recv_cipher) == ("chacha20", "aes-gcm")
        assert kb.opener().open(ka.sealer().seal(b"ping")) == b"ping"
    return "ok", False


@pytest.mark.parametrize(("swarm_i", "swarm_r", "options"), [
    (None, None, {}), (SWARM, SWARM, {}), (None, SWARM, {}), (SWARM, None, {}),
    (b"x" * 32, SWARM, {}), (None, None, {"same_identity": True}),
    (SWARM, SWARM, {"expect_other": True}), (None, None, {"expect_other": True}),
])
def test_trusted_handshake_ends_as_the_noise_handshake_does(
        swarm_i: bytes | None, swarm_r: bytes | None, options: dict[str, bool]) -> None:
    noise = _outcome(Handshake, swarm_i, swarm_r, **options)
    trusted = _outcome(TrustedHandshake, swarm_i, swarm_r, **options)
    assert trusted == noise
    if options or swarm_i != swarm_r:
        assert noise[0] != "ok"  # each failing case does fail


def test_trusted_sessions_get_fresh_keys() -> None:
    keys = []
    for _ in range(2):
        a = TrustedHandshake(Identity.generate(), initiator=True, listen_address="",
                             swarm_key=SWARM)
        b = TrustedHandshake(Identity.generate(), initiator=False, listen_address="",
                             swarm_key=SWARM)
        _run(a, b)
        assert a.result is not None and a.result.keys is not None
        keys.append(a.result.keys.send_key)
    assert keys[0] != keys[1]


@pytest.mark.parametrize("trusted", [False, True])
async def test_a_trusted_network_serves_requests_with_the_callers_identity(
        autojump_clock: trio.testing.MockClock, trusted: bool) -> None:
    net = SimNetwork(trusted_handshakes=trusted)
    server_id, client_id = Identity.generate(), Identity.generate()
    server = net.transport(server_id, "b:1", swarm_key=SWARM)
    client = net.transport(client_id, "a:1", swarm_key=SWARM)
    assert (client.handshake_class is TrustedHandshake) is trusted

    async def who(peer: PeerInfo, msg: Message) -> Message | None:
        assert isinstance(msg, WhoAmI)
        return YouAre(peer.node_id)

    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, who)
        assert await client.request(address, WhoAmI(7)) == YouAre(client_id.node_id)
        nursery.cancel_scope.cancel()
    assert net.connections == 1
