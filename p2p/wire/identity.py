"""Ed25519 node identity: the node id is the 32-byte raw public key.

The private key lives in ``<data_dir>/identity.key`` (PKCS#8 PEM, mode 0600),
written atomically (temp file + rename) so a crash never leaves half a key.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from p2p.file_safety import check_private_dir, read_private_file
from p2p.files import FileWriteError, write_private_file

__all__ = ["IDENTITY_FILE", "Identity", "IdentityError", "verify_signature"]

logger = logging.getLogger(__name__)

IDENTITY_FILE = "identity.key"
_FRESH_IDENTITY = ("the node creates a new identity when the data directory holds none; "
                   "its peers then see a new node")
NODE_ID_SIZE = 32


class IdentityError(Exception):
    """The identity key file cannot be read, parsed or written."""


@dataclass(frozen=True, eq=False)
class Identity:
    """A node's Ed25519 key pair."""

    private_key: Ed25519PrivateKey

    @functools.cached_property
    def node_id(self) -> bytes:
        """The 32-byte raw public key identifying this node (derived once: every
        handshake and descriptor asks for it)."""
        return self.private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )

    @classmethod
    def generate(cls) -> Identity:
        """A fresh random identity (not stored anywhere)."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> Identity:
        """The identity for a 32-byte private seed (deterministic; for tests and simulations)."""
        if len(seed) != 32:
            raise IdentityError(f"Ed25519 seed must be 32 bytes, got {len(seed)}")
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    @functools.cached_property
    def noise_static_key(self) -> X25519PrivateKey:
        """The node's static X25519 key for Noise handshakes, derived from the
        Ed25519 key (one key file; an independent key through HKDF, since one
        key must not serve two algorithms). The handshake binds it to the node
        id with an Ed25519 signature."""
        seed = self.private_key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
            serialization.NoEncryption())
        derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                       info=b"p2p-gossip noise static x25519 v1").derive(seed)
        return X25519PrivateKey.from_private_bytes(derived)

    def sign(self, data: bytes) -> bytes:
        """Ed25519 signature (64 bytes) of ``data``."""
        return self.private_key.sign(data)

    @classmethod
    def load(cls, path: Path) -> Identity:
        """Load the identity from key file ``path``.

        Raises :class:`p2p.file_safety.UnsafeFileError` when the file is not
        owned by this process's user or other users can read or write it.
        """
        try:
            pem = read_private_file(path, what="identity key", origin=_FRESH_IDENTITY)
        except OSError as exc:
            raise IdentityError(f"cannot read identity key {path}: {exc.strerror}") from exc
        try:
            key = serialization.load_pem_private_key(pem, password=None)
        except (ValueError, TypeError) as exc:
            raise IdentityError(
                f"identity key {path} is not a PEM-encoded Ed25519 private key: {exc}"
            ) from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise IdentityError(
                f"identity key {path} holds a {type(key).__name__}, expected Ed25519"
            )
        return cls(key)

    def save(self, path: Path) -> None:
        """Write the private key to ``path`` atomically with mode 0600."""
        pem = self.private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        try:
            write_private_file(path, pem, mode=0o600)
        except FileWriteError as exc:
            raise IdentityError(f"cannot write identity key {path}: {exc} (the data directory "
                                "must be writable)") from exc

    @classmethod
    def load_or_create(cls, data_dir: Path | str) -> Identity:
        """Load ``<data_dir>/identity.key``, creating directory and key if missing.

        An existing directory must be private to this process's user, and so
        must the key (:mod:`p2p.file_safety`; else ``UnsafeFileError``).
        """
        directory = Path(data_dir)
        path = directory / IDENTITY_FILE
        if directory.is_dir():
            check_private_dir(directory)
        if path.exists():
            return cls.load(path)
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise IdentityError(
                f"cannot create data directory {directory}: {exc.strerror}"
            ) from exc
        identity = cls.generate()
        identity.save(path)
        logger.info("created identity %s in %s", identity.node_id.hex()[:16], path)
        return identity


def verify_signature(node_id: bytes, signature: bytes, data: bytes) -> bool:
    """True if ``signature`` is a valid Ed25519 signature of ``data`` by ``node_id``."""
    if len(node_id) != NODE_ID_SIZE:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(node_id).verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True
