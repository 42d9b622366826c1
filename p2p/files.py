"""Private files written atomically: checkpoints, identity keys, swarm keys.

:func:`write_private_file` writes a temporary file in the target's directory
with the final permissions (0600 by default), fsyncs it, renames it into
place and fsyncs the directory. A crash or a full disk leaves either the old
file or the new one, never a mix, and no temporary file behind. With
``exclusive=True`` an existing file is never replaced (the final step is a
hard link, which fails if the name is taken). ``before_replace`` runs once the
new bytes are safely on disk, just before they take the name (checkpoints keep
their previous file there).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["FileWriteError", "content_digest", "describe_os_error", "write_private_file"]


class FileWriteError(OSError):
    """Writing a file failed; the message names the file and the cause.

    ``errno`` is the underlying OS error number (``EEXIST`` when ``exclusive``
    found the name taken).
    """

    def __init__(self, code: int | None, message: str) -> None:
        super().__init__(message)
        self.errno = code


def describe_os_error(exc: OSError) -> str:
    """A short, lower-case reason for ``exc`` ("no space left on device", ...)."""
    if exc.errno == errno.ENOSPC:
        return "no space left on device"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.EROFS:
        return "read-only file system"
    return exc.strerror or str(exc)


def write_private_file(path: str | os.PathLike[str], data: bytes, *, mode: int = 0o600,
                       exclusive: bool = False,
                       before_replace: Callable[[], None] | None = None) -> None:
    """Atomically make ``path`` hold ``data`` with permissions ``mode``.

    Raises :class:`FileWriteError` naming ``path``; the previous file (if any)
    is left untouched and the temporary file removed. ``before_replace`` is
    called after the temporary file is written and fsync'ed, before the rename
    (an ``OSError`` it raises fails the write the same way).
    """
    target = Path(path)
    directory = target.parent
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                        dir=directory)
    except OSError as exc:
        raise FileWriteError(exc.errno, f"cannot write {target}: cannot create a temporary "
                             f"file in {directory}: {describe_os_error(exc)}") from exc
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                if written <= 0:  # defensive: a 0-byte write would loop forever
                    raise OSError(errno.EIO, "write returned 0 bytes")
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        if before_replace is not None:
            before_replace()
        if exclusive:
            os.link(tmp_name, target)
            os.unlink(tmp_name)
        else:
            os.replace(tmp_name, target)
    except FileExistsError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise FileWriteError(exc.errno, f"{target} already exists") from exc
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise FileWriteError(exc.errno, f"cannot write {target}: {describe_os_error(exc)}; "
                             "the previous file (if any) is unchanged") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    _fsync_directory(directory)


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable; some file systems refuse directory fsync."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def content_digest(path: str | os.PathLike[str]) -> str:
    """``sha256:<hex>`` of a file's bytes, or of a directory's files (names and bytes,
    in name order): the identity of a data file wherever it lies."""
    root = Path(path).expanduser()
    digest = hashlib.sha256()
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    for file in files:
        if root.is_dir():
            digest.update(file.relative_to(root).as_posix().encode() + b"\0")
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return f"sha256:{digest.hexdigest()}"
