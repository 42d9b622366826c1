"""A handshake for simulated identities: the same checks, no cryptography of identities.

In a simulation the simulation itself hands out every identity, so the Noise
``XX`` handshake's X25519 exchanges and Ed25519 signatures prove nothing it
does not know, yet cost much of every first contact at 1,000 nodes.
:class:`TrustedHandshake` keeps :class:`~p2p.wire.handshake.Handshake`'s three
messages and every identity check but the proof: a swarm-key mismatch fails
silently (keyed BLAKE2b tags on the first two messages), a self-connection, an
unexpected node id or an unknown cipher fails with the same reasons, and the
:class:`~p2p.wire.handshake.HandshakeResult` has per-direction keys derived
from the swarm key and both nonces. It does not prove the claimed id: use it
only where every peer is simulated (:class:`~p2p.simulation.network.SimNetwork`
with ``trusted_handshakes=True``); a daemon never does.

See docs/guide/simulation.md ("Trusted handshakes").
"""

from __future__ import annotations

import hashlib
import hmac
import os

from p2p.wire import codec
from p2p.wire.handshake import (
    Handshake,
    HandshakeError,
    HandshakeResult,
    PeerInfo,
    SessionKeys,
    _node,
    _State,
)
from p2p.wire.identity import Identity
from p2p.wire.messages import HandshakePayload, NoiseHello, NoiseMessage
from p2p.wire.sealing import CIPHERS, DEFAULT_CIPHER, check_cipher

__all__ = ["TRUSTED_PROTOCOL_KEYED", "TRUSTED_PROTOCOL_PLAIN", "TrustedHandshake"]

TRUSTED_PROTOCOL_PLAIN = "SimTrusted_XX"
TRUSTED_PROTOCOL_KEYED = "SimTrusted_XXpsk0"
_NONCE_SIZE = 16
_TAG_SIZE = 16
_NO_SIGNATURE = bytes(64)  # the payload's signature field: nothing is signed


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hashlib.blake2b(b"|".join(parts), key=key, digest_size=_TAG_SIZE).digest()


class TrustedHandshake(Handshake):
    """A :class:`~p2p.wire.handshake.Handshake` for simulated identities (see the module).

    Same constructor, same steps (:meth:`start`, :meth:`receive`, :attr:`done`,
    :attr:`result`), same errors; the Noise state is never built.
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
        seal: bool = False,  # ignored: a simulated session is never sealed
    ) -> None:
        # no super().__init__(): it would build the Noise state this class skips
        if swarm_key is not None and len(swarm_key) != 32:
            raise ValueError(f"swarm key must be 32 bytes, got {len(swarm_key)}")
        check_cipher(cipher)
        self.identity = identity
        self.initiator = initiator
        self.listen_address = listen_address
        self.tags = frozenset(tags)
        self.cipher = cipher
        self.expected_node_id = expected_node_id
        self._swarm_key = swarm_key
        self.protocol = TRUSTED_PROTOCOL_PLAIN if swarm_key is None else TRUSTED_PROTOCOL_KEYED
        self._nonce = os.urandom(_NONCE_SIZE)
        self._peer_nonce = b""
        self._state = _State.START
        self.result: HandshakeResult | None = None

    def start(self) -> list[bytes]:
        if self._state is not _State.START:
            raise HandshakeError("handshake already started")
        if not self.initiator:
            self._state = _State.WAIT_HELLO
            return []
        self._state = _State.WAIT_REPLY
        tag = b"" if self._swarm_key is None else _mac(self._swarm_key, b"hello", self._nonce)
        return [codec.encode(NoiseHello(self.protocol, self._nonce + tag))]

    def _receive(self, payload: bytes) -> list[bytes]:
        if self._state is _State.WAIT_HELLO:
            hello = self._decode(payload, NoiseHello)
            self._check_trusted_protocol(hello.protocol)
            nonce, tag = hello.noise[:_NONCE_SIZE], hello.noise[_NONCE_SIZE:]
            if len(nonce) != _NONCE_SIZE or (self._swarm_key is not None and tag != _mac(
                    self._swarm_key, b"hello", nonce)):
                raise self._unauthenticated_trusted(first=True)
            self._peer_proven = True  # as Handshake: the peer's tag verified
            self._peer_nonce = nonce
            self._state = _State.WAIT_FINISH
            return [codec.encode(NoiseMessage(self._nonce + self._reply_tag()
                                              + self._own_payload()))]
        if self._state is _State.WAIT_REPLY:
            reply = self._decode(payload, NoiseMessage)
            self._peer_nonce = reply.noise[:_NONCE_SIZE]
            rest = reply.noise[_NONCE_SIZE:]
            if self._swarm_key is not None:
                # as Noise's message 2, the reply proves the responder's membership
                # before anything of it is read (else: closed without a word)
                tag, rest = rest[:_TAG_SIZE], rest[_TAG_SIZE:]
                if len(self._peer_nonce) != _NONCE_SIZE or not hmac.compare_digest(
                        tag, self._reply_tag()):
                    raise self._unauthenticated_trusted(first=False)
            peer = self._read_payload(rest)
            out = [codec.encode(NoiseMessage(self._own_payload()))]
            self._finish_trusted(peer)
            return out
        if self._state is _State.WAIT_FINISH:
            finish = self._decode(payload, NoiseMessage)
            try:
                peer = self._read_payload(finish.noise)
            except HandshakeError as exc:
                if not exc.silent:  # the initiator already seals: its first reply is sealed
                    exc.seal_with = self._trusted_keys(self.cipher)
                raise
            self._finish_trusted(peer)
            return []
        if self._state is _State.START:
            raise HandshakeError("receive() called before start()")
        raise HandshakeError(f"unexpected message in handshake state {self._state.value}")

    def _check_trusted_protocol(self, protocol: str) -> None:
        # the names map onto Handshake's, so that a missing key gets its reasons
        plain = {TRUSTED_PROTOCOL_PLAIN: "Noise_XX_25519_ChaChaPoly_SHA256",
                 TRUSTED_PROTOCOL_KEYED: "Noise_XXpsk0_25519_ChaChaPoly_SHA256"}
        if protocol == self.protocol:
            return
        mine, self.protocol = self.protocol, plain[self.protocol]
        try:
            self._check_protocol(plain.get(protocol, protocol))
        finally:
            self.protocol = mine

    def _unauthenticated_trusted(self, *, first: bool) -> HandshakeError:
        if self._swarm_key is not None and first:
            return HandshakeError(
                "wrong swarm key: the peer's first handshake message does not authenticate "
                "under this node's key (its key differs, or it is not a member of this "
                "swarm; every node needs the same --swarm-key-file)", silent=True)
        if self._swarm_key is not None and self.initiator:
            return HandshakeError(
                "the peer's handshake reply does not authenticate (wrong swarm key or "
                "tampering on the way): simulated handshake", silent=True)
        return HandshakeError("malformed handshake message (simulated handshake)", silent=True)

    def _reply_tag(self) -> bytes:
        """The responder's tag on message 2: the swarm key over both nonces
        (empty without a key); fresh per handshake, so a recorded reply does
        not verify for another initiator."""
        if self._swarm_key is None:
            return b""
        if self.initiator:
            first, second = self._nonce, self._peer_nonce
        else:
            first, second = self._peer_nonce, self._nonce
        return _mac(self._swarm_key, b"reply", first, second)

    def _own_payload(self) -> bytes:
        return codec.encode(HandshakePayload(self.identity.node_id, self.listen_address,
                                             self.tags, self.cipher, _NO_SIGNATURE))

    def _read_payload(self, data: bytes) -> HandshakePayload:
        if len(self._peer_nonce) != _NONCE_SIZE:
            raise self._unauthenticated_trusted(first=False)
        # With a key, the reply's tag verified (the initiator) or the hello's
        # (the responder): the peer proved membership, as a Noise message would.
        self._peer_proven = True
        try:
            peer = codec.decode(data)
        except codec.DecodeError as exc:
            raise HandshakeError(f"malformed handshake payload: {exc}") from None
        if type(peer) is not HandshakePayload:
            raise HandshakeError(f"expected HandshakePayload in the handshake, got "
                                 f"{type(peer).__name__}")
        # Handshake._check_peer's checks, less the signature (nothing was signed)
        if peer.node_id == self.identity.node_id:
            raise HandshakeError("self-connection: the peer has this node's own identity")
        if self.expected_node_id is not None and peer.node_id != self.expected_node_id:
            raise HandshakeError(
                f"identity mismatch: expected node {_node(self.expected_node_id)}, "
                f"peer is {_node(peer.node_id)}",
                peer_reason="identity mismatch: the peer expected another node at this "
                            "address (this node may have a new identity)",
            )
        if peer.cipher not in CIPHERS:
            raise HandshakeError(
                f"unsupported cipher {peer.cipher!r:.30}; expected one of {', '.join(CIPHERS)}"
            )
        return peer

    def _trusted_keys(self, peer_cipher: str) -> SessionKeys | None:
        if self._swarm_key is None:
            return None
        if self.initiator:
            first, second = self._nonce, self._peer_nonce
        else:
            first, second = self._peer_nonce, self._nonce
        to_responder = hashlib.blake2b(b"i2r" + first + second, key=self._swarm_key).digest()[:32]
        to_initiator = hashlib.blake2b(b"r2i" + first + second, key=self._swarm_key).digest()[:32]
        send, recv = ((to_responder, to_initiator) if self.initiator
                      else (to_initiator, to_responder))
        return SessionKeys(send, recv, self.cipher, peer_cipher)

    def _finish_trusted(self, peer: HandshakePayload) -> None:
        self.result = HandshakeResult(PeerInfo(peer.node_id, peer.listen_address, peer.tags),
                                      self._trusted_keys(peer.cipher))
        self._state = _State.DONE
