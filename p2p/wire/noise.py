"""Sans-IO Noise protocol handshakes (Noise specification, revision 34).

Only what the node uses, plus what the published test vectors need: patterns
``XX`` and ``NN`` with any ``pskN`` modifiers, ``25519``, ``ChaChaPoly`` and
``AESGCM``, ``SHA256``; protocols are named as in the specification, e.g.
``Noise_XXpsk0_25519_ChaChaPoly_SHA256``. :class:`HandshakeState` turns
payloads into handshake messages and back, and :meth:`HandshakeState.split`
gives the transport keys. Each step can also be split in two (tokens, then
payload) so the caller can read the handshake hash where the payload is added:
the node signs it with its identity key. Any failure raises
:class:`NoiseError` and leaves the handshake state unusable.

How it is used: docs/design/transport.md ("Handshake").
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

__all__ = [
    "DH_LEN",
    "CipherState",
    "HandshakeState",
    "NoiseError",
    "ProtocolName",
    "public_bytes",
]

DH_LEN = 32
HASH_LEN = 32
TAG_LEN = 16
_MAX_NONCE = 2**64 - 1

#: Message patterns: pre-messages (initiator, responder) are empty for both.
_PATTERNS: dict[str, tuple[tuple[str, ...], ...]] = {
    "NN": (("e",), ("e", "ee")),
    "XX": (("e",), ("e", "ee", "s", "es"), ("s", "se")),
}
_CIPHERS = ("ChaChaPoly", "AESGCM")


class NoiseError(Exception):
    """A handshake message that does not authenticate, parse or fit the state."""


def public_bytes(key: X25519PrivateKey) -> bytes:
    """The 32-byte raw public key of an X25519 private key."""
    return key.public_key().public_bytes(serialization.Encoding.Raw,
                                         serialization.PublicFormat.Raw)


@dataclass(frozen=True)
class ProtocolName:
    """A parsed protocol name: its handshake pattern, psk positions and cipher."""

    name: str
    pattern: str
    psk_positions: tuple[int, ...]
    cipher: str

    @classmethod
    def parse(cls, name: str) -> ProtocolName:
        """Parse ``Noise_<pattern>[psk..]_25519_<cipher>_SHA256``; ValueError otherwise."""
        parts = name.split("_")
        if len(parts) != 5 or parts[0] != "Noise" or parts[2] != "25519" or parts[4] != "SHA256":
            raise ValueError(f"unsupported Noise protocol {name!r:.80}: expected "
                             "Noise_<pattern>_25519_<ChaChaPoly|AESGCM>_SHA256")
        if parts[3] not in _CIPHERS:
            raise ValueError(f"unsupported Noise cipher {parts[3]!r:.30} in {name!r:.80}")
        pattern, _, modifiers = parts[1].partition("psk")
        if pattern not in _PATTERNS:
            raise ValueError(f"unsupported Noise pattern {pattern!r:.30} in {name!r:.80}")
        positions: list[int] = []
        if modifiers or parts[1].endswith("psk"):
            for mod in ("psk" + modifiers).split("+"):
                if not mod.startswith("psk") or not mod[3:].isdigit():
                    raise ValueError(f"unsupported Noise modifier {mod!r:.30} in {name!r:.80}")
                position = int(mod[3:])
                if position > len(_PATTERNS[pattern]):
                    raise ValueError(f"{mod} is past the last message of {pattern}")
                positions.append(position)
        return cls(name, pattern, tuple(positions), parts[3])

    def messages(self) -> tuple[tuple[str, ...], ...]:
        """The message patterns with the psk tokens of the modifiers inserted."""
        messages = [list(m) for m in _PATTERNS[self.pattern]]
        for position in self.psk_positions:
            if position == 0:
                messages[0].insert(0, "psk")
            else:
                messages[position - 1].append("psk")
        return tuple(tuple(m) for m in messages)


def _hkdf(chaining_key: bytes, ikm: bytes, outputs: int) -> list[bytes]:
    """The specification's HKDF (HMAC-SHA256 chain, no info), 2 or 3 outputs."""
    temp = hmac.digest(chaining_key, ikm, "sha256")
    out = [hmac.digest(temp, b"\x01", "sha256")]
    while len(out) < outputs:
        out.append(hmac.digest(temp, out[-1] + bytes([len(out) + 1]), "sha256"))
    return out


class CipherState:
    """A key (or none yet) and a 64-bit nonce counter (specification section 5.1)."""

    def __init__(self, cipher: str, key: bytes | None = None) -> None:
        self.cipher = cipher
        self.key = key
        self.nonce = 0
        self._aead: ChaCha20Poly1305 | AESGCM | None = None
        if key is not None:
            self.initialize_key(key)

    def initialize_key(self, key: bytes) -> None:
        """Use ``key`` from now on, nonce 0."""
        self.key = key
        self.nonce = 0
        self._aead = ChaCha20Poly1305(key) if self.cipher == "ChaChaPoly" else AESGCM(key)

    @property
    def has_key(self) -> bool:
        """True once a key is set (before that, data passes in clear)."""
        return self._aead is not None

    def _nonce(self) -> bytes:
        if self.nonce >= _MAX_NONCE:
            raise NoiseError("Noise nonce exhausted")
        # ChaChaPoly: 32 zero bits + little-endian counter; AESGCM: big-endian
        fmt = "<4xQ" if self.cipher == "ChaChaPoly" else ">4xQ"
        return struct.pack(fmt, self.nonce)

    def encrypt_with_ad(self, ad: bytes, plaintext: bytes) -> bytes:
        """Ciphertext + tag of ``plaintext`` (``plaintext`` itself without a key)."""
        if self._aead is None:
            return plaintext
        out = self._aead.encrypt(self._nonce(), plaintext, ad)
        self.nonce += 1
        return out

    def decrypt_with_ad(self, ad: bytes, ciphertext: bytes) -> bytes:
        """Plaintext of ``ciphertext``; :class:`NoiseError` if it does not authenticate."""
        if self._aead is None:
            return ciphertext
        try:
            out = self._aead.decrypt(self._nonce(), ciphertext, ad)
        except InvalidTag:
            raise NoiseError("message failed authentication") from None
        self.nonce += 1
        return out


class _SymmetricState:
    """Chaining key, handshake hash and cipher state (specification section 5.2)."""

    def __init__(self, protocol: ProtocolName) -> None:
        name = protocol.name.encode()
        self.h = name.ljust(HASH_LEN, b"\x00") if len(name) <= HASH_LEN else _sha256(name)
        self.ck = self.h
        self.cs = CipherState(protocol.cipher)

    def mix_key(self, ikm: bytes) -> None:
        self.ck, key = _hkdf(self.ck, ikm, 2)
        self.cs.initialize_key(key)

    def mix_hash(self, data: bytes) -> None:
        self.h = _sha256(self.h + data)

    def mix_key_and_hash(self, ikm: bytes) -> None:
        self.ck, temp_h, key = _hkdf(self.ck, ikm, 3)
        self.mix_hash(temp_h)
        self.cs.initialize_key(key)

    def encrypt_and_hash(self, plaintext: bytes) -> bytes:
        ciphertext = self.cs.encrypt_with_ad(self.h, plaintext)
        self.mix_hash(ciphertext)
        return ciphertext

    def decrypt_and_hash(self, ciphertext: bytes) -> bytes:
        plaintext = self.cs.decrypt_with_ad(self.h, ciphertext)
        self.mix_hash(ciphertext)
        return plaintext

    def split(self, cipher: str) -> tuple[CipherState, CipherState]:
        k1, k2 = _hkdf(self.ck, b"", 2)
        return CipherState(cipher, k1), CipherState(cipher, k2)


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _dh(private: X25519PrivateKey, public: bytes) -> bytes:
    try:
        return private.exchange(X25519PublicKey.from_public_bytes(public))
    except ValueError:  # a low-order point gives an all-zero secret: refused
        raise NoiseError("peer sent an invalid X25519 public key") from None


class HandshakeState:
    """One side of a Noise handshake (specification section 5.3), sans-IO.

    ``static`` is this side's static key (patterns with ``s``), ``psks`` the
    pre-shared keys in the order the psk tokens appear, ``ephemeral`` a fixed
    ephemeral key (test vectors only; by default a fresh one is generated).
    """

    def __init__(self, protocol: str | ProtocolName, *, initiator: bool, prologue: bytes = b"",
                 static: X25519PrivateKey | None = None, psks: Sequence[bytes] = (),
                 ephemeral: X25519PrivateKey | None = None) -> None:
        self.protocol = protocol if isinstance(protocol, ProtocolName) else \
            ProtocolName.parse(protocol)
        self.initiator = initiator
        self._messages = self.protocol.messages()
        needs_static = any("s" in m for m in self._messages)
        if needs_static and static is None:
            raise ValueError(f"{self.protocol.name} needs a static key")
        if len(psks) != len(self.protocol.psk_positions):
            raise ValueError(f"{self.protocol.name} needs {len(self.protocol.psk_positions)} "
                             f"pre-shared keys, got {len(psks)}")
        for psk in psks:
            if len(psk) != 32:
                raise ValueError(f"a pre-shared key must be 32 bytes, got {len(psk)}")
        self._psks = list(psks)
        self._ss = _SymmetricState(self.protocol)
        self._ss.mix_hash(prologue)
        self._s = static
        self._e = ephemeral
        self.remote_static: bytes | None = None
        self.remote_ephemeral: bytes | None = None
        self._index = 0  # next message
        self._in_message = False  # tokens done, payload not yet
        self._failed = False

    # -- state -------------------------------------------------------------------

    @property
    def handshake_hash(self) -> bytes:
        """The current handshake hash ``h`` (binds everything sent and received so far)."""
        return self._ss.h

    @property
    def finished(self) -> bool:
        """True once every handshake message has been written or read."""
        return self._index == len(self._messages) and not self._in_message

    @property
    def writes_next(self) -> bool:
        """True if the next handshake message is this side's to write."""
        return (self._index % 2 == 0) == self.initiator

    def split(self) -> tuple[CipherState, CipherState]:
        """(sending, receiving) transport cipher states, once :attr:`finished`."""
        if not self.finished:
            raise NoiseError("handshake not finished")
        c1, c2 = self._ss.split(self.protocol.cipher)
        return (c1, c2) if self.initiator else (c2, c1)

    # -- whole messages ----------------------------------------------------------

    def write_message(self, payload: bytes = b"") -> bytes:
        """The next handshake message, carrying ``payload``."""
        return self.write_tokens() + self.write_payload(payload)

    def read_message(self, message: bytes) -> bytes:
        """Process the peer's next handshake message; returns its payload."""
        rest = self.read_tokens(message)
        return self.read_payload(rest)

    # -- messages in two steps ----------------------------------------------------

    def write_tokens(self) -> bytes:
        """The keys of the next message (its tokens); :meth:`write_payload` follows."""
        self._begin(writing=True)
        out = bytearray()
        psk_mode = bool(self.protocol.psk_positions)
        for token in self._messages[self._index]:
            if token == "e":
                if self._e is None:
                    self._e = X25519PrivateKey.generate()
                e_pub = public_bytes(self._e)
                out += e_pub
                self._ss.mix_hash(e_pub)
                if psk_mode:
                    self._ss.mix_key(e_pub)
            elif token == "s":
                assert self._s is not None
                out += self._ss.encrypt_and_hash(public_bytes(self._s))
            elif token == "psk":
                self._ss.mix_key_and_hash(self._psks.pop(0))
            else:
                self._ss.mix_key(self._dh_token(token))
        return bytes(out)

    def write_payload(self, payload: bytes) -> bytes:
        """The encrypted payload that ends the message :meth:`write_tokens` began."""
        self._end(writing=True)
        return self._ss.encrypt_and_hash(payload)

    def read_tokens(self, message: bytes) -> bytes:
        """Process the keys at the start of ``message``; returns the rest (the payload part)."""
        self._begin(writing=False)
        view = memoryview(message)
        psk_mode = bool(self.protocol.psk_positions)
        try:
            for token in self._messages[self._index]:
                if token == "e":
                    e_pub = self._take(view, DH_LEN)
                    view = view[DH_LEN:]
                    self.remote_ephemeral = e_pub
                    self._ss.mix_hash(e_pub)
                    if psk_mode:
                        self._ss.mix_key(e_pub)
                elif token == "s":
                    size = DH_LEN + (TAG_LEN if self._ss.cs.has_key else 0)
                    self.remote_static = self._ss.decrypt_and_hash(self._take(view, size))
                    view = view[size:]
                elif token == "psk":
                    self._ss.mix_key_and_hash(self._psks.pop(0))
                else:
                    self._ss.mix_key(self._dh_token(token))
        except NoiseError:
            self._failed = True
            raise
        return bytes(view)

    def read_payload(self, rest: bytes) -> bytes:
        """The payload of the message whose tokens :meth:`read_tokens` processed."""
        self._end(writing=False)
        if self._ss.cs.has_key and len(rest) < TAG_LEN:
            self._failed = True
            raise NoiseError(f"handshake message too short: {len(rest)} bytes of payload, "
                             f"expected at least the {TAG_LEN}-byte tag")
        try:
            return self._ss.decrypt_and_hash(rest)
        except NoiseError:
            self._failed = True
            raise

    # -- internals -----------------------------------------------------------------

    def _begin(self, *, writing: bool) -> None:
        if self._failed:
            raise NoiseError("handshake already failed")
        if self._in_message or self._index >= len(self._messages):
            raise NoiseError("no handshake message expected now")
        if self.writes_next != writing:
            raise NoiseError("it is the other side's turn to write")
        self._in_message = True

    def _end(self, *, writing: bool) -> None:
        if self._failed:
            raise NoiseError("handshake already failed")
        if not self._in_message or self.writes_next != writing:
            raise NoiseError("payload without its tokens")
        self._in_message = False
        self._index += 1

    @staticmethod
    def _take(view: memoryview, size: int) -> bytes:
        if len(view) < size:
            raise NoiseError(f"handshake message too short: {len(view)} bytes left, "
                             f"expected {size}")
        return bytes(view[:size])

    def _dh_token(self, token: str) -> bytes:
        # "es": initiator's e with responder's s (seen from either side), etc.
        mine_first = self.initiator
        local_kind, remote_kind = (token[0], token[1]) if mine_first else (token[1], token[0])
        local = self._e if local_kind == "e" else self._s
        remote = self.remote_ephemeral if remote_kind == "e" else self.remote_static
        if local is None or remote is None:
            raise NoiseError(f"token {token} before its keys are known")
        return _dh(local, remote)
