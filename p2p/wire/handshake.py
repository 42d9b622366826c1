"""Sans-IO handshake: a Noise ``XX`` handshake (``XXpsk0`` with a swarm key)
that binds each side's Ed25519 node id to the session.

Three messages: the initiator's ``NoiseHello`` (protocol, ``[psk] e``), then
each side's ``NoiseMessage`` with its payload
(:class:`~p2p.wire.messages.HandshakePayload`: node id, listen address, tags,
cipher and an Ed25519 signature over a role label, the Noise handshake hash and
its static key, so a relaying member can claim no one else's id). With a swarm
key nothing about the node goes out before the peer proved membership: any
early failure closes without a word (:meth:`Handshake.explain_close` names
likely causes); without one a refusal is explained in clear. Keys come from
Noise's Split(); without a swarm key frames travel in clear unless both ends ask
for sealing (``seal``, through a relay). No I/O: feed it payloads, send what it
returns. How it works: docs/design/transport.md ("Handshake").
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeVar

from p2p.wire import codec
from p2p.wire.identity import Identity, verify_signature
from p2p.wire.messages import Error, HandshakePayload, NoiseHello, NoiseMessage
from p2p.wire.noise import HandshakeState, NoiseError, public_bytes
from p2p.wire.peer_text import printable
from p2p.wire.sealing import CIPHERS, DEFAULT_CIPHER, Opener, Sealer, check_cipher

_M = TypeVar("_M", NoiseHello, NoiseMessage)  # the messages of a handshake

__all__ = [
    "PROTOCOL_KEYED",
    "PROTOCOL_PLAIN",
    "SWARM_KEY_SIZE",
    "Handshake",
    "HandshakeError",
    "HandshakeResult",
    "PeerInfo",
    "SessionKeys",
]

SWARM_KEY_SIZE = 32
PROTOCOL_KEYED = "Noise_XXpsk0_25519_ChaChaPoly_SHA256"
PROTOCOL_PLAIN = "Noise_XX_25519_ChaChaPoly_SHA256"
_PROLOGUE = b"p2p-gossip handshake, wire protocol version "
_SIGNATURE_LABEL = b"p2p-gossip noise identity v1 "
_ROLE_INITIATOR = b"initiator"
_ROLE_RESPONDER = b"responder"


class HandshakeError(Exception):
    """The handshake failed; the connection must be closed.

    ``remote`` is True when the peer refused us (it sent an error), False when
    this side detected the problem. ``reason`` is worded for this node's
    operator; ``peer_reason`` for the peer's, who reads it as "peer refused the
    handshake: ..." (there, "the peer" is this node). ``silent`` failures (a
    message that does not authenticate, and with a swarm key any failure
    before the peer proved membership) are not explained to the peer: the
    connection is just closed. ``seal_with`` is set when the failure came after
    the Noise handshake completed (the responder refusing the initiator's
    identity, which has begun to seal): the refusal is then sent sealed with
    these keys, as the reply the initiator reads first.
    """

    def __init__(self, reason: str, *, remote: bool = False,
                 peer_reason: str | None = None, silent: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.remote = remote
        self.silent = silent
        self.peer_reason = reason if peer_reason is None else peer_reason
        self.seal_with: SessionKeys | None = None

    @property
    def tell_peer(self) -> bool:
        """True if the peer should be sent ``peer_reason`` (in clear) before closing."""
        return not self.remote and not self.silent


@dataclass(frozen=True)
class PeerInfo:
    """The authenticated peer at the other end of a connection.

    ``remote``: where an incoming connection comes from, ``"host:port"`` as this
    node sees it (a label for in-memory streams; ``""`` on outgoing connections).
    """

    node_id: bytes
    listen_address: str
    tags: frozenset[bytes]
    remote: str = ""


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
    """Outcome of a successful handshake; ``keys`` is None without a swarm key
    (and without ``seal``)."""

    peer: PeerInfo
    keys: SessionKeys | None


class _State(enum.Enum):
    START = "start"
    WAIT_HELLO = "wait_hello"  # responder
    WAIT_REPLY = "wait_reply"  # initiator
    WAIT_FINISH = "wait_finish"  # responder
    DONE = "done"
    FAILED = "failed"


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


def _signed_data(role: bytes, handshake_hash: bytes, static_key: bytes) -> bytes:
    return _SIGNATURE_LABEL + role + handshake_hash + static_key


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
        seal: bool = False,
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
        self._seal = seal  # seal without a swarm key too (a session through a relay)
        self.protocol = PROTOCOL_PLAIN if swarm_key is None else PROTOCOL_KEYED
        self._noise = HandshakeState(
            self.protocol, initiator=initiator,
            prologue=_PROLOGUE + str(codec.PROTOCOL_VERSION).encode(),
            static=identity.noise_static_key,
            psks=() if swarm_key is None else (swarm_key,),
        )
        self._state = _State.START
        self.result: HandshakeResult | None = None

    #: True once a Noise message of the peer authenticated (with a swarm key:
    #: the peer proved membership); until then a keyed node tells it nothing.
    _peer_proven = False

    @property
    def done(self) -> bool:
        """True once the peer is authenticated and :attr:`result` is set."""
        return self._state is _State.DONE

    # -- public steps -------------------------------------------------------

    def start(self) -> list[bytes]:
        """Payloads to send first (the initiator's hello; nothing for the responder)."""
        if self._state is not _State.START:
            raise HandshakeError("handshake already started")
        if not self.initiator:
            self._state = _State.WAIT_HELLO
            return []
        self._state = _State.WAIT_REPLY
        return [codec.encode(NoiseHello(self.protocol, self._noise.write_message()))]

    def receive(self, payload: bytes) -> list[bytes]:
        """Process one received payload; returns payloads to send in reply."""
        try:
            return self._receive(payload)
        except HandshakeError as exc:
            self._state = _State.FAILED
            if self._swarm_key is not None and not self._peer_proven:
                exc.silent = True  # a non-member learns nothing, not even why
            raise

    def explain_close(self, reason: str) -> str:
        """``reason`` (the connection ended during the handshake) with what it
        most likely means: a keyed node closes without a word on a first
        message that does not prove membership, whatever was wrong with it.
        The text names this node's wire protocol version, which the other
        node's log line on a version mismatch names too."""
        if self._state is not _State.WAIT_REPLY:
            return reason
        if self._swarm_key is not None:
            fix = "every node of a swarm needs the same --swarm-key-file"
        else:
            fix = "this node has no swarm key: to join a private swarm, pass its --swarm-key-file"
        return (f"{reason} before answering the first handshake message: the peer closed the "
                "handshake: a different swarm key, no swarm key where one is needed, or "
                "another protocol version (this node speaks wire protocol version "
                f"{codec.PROTOCOL_VERSION}; a node with a swarm key does not tell a "
                f"non-member why; {fix}; or it had no room for this connection)")

    # -- internals ----------------------------------------------------------

    def _receive(self, payload: bytes) -> list[bytes]:
        if self._state is _State.WAIT_HELLO:
            hello = self._decode(payload, NoiseHello)
            self._check_protocol(hello.protocol)
            self._read(hello.noise, first=True)
            return [codec.encode(NoiseMessage(self._write_with_identity()))]
        if self._state is _State.WAIT_REPLY:
            reply = self._decode(payload, NoiseMessage)
            peer = self._read(reply.noise, first=False)
            out = [codec.encode(NoiseMessage(self._write_with_identity()))]
            self._finish(peer)
            return out
        if self._state is _State.WAIT_FINISH:
            finish = self._decode(payload, NoiseMessage)
            try:
                peer = self._read(finish.noise, first=False)
            except HandshakeError as exc:
                if self._noise.finished and not exc.silent:
                    # the initiator already seals: it reads the refusal as its first reply
                    exc.seal_with = self._session_keys(self.cipher)
                raise
            self._finish(peer)
            return []
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
            # unauthenticated text (in clear; anyone on the path can send it)
            # bound for this node's log: one short line of printable characters
            raise HandshakeError(f"peer refused the handshake: {printable(msg.reason)}",
                                 remote=True)
        if type(msg) is not expected:
            raise HandshakeError(
                f"expected {expected.__name__} during handshake, got {type(msg).__name__}"
            )
        return msg

    def _check_protocol(self, protocol: str) -> None:
        if protocol == self.protocol:
            return
        # Who has a key at all shows in the protocol name; a different key does
        # not (it fails authentication). A keyless node is told what it can fix;
        # a keyed one tells a non-member nothing (see receive()).
        if protocol == PROTOCOL_PLAIN:
            raise HandshakeError(
                "missing swarm key: the peer has no swarm key but this node requires one "
                "(start the peer with the same --swarm-key-file)",
            )
        if protocol == PROTOCOL_KEYED:
            raise HandshakeError(
                "missing swarm key: the peer uses a swarm key and this node has none "
                "(pass --swarm-key-file with the swarm's key to join it)",
                peer_reason="swarm key mismatch: the peer has no swarm key and this node "
                            "uses one (start the peer with the same --swarm-key-file)",
            )
        raise HandshakeError(
            f"unsupported handshake protocol {protocol!r:.100}; this node speaks "
            f"{self.protocol}",
            peer_reason=f"unsupported handshake protocol {protocol!r:.100}: the peer "
                        f"speaks {self.protocol}",
        )

    def _read(self, message: bytes, *, first: bool) -> HandshakePayload | None:
        """Read one Noise message; the peer's verified payload unless it is the first."""
        noise = self._noise
        try:
            rest = noise.read_tokens(message)
            signed_hash = noise.handshake_hash
            plaintext = noise.read_payload(rest)
        except NoiseError as exc:
            raise self._unauthenticated(exc, first) from None
        self._peer_proven = True
        if first:
            if plaintext:
                raise HandshakeError("malformed handshake message: the first message "
                                     "carries a payload")
            self._state = _State.WAIT_FINISH
            return None
        try:
            peer = codec.decode(plaintext)
        except codec.DecodeError as exc:
            raise HandshakeError(f"malformed handshake payload: {exc}") from None
        if type(peer) is not HandshakePayload:
            raise HandshakeError(f"expected HandshakePayload in the handshake, got "
                                 f"{type(peer).__name__}")
        self._check_peer(peer, signed_hash)
        return peer

    def _unauthenticated(self, exc: NoiseError, first: bool) -> HandshakeError:
        if self._swarm_key is not None and first:
            return HandshakeError(
                "wrong swarm key: the peer's first handshake message does not authenticate "
                "under this node's key (its key differs, or it is not a member of this "
                f"swarm; every node needs the same --swarm-key-file): {exc}",
                silent=True,
            )
        what = "reply" if self.initiator else "last message"
        key_hint = "wrong swarm key or " if self._swarm_key is not None else ""
        return HandshakeError(
            f"the peer's handshake {what} does not authenticate ({key_hint}tampering on the "
            f"way): {exc}",
            silent=True,
        )

    def _check_peer(self, peer: HandshakePayload, signed_hash: bytes) -> None:
        if peer.node_id == self.identity.node_id:
            raise HandshakeError("self-connection: the peer has this node's own identity")
        if self.expected_node_id is not None and peer.node_id != self.expected_node_id:
            # no node id in the peer's version: it is sent in clear
            raise HandshakeError(
                f"identity mismatch: expected node {_node(self.expected_node_id)}, "
                f"peer is {_node(peer.node_id)}",
                peer_reason="identity mismatch: the peer expected another node at this "
                            "address (this node may have a new identity)",
            )
        role = _ROLE_RESPONDER if self.initiator else _ROLE_INITIATOR
        remote_static = self._noise.remote_static
        assert remote_static is not None  # XX: the peer's s comes before its payload
        if not verify_signature(peer.node_id, peer.signature,
                                _signed_data(role, signed_hash, remote_static)):
            raise HandshakeError(
                f"bad signature: peer {_node(peer.node_id)} did not prove "
                "its identity over the handshake",
                peer_reason="bad signature: the peer could not verify this node's identity "
                            "over the handshake",
            )
        if peer.cipher not in CIPHERS:
            raise HandshakeError(
                f"unsupported cipher {peer.cipher!r:.30}; expected one of {', '.join(CIPHERS)}"
            )

    def _write_with_identity(self) -> bytes:
        """The next Noise message, its payload saying (and proving) who this node is."""
        noise = self._noise
        try:
            tokens = noise.write_tokens()
        except NoiseError as exc:  # e.g. the peer's ephemeral key is a low-order point
            raise HandshakeError(f"malformed handshake message: {exc}", silent=True) from None
        role = _ROLE_INITIATOR if self.initiator else _ROLE_RESPONDER
        signature = self.identity.sign(
            _signed_data(role, noise.handshake_hash, public_bytes(self.identity.noise_static_key)))
        payload = HandshakePayload(self.identity.node_id, self.listen_address, self.tags,
                                   self.cipher, signature)
        return tokens + noise.write_payload(codec.encode(payload))

    def _session_keys(self, peer_cipher: str) -> SessionKeys | None:
        if self._swarm_key is None and not self._seal:
            return None
        send, recv = self._noise.split()
        assert send.key is not None and recv.key is not None
        return SessionKeys(send.key, recv.key, self.cipher, peer_cipher)

    def _finish(self, peer: HandshakePayload | None) -> None:
        assert peer is not None
        keys = self._session_keys(peer.cipher)
        self.result = HandshakeResult(PeerInfo(peer.node_id, peer.listen_address, peer.tags),
                                      keys)
        self._state = _State.DONE
