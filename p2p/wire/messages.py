"""Messages of the p2p layer itself: handshake, liveness and errors.

Plain frozen dataclasses; :data:`MESSAGES` names them on the wire. The codec
(:mod:`p2p.wire.codec`) is born knowing them, so the handshake and the
transport work before any subsystem adds its own messages.
"""

from __future__ import annotations

from dataclasses import dataclass

# one bound for the models a node advertises, in its HELLO as in its descriptors
from peersampling.descriptor import MAX_TAGS

__all__ = [
    "ERROR_BAD_REQUEST",
    "ERROR_HANDSHAKE",
    "ERROR_INTERNAL",
    "ERROR_NO_REPLY",
    "ERROR_REJECTED",
    "MESSAGES",
    "Error",
    "Hello",
    "HelloAuth",
    "Ping",
    "Pong",
]

NODE_ID_SIZE = 32
NONCE_SIZE = 32
TAG_SIZE = 32
MAX_ADDRESS_LENGTH = 300

# Error codes (``Error.code``).
ERROR_REJECTED = "rejected"  # the handler refused the request (e.g. unknown model)
ERROR_BAD_REQUEST = "bad_request"  # a message that is not a request this node serves
ERROR_INTERNAL = "internal"  # the handler failed unexpectedly
ERROR_NO_REPLY = "no_reply"  # the handler had nothing to answer
ERROR_HANDSHAKE = "handshake"  # handshake refused; sent in clear before closing


def _check_len(name: str, value: bytes, size: int) -> None:
    if len(value) != size:
        raise ValueError(f"{name} must be {size} bytes, got {len(value)}")


@dataclass(frozen=True)
class Hello:
    """First handshake message of each side (sent in clear).

    ``swarm_proof`` is an HMAC over the other fields under a key derived from
    the swarm key (empty when the sender has no swarm key). ``cipher`` names the
    AEAD the sender seals its frames with once the handshake is done.
    """

    version: int
    node_id: bytes
    listen_address: str
    tags: frozenset[bytes]
    nonce: bytes
    cipher: str
    swarm_proof: bytes

    def __post_init__(self) -> None:
        _check_len("node_id", self.node_id, NODE_ID_SIZE)
        _check_len("nonce", self.nonce, NONCE_SIZE)
        if len(self.listen_address) > MAX_ADDRESS_LENGTH:
            raise ValueError(f"listen_address longer than {MAX_ADDRESS_LENGTH} characters")
        if len(self.tags) > MAX_TAGS:
            raise ValueError(f"more than {MAX_TAGS} tags")
        for tag in self.tags:
            _check_len("each tag", tag, TAG_SIZE)


@dataclass(frozen=True)
class HelloAuth:
    """Second handshake message: Ed25519 signature over the handshake transcript."""

    signature: bytes


@dataclass(frozen=True)
class Ping:
    """Liveness probe; answered by the transport itself with a :class:`Pong`."""

    nonce: int


@dataclass(frozen=True)
class Pong:
    """Answer to :class:`Ping`, echoing its nonce."""

    nonce: int


@dataclass(frozen=True)
class Error:
    """Reply telling the requester why its request was not served."""

    code: str
    reason: str


#: The wire surface of the p2p layer: (message class, wire type name) pairs.
MESSAGES: tuple[tuple[type, str], ...] = (
    (Hello, "hello"),
    (HelloAuth, "hello_auth"),
    (Ping, "ping"),
    (Pong, "pong"),
    (Error, "error"),
)
