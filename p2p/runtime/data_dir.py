"""The data directory's start-up check and the errors of node state, without torch.

:mod:`p2p.runtime.checkpoint` (which loads torch) re-exports them; the command
line and a relay-only node (:mod:`p2p.runtime.relay_node`) use them from here.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

from p2p.files import describe_os_error

__all__ = ["CheckpointError", "DataDirError", "check_data_dir_writable"]


class CheckpointError(Exception):
    """Writing or reading node state failed; the message names the file and why.

    ``errno`` is the underlying OS error number when there is one.
    """

    def __init__(self, code: int | None, message: str) -> None:
        super().__init__(message)
        self.errno = code


class DataDirError(CheckpointError):
    """The data directory is missing, not a directory, or not writable."""


def check_data_dir_writable(path: str | os.PathLike[str], *, create: bool = True) -> Path:
    """Check (creating it with mode 0700 if needed) that ``path`` is a writable
    directory; returns it as an absolute path.

    Raises :class:`DataDirError` with a clear message otherwise: meant to be
    called at start-up, before any network activity.
    """
    p = Path(path).expanduser().absolute()
    if p.exists() and not p.is_dir():
        raise DataDirError(errno.ENOTDIR, f"data directory {p} exists but is not a directory")
    if not p.exists():
        if not create:
            raise DataDirError(errno.ENOENT, f"data directory {p} does not exist")
        try:
            p.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise DataDirError(exc.errno, f"cannot create data directory {p}: "
                               f"{describe_os_error(exc)}") from exc
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-test.", dir=p)
    except OSError as exc:
        raise DataDirError(exc.errno, f"data directory {p} is not writable: "
                           f"{describe_os_error(exc)}") from exc
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)
    return p
