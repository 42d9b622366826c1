"""A keyed initiator and a reply written without the swarm key: the simulation's
trusted handshake fails as the Noise handshake does (p2p/simulation/handshake.py).

Noise's message 2 authenticates under the swarm key, so a keyed initiator
closes without a word on a reply a non-member wrote (junk, a forged payload,
a genuine reply recorded from another handshake). The trusted handshake's
reply carries a tag over both sides' nonces under the swarm key for the same
effect; without it the initiator answered a non-member in clear, or completed
the handshake with a forged node id.
"""

from __future__ import annotations

import os

import pytest

from p2p.simulation.handshake import TrustedHandshake
from p2p.wire import codec
from p2p.wire.handshake import Handshake, HandshakeError
from p2p.wire.identity import Identity
from p2p.wire.messages import HandshakePayload, NoiseMessage

SWARM = b"s" * 32
KINDS = pytest.mark.parametrize("kind", [Handshake, TrustedHandshake], ids=["noise", "trusted"])


def _initiator(kind: type[Handshake]) -> Handshake:
    a = kind(Identity.generate(), initiator=True, listen_address="10.0.0.1:1", swarm_key=SWARM)
    a.start()
    return a


def _recorded_reply(kind: type[Handshake]) -> bytes:
    """A genuine message 2 of a member, from a handshake with another initiator."""
    other = kind(Identity.generate(), initiator=True, listen_address="10.0.0.3:3",
                 swarm_key=SWARM)
    member = kind(Identity.generate(), initiator=False, listen_address="10.0.0.2:2",
                  swarm_key=SWARM)
    member.start()
    [reply] = member.receive(other.start()[0])
    return reply


def _non_member_reply(kind: type[Handshake], which: str) -> bytes:
    """What someone without the swarm key can write as message 2."""
    if which == "recorded reply":
        return _recorded_reply(kind)
    # the head stands for the key material (a nonce, or Noise's e and s);
    # a forged payload claims an id without proof
    head = os.urandom(16 if kind is TrustedHandshake else 96)
    forged = codec.encode(HandshakePayload(Identity.generate().node_id, "10.0.0.9:9",
                                           frozenset(), "chacha20", bytes(64)))
    body = {"junk": b"\xc1junk", "forged payload": forged}[which]
    return codec.encode(NoiseMessage(head + body))


@KINDS
@pytest.mark.parametrize("which", ["junk", "forged payload", "recorded reply"])
def test_a_keyed_initiator_neither_accepts_nor_answers_a_non_members_reply(
        kind: type[Handshake], which: str) -> None:
    a = _initiator(kind)
    with pytest.raises(HandshakeError) as info:
        a.receive(_non_member_reply(kind, which))
    assert info.value.silent and not info.value.tell_peer, info.value.reason
    assert info.value.reason.startswith("the peer's handshake reply does not authenticate "
                                        "(wrong swarm key or tampering on the way)")
    assert not a.done and a.result is None


@KINDS
def test_a_members_reply_still_completes_the_keyed_handshake(kind: type[Handshake]) -> None:
    a = kind(Identity.generate(), initiator=True, listen_address="10.0.0.1:1", swarm_key=SWARM)
    b = kind(Identity.generate(), initiator=False, listen_address="10.0.0.2:2",
             swarm_key=SWARM)
    b.start()
    [finish] = a.receive(b.receive(a.start()[0])[0])
    assert b.receive(finish) == []
    assert a.done and b.done
    assert a.result is not None and a.result.peer.node_id == b.identity.node_id
