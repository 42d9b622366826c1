"""The swarm key file: 32 random bytes, base64 on one line, mode 0600.

The key file is configuration the operator provides (``security.swarm_key_file``);
``p2p keygen`` and the swarm launcher write it with :func:`write_swarm_key`.
:func:`load_swarm_key` refuses a file owned by another user or that other
users can read or write (:mod:`p2p.file_safety`).
"""

from __future__ import annotations

import base64
import logging
import os
import secrets
from pathlib import Path

from p2p.config.errors import ConfigError
from p2p.file_safety import read_private_file
from p2p.files import write_private_file

__all__ = [
    "SWARM_KEY_BYTES",
    "SwarmKeyError",
    "encode_swarm_key",
    "generate_swarm_key",
    "load_swarm_key",
    "write_swarm_key",
]

logger = logging.getLogger(__name__)

SWARM_KEY_BYTES = 32
_KEY = "security.swarm_key_file"
_FRESH_KEY = ("make a new key with `p2p keygen --out FILE` and give it to every node of the "
              "swarm")


class SwarmKeyError(ConfigError):
    """The swarm key file is missing, unreadable, or not 32 bytes of base64."""


def generate_swarm_key() -> bytes:
    """32 fresh random bytes from the OS CSPRNG."""
    return secrets.token_bytes(SWARM_KEY_BYTES)


def encode_swarm_key(key: bytes) -> str:
    """The key file's content: standard base64 and a newline."""
    if len(key) != SWARM_KEY_BYTES:
        raise ValueError(f"a swarm key is {SWARM_KEY_BYTES} bytes, got {len(key)}")
    return base64.b64encode(key).decode("ascii") + "\n"


def write_swarm_key(path: str | os.PathLike[str], key: bytes, *, replace: bool = False) -> None:
    """Write ``key`` to ``path`` (mode 0600, atomically); never over an existing
    file unless ``replace``. Raises :class:`p2p.files.FileWriteError`."""
    write_private_file(path, encode_swarm_key(key).encode("ascii"), exclusive=not replace)


def load_swarm_key(path: str | os.PathLike[str]) -> bytes:
    """Read a swarm key file written by ``p2p keygen`` and return the 32 bytes.

    Raises :class:`SwarmKeyError` naming the file when it is missing, unreadable,
    not base64, or not 32 bytes long, and :class:`p2p.file_safety.UnsafeFileError`
    when it is not owned by this process's user or other users can read or write it.
    """
    p = Path(path).expanduser()
    expected = f"one line of base64 encoding {SWARM_KEY_BYTES} bytes (as `p2p keygen` writes)"
    try:
        raw = read_private_file(p, what="swarm key file", origin=_FRESH_KEY)
    except FileNotFoundError:
        raise SwarmKeyError(f"swarm key file {p} does not exist (create one with "
                            "`p2p keygen --out FILE`)", key=_KEY) from None
    except OSError as exc:
        raise SwarmKeyError(f"cannot read swarm key file {p}: {exc.strerror or exc}",
                            key=_KEY) from None
    if len(raw) > 1024:
        raise SwarmKeyError(f"swarm key file {p} is {len(raw)} bytes; expected {expected}",
                            key=_KEY)
    try:
        decoded = base64.b64decode(raw.strip(), validate=True)
    except (ValueError, TypeError):
        raise SwarmKeyError(f"swarm key file {p} is not valid base64; expected {expected}",
                            key=_KEY) from None
    if len(decoded) != SWARM_KEY_BYTES:
        raise SwarmKeyError(f"swarm key file {p} holds {len(decoded)} bytes; expected "
                            f"{SWARM_KEY_BYTES} (as `p2p keygen` writes)", key=_KEY)
    return decoded
