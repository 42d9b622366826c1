"""AEAD sealing of frames after the handshake.

Each direction has its own key (from the Noise handshake's Split(), see
:mod:`p2p.wire.handshake`) and a 64-bit frame counter used as the nonce
(4 zero bytes + 8-byte big-endian counter). The receiver expects exactly the
next counter value, so a replayed, reordered, dropped or forged frame fails to
open; the connection must then be closed (an :class:`Opener` refuses to work
after a failure).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

__all__ = [
    "CIPHERS",
    "DEFAULT_CIPHER",
    "KEY_SIZE",
    "TAG_SIZE",
    "Opener",
    "SealError",
    "Sealer",
    "check_cipher",
]

CIPHERS = ("chacha20", "aes-gcm")
DEFAULT_CIPHER = "chacha20"
KEY_SIZE = 32
TAG_SIZE = 16
_NONCE = struct.Struct(">4xQ")
_MAX_COUNTER = 2**64 - 1
_AAD = b"p2p-gossip frame v1"
#: What the ciphers accept as input.
Buffer = bytes | bytearray | memoryview
# From this many bytes of plaintext on, an AES-GCM frame is sealed straight
# from its parts (streaming GCM: same bytes as the one-shot AEAD), sparing the
# copy that gathers them first: ~8 % of a 1 MiB seal, ~25 % at 8 MiB. Below
# it, setting up the streaming cipher costs more than the copy (64 KiB: ~8 us
# more). ChaCha20-Poly1305 has no streaming form in ``cryptography``; built from
# ChaCha20 and Poly1305 it needs a second pass that costs what the copy saves.
_STREAM_ABOVE = 256 * 1024


class SealError(Exception):
    """A frame that cannot be opened (wrong key, tampering, replay or reordering)."""


def check_cipher(cipher: str) -> str:
    """Return ``cipher`` if it is supported, else raise ``ValueError`` naming the options."""
    if cipher not in CIPHERS:
        raise ValueError(f"unknown cipher {cipher!r}; expected one of {', '.join(CIPHERS)}")
    return cipher


def _aead(cipher: str, key: bytes) -> ChaCha20Poly1305 | AESGCM:
    check_cipher(cipher)
    if len(key) != KEY_SIZE:
        raise ValueError(f"AEAD key must be {KEY_SIZE} bytes, got {len(key)}")
    return ChaCha20Poly1305(key) if cipher == "chacha20" else AESGCM(key)


class Sealer:
    """Seals outgoing frames of one direction."""

    def __init__(self, key: bytes, cipher: str = DEFAULT_CIPHER) -> None:
        self._aead = _aead(cipher, key)
        self.cipher = cipher
        self._counter = 0
        self._aes = algorithms.AES(key) if cipher == "aes-gcm" else None

    def seal(self, plaintext: Buffer) -> bytes:
        """Ciphertext + 16-byte tag of ``plaintext`` under the next counter."""
        return self._aead.encrypt(self._next_nonce(), plaintext, _AAD)

    def seal_into(self, plaintext: Buffer, out: memoryview) -> None:
        """Write ciphertext + tag of ``plaintext`` into ``out`` (exactly
        ``len(plaintext) + TAG_SIZE`` bytes), avoiding a separate output copy."""
        counter = self._counter
        if counter > _MAX_COUNTER:
            raise SealError("frame counter exhausted; reconnect to rekey")
        try:
            # The cipher refuses an output of the wrong size before writing
            # anything; the counter moves on only once the frame is sealed.
            self._aead.encrypt_into(_NONCE.pack(counter), plaintext, _AAD, out)
        except ValueError:
            need = len(memoryview(plaintext)) + TAG_SIZE
            if len(out) != need:
                raise ValueError(f"seal_into needs {need} bytes of output, "
                                 f"got {len(out)}") from None
            raise
        self._counter = counter + 1

    def seal_parts_into(self, parts: Sequence[Buffer], out: memoryview) -> None:
        """Write ciphertext + tag of the concatenation of ``parts`` into ``out``
        (a writable byte view of exactly their size + ``TAG_SIZE``).

        ``out`` may not overlap the parts. Large AES-GCM frames are encrypted
        from the parts where they lie; otherwise the parts are gathered into
        ``out`` and sealed there in place.
        """
        views = [part if type(part) is memoryview and part.format == "B" and part.ndim == 1
                 else memoryview(part).cast("B") for part in parts]
        size = 0
        for view in views:
            size += len(view)
        if len(out) != size + TAG_SIZE:
            raise ValueError(f"seal_parts_into needs {size + TAG_SIZE} bytes of output, "
                             f"got {len(out)}")
        counter = self._counter
        if counter > _MAX_COUNTER:
            raise SealError("frame counter exhausted; reconnect to rekey")
        nonce = _NONCE.pack(counter)
        if self._aes is not None and size >= _STREAM_ABOVE:
            encryptor = Cipher(self._aes, modes.GCM(nonce)).encryptor()
            encryptor.authenticate_additional_data(_AAD)
            pos = 0
            for view in views:  # GCM writes as many bytes as it reads
                pos += encryptor.update_into(view, out[pos:])
            encryptor.finalize()
            out[pos:] = encryptor.tag
        else:
            pos = 0
            for view in views:
                out[pos : pos + len(view)] = view
                pos += len(view)
            self._aead.encrypt_into(nonce, out[:pos], _AAD, out)
        self._counter = counter + 1

    def _next_nonce(self) -> bytes:
        if self._counter > _MAX_COUNTER:
            raise SealError("frame counter exhausted; reconnect to rekey")
        nonce = _NONCE.pack(self._counter)
        self._counter += 1
        return nonce


class Opener:
    """Opens incoming frames of one direction, strictly in order."""

    def __init__(self, key: bytes, cipher: str = DEFAULT_CIPHER) -> None:
        self._aead = _aead(cipher, key)
        self.cipher = cipher
        self._counter = 0
        self._broken = False

    def open(self, ciphertext: Buffer) -> bytes:
        """Plaintext of ``ciphertext``; raises :class:`SealError` on any failure."""
        self._check(len(memoryview(ciphertext)))
        try:
            plaintext = self._aead.decrypt(_NONCE.pack(self._counter), ciphertext, _AAD)
        except InvalidTag:
            raise self._failure() from None
        self._counter += 1
        return plaintext

    def open_in_place(self, frame: memoryview) -> memoryview:
        """Decrypt the writable ``frame`` (ciphertext + tag) over itself and return
        the view of its plaintext; raises :class:`SealError` on any failure.

        After a failure the buffer holds unauthenticated bytes: discard it.
        """
        size = len(frame)
        counter = self._counter
        if self._broken or size < TAG_SIZE or counter > _MAX_COUNTER:
            self._check(size)  # raises, saying which
        plaintext = frame[: size - TAG_SIZE]
        try:
            self._aead.decrypt_into(_NONCE.pack(counter), frame, _AAD, plaintext)
        except InvalidTag:
            raise self._failure() from None
        self._counter = counter + 1
        return plaintext

    def _check(self, size: int) -> None:
        if self._broken:
            raise SealError("channel already failed to decrypt; it must be closed")
        if size < TAG_SIZE:
            self._broken = True
            raise SealError(f"sealed frame of {size} bytes is shorter than the tag")
        if self._counter > _MAX_COUNTER:
            self._broken = True
            raise SealError("frame counter exhausted")

    def _failure(self) -> SealError:
        self._broken = True
        return SealError(
            f"frame {self._counter} failed authentication "
            "(wrong swarm key, tampering, replay or reordering)"
        )
