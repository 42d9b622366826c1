"""Sans-IO handshake: mutual Ed25519 authentication and session key derivation.

Message flow (all in clear, before any sealing)::

    initiator                                   responder
      HELLO_i  ------------------------------------>   check HELLO_i
               <------------------------------------   HELLO_r, AUTH_r
      check HELLO_r, verify AUTH_r
      AUTH_i   ------------------------------------>   verify AUTH_i

A HELLO carries the protocol version, node id (Ed25519 public key), listen
address, tags, a fresh 32-byte nonce, the sender's sealing cipher and, when a
swarm key is configured, ``swarm_proof`` = HMAC-SHA256 over those fields under a
key derived from the swarm key (the responder's proof also covers the
initiator's nonce). A node without the swarm key therefore cannot produce a
HELLO that a member accepts.

AUTH is an Ed25519 signature over ``role || SHA-256(HELLO_i bytes, HELLO_r
bytes)``: each side proves it holds the private key of the node id it claims,
bound to this very exchange (both fresh nonces are in the transcript).

With a swarm key, each direction gets its own 32-byte AEAD key:
HKDF-SHA256(ikm=swarm key, salt=nonce_i || nonce_r, info=label || direction ||
transcript hash). Each side seals with the cipher it announced in its HELLO.

The object below performs no I/O: feed it received payloads, send what it
returns. Payloads are codec-encoded messages (framing is the caller's job).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import hmac
import os
import struct
from dataclasses import dataclass
from typing import TypeVar

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from p2p.wire import codec
from p2p.wire.identity import Identity, verify_signature
from p2p.wire.messages import NONCE_SIZE, Error, Hello, HelloAuth
from p2p.wire.sealing import CIPHERS, DEFAULT_CIPHER, KEY_SIZE, Opener, Sealer, check_cipher

_M = TypeVar("_M", Hello, HelloAuth)  # the messages of a handshake

__all__ = [
    "SWARM_KEY_SIZE",
    "Handshake",
    "HandshakeError",
    "HandshakeResult",
    "PeerInfo",
    "SessionKeys",
]

SWARM_KEY_SIZE = 32
_HELLO_LABEL = b"p2p-gossip hello v1"
_TRANSCRIPT_LABEL = b"p2p-gossip transcript v1"
_SESSION_LABEL = b"p2p-gossip session v1 "
_ROLE_INITIATOR = b"initiator"
_ROLE_RESPONDER = b"responder"


class HandshakeError(Exception):
    """The handshake failed; the connection must be closed.

    ``remote`` is True when the peer refused us (it sent an error), False when
    this side detected the problem (and may tell the peer why). ``reason`` is
    worded for this node's operator; ``peer_reason`` for the peer's, who reads
    it as "peer refused the handshake: ..." (there, "the peer" is this node).
    """

    def __init__(self, reason: str, *, remote: bool = False,
                 peer_reason: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.remote = remote
        self.peer_reason = reason if peer_reason is None else peer_reason


@dataclass(frozen=True)
class PeerInfo:
    """The authenticated peer at the other end of a connection."""

    node_id: bytes
    listen_address: str
    tags: frozenset[bytes]


@dataclass(frozen=True)
class SessionKeys:
    """Per-direction AEAD keys and ciphers of one connection."""

    send_key: bytes
    recv_key: bytes
    send_cipher: str
    recv_cipher: str

    def sealer(self) -> Sealer:
        """A fresh sealer for the outgoing direction."""
        return Sealer(self.send_key, self.send_cipher)

    def opener(self) -> Opener:
        """A fresh opener for the incoming direction."""
        return Opener(self.recv_key, self.recv_cipher)


@dataclass(frozen=True)
class HandshakeResult:
    """Outcome of a successful handshake; ``keys`` is None without a swarm key."""

    peer: PeerInfo
    keys: SessionKeys | None


class _State(enum.Enum):
    START = "start"
    WAIT_HELLO = "wait_hello"
    WAIT_AUTH = "wait_auth"
    DONE = "done"
    FAILED = "failed"


def _lp(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _hkdf(key: bytes, salt: bytes | None, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=KEY_SIZE, salt=salt, info=info).derive(key)


def _hello_mac_input(hello: Hello, role: bytes, peer_nonce: bytes) -> bytes:
    """Canonical bytes covered by a HELLO's swarm proof (everything but the proof)."""
    parts = [
        _HELLO_LABEL,
        _lp(role),
        struct.pack(">Q", hello.version),
        _lp(hello.node_id),
        _lp(hello.listen_address.encode()),
        _lp(hello.cipher.encode()),
        _lp(hello.nonce),
        _lp(peer_nonce),
        struct.pack(">I", len(hello.tags)),
        *sorted(hello.tags),
    ]
    return b"".join(parts)


def _node(node_id: bytes) -> str:
    return node_id.hex()[:16]


def _version_mismatch(remote_version: str) -> HandshakeError:
    """The error for a peer speaking another protocol version, worded for each side."""
    ours = codec.PROTOCOL_VERSION
    return HandshakeError(
        f"protocol version mismatch: peer speaks version {remote_version}, "
        f"this node speaks version {ours}",
        peer_reason=f"protocol version mismatch: peer speaks version {ours}, "
                    f"this node speaks version {remote_version}",
    )


class Handshake:
    """One side of the handshake (sans-IO).

    Call :meth:`start` once and send what it returns, then pass every received
    payload to :meth:`receive` and send what it returns, until :attr:`done`.
    Any problem raises :class:`HandshakeError`; the object is then unusable.
    """

    def __init__(
        self,
        identity: Identity,
        *,
        initiator: bool,
        listen_address: str,
        tags: frozenset[bytes] = frozenset(),
        swarm_key: bytes | None = None,
        cipher: str = DEFAULT_CIPHER,
        expected_node_id: bytes | None = None,
        nonce: bytes | None = None,
    ) -> None:
        if swarm_key is not None and len(swarm_key) != SWARM_KEY_SIZE:
            raise ValueError(f"swarm key must be {SWARM_KEY_SIZE} bytes, got {len(swarm_key)}")
        check_cipher(cipher)
        self.identity = identity
        self.initiator = initiator
        self.listen_address = listen_address
        self.tags = frozenset(tags)
        self.cipher = cipher
        self.expected_node_id = expected_node_id
        self._swarm_key = swarm_key
        self._hello_key = (
            _hkdf(swarm_key, None, _HELLO_LABEL + b" auth") if swarm_key is not None else None
        )
        self._nonce = nonce if nonce is not None else os.urandom(NONCE_SIZE)
        if len(self._nonce) != NONCE_SIZE:
            raise ValueError(f"nonce must be {NONCE_SIZE} bytes, got {len(self._nonce)}")
        self._state = _State.START
        self._hello_i: bytes | None = None  # wire bytes, for the transcript
        self._hello_r: bytes | None = None
        self._peer_hello: Hello | None = None
        self._transcript: bytes | None = None
        self.result: HandshakeResult | None = None

    @property
    def done(self) -> bool:
        """True once the peer is authenticated and :attr:`result` is set."""
        return self._state is _State.DONE

    # -- public steps -------------------------------------------------------

    def start(self) -> list[bytes]:
        """Payloads to send first (the initiator's HELLO; nothing for the responder)."""
        if self._state is not _State.START:
            raise HandshakeError("handshake already started")
        self._state = _State.WAIT_HELLO
        if not self.initiator:
            return []
        self._hello_i = codec.encode(self._make_hello(peer_nonce=b""))
        return [self._hello_i]

    def receive(self, payload: bytes) -> list[bytes]:
        """Process one received payload; returns payloads to send in reply."""
        try:
            return self._receive(payload)
        except HandshakeError:
            self._state = _State.FAILED
            raise

    # -- internals ----------------------------------------------------------

    def _receive(self, payload: bytes) -> list[bytes]:
        if self._state is _State.WAIT_HELLO:
            hello = self._decode(payload, Hello)
            self._check_hello(hello)
            self._peer_hello = hello
            if self.initiator:
                self._hello_r = payload
                self._transcript = self._transcript_hash()
                self._state = _State.WAIT_AUTH
                return []
            self._hello_i = payload
            self._hello_r = codec.encode(self._make_hello(peer_nonce=hello.nonce))
            self._transcript = self._transcript_hash()
            self._state = _State.WAIT_AUTH
            return [self._hello_r, codec.encode(HelloAuth(self._sign()))]
        if self._state is _State.WAIT_AUTH:
            auth = self._decode(payload, HelloAuth)
            self._verify(auth)
            self._finish()
            return [codec.encode(HelloAuth(self._sign()))] if self.initiator else []
        if self._state is _State.START:
            raise HandshakeError("receive() called before start()")
        raise HandshakeError(f"unexpected message in handshake state {self._state.value}")

    def _decode(self, payload: bytes, expected: type[_M]) -> _M:
        try:
            msg = codec.decode(payload)
        except codec.VersionMismatch as exc:
            raise _version_mismatch(f"{exc.remote_version!r:.20}") from None
        except codec.DecodeError as exc:
            raise HandshakeError(f"malformed handshake message: {exc}") from None
        if isinstance(msg, Error):
            raise HandshakeError(f"peer refused the handshake: {msg.reason}", remote=True)
        if type(msg) is not expected:
            raise HandshakeError(
                f"expected {expected.__name__} during handshake, got {type(msg).__name__}"
            )
        return msg

    def _make_hello(self, peer_nonce: bytes) -> Hello:
        hello = Hello(
            version=codec.PROTOCOL_VERSION,
            node_id=self.identity.node_id,
            listen_address=self.listen_address,
            tags=self.tags,
            nonce=self._nonce,
            cipher=self.cipher,
            swarm_proof=b"",
        )
        if self._hello_key is None:
            return hello
        role = _ROLE_INITIATOR if self.initiator else _ROLE_RESPONDER
        proof = hmac.digest(self._hello_key, _hello_mac_input(hello, role, peer_nonce), "sha256")
        return dataclasses.replace(hello, swarm_proof=proof)

    def _check_hello(self, hello: Hello) -> None:
        if hello.version != codec.PROTOCOL_VERSION:
            raise _version_mismatch(str(hello.version))
        # A pre-shared key cannot tell a member with another key from a stranger;
        # it can tell who has a key at all. Each side is told what it can fix.
        if self._hello_key is None:
            if hello.swarm_proof:
                raise HandshakeError(
                    "missing swarm key: the peer uses a swarm key and this node has none "
                    "(pass --swarm-key-file with the swarm's key to join it)",
                    peer_reason="swarm key mismatch: the peer has no swarm key and this node "
                                "uses one (start the peer with the same --swarm-key-file)",
                )
        else:
            if not hello.swarm_proof:
                raise HandshakeError(
                    "missing swarm key: the peer has no swarm key but this node requires one "
                    "(start the peer with the same --swarm-key-file)",
                    peer_reason="missing swarm key: the peer requires a swarm key and this "
                                "node has none (pass --swarm-key-file with the swarm's key)",
                )
            # The peer's role is the opposite of ours; a responder's proof covers our nonce.
            role = _ROLE_RESPONDER if self.initiator else _ROLE_INITIATOR
            peer_nonce = self._nonce if self.initiator else b""
            expected = hmac.digest(
                self._hello_key, _hello_mac_input(hello, role, peer_nonce), "sha256"
            )
            if not hmac.compare_digest(expected, hello.swarm_proof):
                raise HandshakeError(
                    "wrong swarm key: the peer's hello proof does not verify under this node's "
                    "key (its key differs, or it is not a member of this swarm; every node "
                    "needs the same --swarm-key-file)",
                    peer_reason="wrong swarm key: the peer's swarm key differs from this "
                                "node's (every node of a swarm needs the same --swarm-key-file)",
                )
            if hello.cipher not in CIPHERS:
                raise HandshakeError(
                    f"unsupported cipher {hello.cipher!r:.30}; expected one of {', '.join(CIPHERS)}"
                )
        if hello.node_id == self.identity.node_id:
            raise HandshakeError("self-connection: the peer has this node's own identity")
        if hmac.compare_digest(hello.nonce, self._nonce):
            raise HandshakeError("reflected handshake: the peer echoed this node's nonce")
        if self.expected_node_id is not None and hello.node_id != self.expected_node_id:
            raise HandshakeError(
                f"identity mismatch: expected node {_node(self.expected_node_id)}, "
                f"peer is {_node(hello.node_id)}",
                peer_reason=f"identity mismatch: the peer expected node "
                            f"{_node(self.expected_node_id)} at this address, this node is "
                            f"{_node(hello.node_id)}",
            )

    def _transcript_hash(self) -> bytes:
        assert self._hello_i is not None and self._hello_r is not None
        return hashlib.sha256(_TRANSCRIPT_LABEL + _lp(self._hello_i) + _lp(self._hello_r)).digest()

    def _sign(self) -> bytes:
        assert self._transcript is not None
        role = _ROLE_INITIATOR if self.initiator else _ROLE_RESPONDER
        return self.identity.sign(role + self._transcript)

    def _verify(self, auth: HelloAuth) -> None:
        assert self._peer_hello is not None and self._transcript is not None
        role = _ROLE_RESPONDER if self.initiator else _ROLE_INITIATOR
        if not verify_signature(self._peer_hello.node_id, auth.signature, role + self._transcript):
            raise HandshakeError(
                f"bad signature: peer {_node(self._peer_hello.node_id)} did not prove "
                "its identity over the handshake transcript"
            )

    def _finish(self) -> None:
        peer_hello = self._peer_hello
        assert peer_hello is not None and self._transcript is not None
        keys = None
        if self._swarm_key is not None:
            nonce_i, nonce_r = (
                (self._nonce, peer_hello.nonce)
                if self.initiator
                else (peer_hello.nonce, self._nonce)
            )
            salt = nonce_i + nonce_r
            i2r = _hkdf(self._swarm_key, salt, _SESSION_LABEL + b"i2r " + self._transcript)
            r2i = _hkdf(self._swarm_key, salt, _SESSION_LABEL + b"r2i " + self._transcript)
            send, recv = (i2r, r2i) if self.initiator else (r2i, i2r)
            keys = SessionKeys(send, recv, self.cipher, peer_hello.cipher)
        self.result = HandshakeResult(
            PeerInfo(peer_hello.node_id, peer_hello.listen_address, peer_hello.tags), keys
        )
        self._state = _State.DONE
