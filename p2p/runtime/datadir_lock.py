"""One node per data directory: an exclusive lock that records the owner's pid.

``p2p run`` takes the lock (``DATA_DIR/node.lock``, :func:`fcntl.flock`)
before it loads anything or logs a word, so a second daemon on a running
node's directory stops at once with one line naming the running node's pid.
The kernel drops the lock when the process exits however it ends, so a crash
never leaves a stale lock behind; the file itself stays (removing it would
race with a node starting).

``p2p stop --wait`` reads the pid back (:func:`lock_owner`) and waits until
that process has exited (:func:`process_exited`), not merely until its admin
socket is gone. Importing this module loads neither torch nor trio.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path
from types import TracebackType

from p2p.file_safety import check_private_dir
from p2p.files import describe_os_error

__all__ = [
    "LOCK_FILENAME",
    "DataDirLock",
    "DataDirLockError",
    "DataDirLocked",
    "lock_owner",
    "process_exited",
]

LOCK_FILENAME = "node.lock"
_PID_BYTES = 32  # a pid and a newline, with room to spare


class DataDirLocked(Exception):
    """Another process holds the data directory's lock; ``pid`` is its pid when known."""

    def __init__(self, data_dir: Path, pid: int | None) -> None:
        who = "another node" if pid is None else f"another node (pid {pid})"
        super().__init__(
            f"{who} is already running with data directory {data_dir} (stop it with "
            f"`p2p stop --data-dir {data_dir}`, or give this node another --data-dir)")
        self.data_dir = data_dir
        self.pid = pid


class DataDirLockError(Exception):
    """The lock file cannot be created or locked (permissions, read-only disk...)."""


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, _PID_BYTES, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


class DataDirLock:
    """The exclusive lock of one data directory, held from :meth:`acquire` until
    :meth:`release` or the process's exit. Use as a context manager."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / LOCK_FILENAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """True while this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock and write this process's pid into it.

        Raises :class:`DataDirLocked` (naming the owner's pid) when another
        process holds it, :class:`DataDirLockError` when the file cannot be
        opened or locked, and :class:`p2p.file_safety.UnsafeFileError` when
        the directory belongs to another user or others can write it (checked
        first: a node never takes a lock in, or starts from, such a directory).
        """
        if self._fd is not None:
            return
        try:
            check_private_dir(self.data_dir)
        except OSError:
            pass  # missing or unreadable: the open below says so, naming the lock file
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise DataDirLockError(f"cannot create the lock file {self.path}: "
                                   f"{describe_os_error(exc)}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            pid = _read_pid(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise DataDirLocked(self.data_dir, pid) from None
            raise DataDirLockError(f"cannot lock {self.path}: "
                                   f"{describe_os_error(exc)}") from exc
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        except OSError as exc:
            os.close(fd)
            raise DataDirLockError(f"cannot write the lock file {self.path}: "
                                   f"{describe_os_error(exc)}") from exc
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (the file stays: removing it would race with a starting node)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # no pid left behind for a reader to trust
            os.close(fd)

    def __enter__(self) -> DataDirLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def lock_owner(data_dir: str | os.PathLike[str]) -> int | None:
    """The pid of the process holding ``data_dir``'s lock, or None when no
    process holds it (or the pid is unreadable)."""
    path = Path(data_dir) / LOCK_FILENAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        pid = _read_pid(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return pid  # held: the pid in it is the holder's
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def process_exited(pid: int) -> bool:
    """True when process ``pid`` no longer runs (gone, or a zombie not yet reaped).

    A zombie main thread is not enough: when the main thread exits first, the
    process shows as a zombie while its other threads still run (and it cannot
    be reaped yet), so every thread must be a zombie.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # it exists, under another user
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        # gone since the kill above, or no /proc here (then the kill is all we know)
        return Path("/proc/self").exists() and not Path(f"/proc/{pid}").exists()
    for tid in threads:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue  # that thread is gone
        # the state follows the command name, which is in parentheses and may hold spaces
        fields = stat.rsplit(")", 1)[-1].split()
        if not fields or fields[0] not in ("Z", "X"):
            return False
    return True
