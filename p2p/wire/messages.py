"""Messages of the p2p layer itself: handshake, liveness and errors.

Plain frozen dataclasses; :data:`MESSAGES` names them on the wire. The codec
(:mod:`p2p.wire.codec`) is born knowing them, so the handshake and the
transport work before any subsystem adds its own messages.
"""

from __future__ import annotations

from dataclasses import dataclass

# one bound for the models a node advertises, in its handshake as in its descriptors
from common.tags import MAX_TAGS

__all__ = [
    "ERROR_BAD_REQUEST",
    "ERROR_HANDSHAKE",
    "ERROR_INTERNAL",
    "ERROR_NO_REPLY",
    "ERROR_REJECTED",
    "ERROR_SESSION_REFUSED",
    "MESSAGES",
    "Error",
    "NOT_REQUESTS",
    "HandshakePayload",
    "NoiseHello",
    "NoiseMessage",
    "Observe",
    "Observed",
    "Ping",
    "Pong",
]

NODE_ID_SIZE = 32
SIGNATURE_SIZE = 64
TAG_SIZE = 32
MAX_ADDRESS_LENGTH = 300
MAX_PROTOCOL_LENGTH = 100

# Error codes (``Error.code``).
ERROR_REJECTED = "rejected"  # the handler refused the request (e.g. unknown model)
ERROR_BAD_REQUEST = "bad_request"  # a message that is not a request this node serves
ERROR_INTERNAL = "internal"  # the handler failed unexpectedly
ERROR_NO_REPLY = "no_reply"  # the handler had nothing to answer
ERROR_HANDSHAKE = "handshake"  # handshake refused; sent in clear before closing (never
# after a failed authentication, nor by a keyed node to a peer that has not proved
# membership: then the node closes without a word)
ERROR_SESSION_REFUSED = "session_refused"  # handshake done, but no session slot for the
# peer (the node is busy); sent in the session (sealed with a swarm key) as the reply
# to the peer's first request


def _check_len(name: str, value: bytes, size: int) -> None:
    if len(value) != size:
        raise ValueError(f"{name} must be {size} bytes, got {len(value)}")


@dataclass(frozen=True)
class NoiseHello:
    """First handshake message (initiator to responder), the only one with a
    field in clear besides the Noise bytes: the Noise protocol it starts.

    ``noise`` is Noise message 1: the initiator's ephemeral X25519 key and,
    under ``XXpsk0``, the tag of an empty payload keyed by the swarm key.
    """

    protocol: str
    noise: bytes

    def __post_init__(self) -> None:
        if len(self.protocol) > MAX_PROTOCOL_LENGTH:
            raise ValueError(f"protocol name longer than {MAX_PROTOCOL_LENGTH} characters")


@dataclass(frozen=True)
class NoiseMessage:
    """A later handshake message: Noise message 2 (responder) or 3 (initiator),
    whose encrypted payload is the sender's :class:`HandshakePayload`."""

    noise: bytes


@dataclass(frozen=True)
class HandshakePayload:
    """Who the sender is; travels only inside an encrypted Noise handshake payload.

    ``signature`` is the Ed25519 signature, by ``node_id``, of the handshake
    hash at the point this payload is added and of the sender's static X25519
    key (see :mod:`p2p.wire.handshake`). ``cipher`` names the AEAD the sender
    seals its frames with once the handshake is done.
    """

    node_id: bytes
    listen_address: str
    tags: frozenset[bytes]
    cipher: str
    signature: bytes

    def __post_init__(self) -> None:
        _check_len("node_id", self.node_id, NODE_ID_SIZE)
        _check_len("signature", self.signature, SIGNATURE_SIZE)
        if len(self.listen_address) > MAX_ADDRESS_LENGTH:
            raise ValueError(f"listen_address longer than {MAX_ADDRESS_LENGTH} characters")
        if len(self.tags) > MAX_TAGS:
            raise ValueError(f"more than {MAX_TAGS} tags")
        for tag in self.tags:
            _check_len("each tag", tag, TAG_SIZE)


@dataclass(frozen=True)
class Ping:
    """Liveness probe; answered by the transport itself with a :class:`Pong`."""

    nonce: int


@dataclass(frozen=True)
class Pong:
    """Answer to :class:`Ping`, echoing its nonce."""

    nonce: int


@dataclass(frozen=True)
class Observe:
    """Asks the peer which address this connection comes from (as libp2p's identify
    tells the other end); answered by the transport itself with :class:`Observed`."""


@dataclass(frozen=True)
class Observed:
    """Answer to :class:`Observe`: ``"host:port"`` of the requester as the peer sees
    it (what a NAT made of it), or ``""`` when the peer cannot tell (an in-memory stream)."""

    address: str

    def __post_init__(self) -> None:
        if len(self.address) > MAX_ADDRESS_LENGTH:
            raise ValueError(f"address longer than {MAX_ADDRESS_LENGTH} characters")


@dataclass(frozen=True)
class Error:
    """Reply telling the requester why its request was not served."""

    code: str
    reason: str


#: The wire surface of the p2p layer: (message class, wire type name) pairs.
MESSAGES: tuple[tuple[type, str], ...] = (
    (NoiseHello, "noise_hello"),
    (NoiseMessage, "noise_message"),
    (HandshakePayload, "handshake_payload"),
    (Ping, "ping"),
    (Pong, "pong"),
    (Observe, "observe"),
    (Observed, "observed"),
    (Error, "error"),
)

#: Messages a peer may send but never as a request (the transport refuses them).
NOT_REQUESTS: tuple[type, ...] = (NoiseHello, NoiseMessage, HandshakePayload, Pong, Observed,
                                  Error)
