"""Refuse files another local user could have planted, changed or read.

The node trusts its data directory, its identity key and the swarm key file.
:func:`ownership_problem` (a pure function over a stat result) refuses one that
is owned by another user than the node's effective uid (root included), that
its group or others can write, or, for a key (``secret=True``), that they can
read. :class:`UnsafeFileError` names the path, owner, mode and the fixing
command; ``p2p run`` exits with status 2. Nothing is ``chmod``-ed: a secret may
already have leaked. What the node creates itself (directory 0700, keys 0600
via :func:`p2p.files.write_private_file`) always passes.

See docs/guide/operations.md ("Ownership rules").
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path
from typing import Protocol

__all__ = [
    "MAX_PRIVATE_FILE_BYTES",
    "StatLike",
    "UnsafeFileError",
    "admin_socket_problem",
    "check_private_dir",
    "describe_uid",
    "ownership_problem",
    "read_private_file",
]

MAX_PRIVATE_FILE_BYTES = 1 << 20  # keys are a few hundred bytes


class StatLike(Protocol):
    """The two fields of :class:`os.stat_result` the checks look at."""

    @property
    def st_uid(self) -> int: ...

    @property
    def st_mode(self) -> int: ...


def describe_uid(uid: int) -> str:
    """``uid 1001 (alice)``, or ``uid 1001`` for a uid with no user name."""
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (KeyError, OverflowError):
        return f"uid {uid}"


def _who(bits: int) -> str:
    group, other = bool(bits & 0o070), bool(bits & 0o007)
    if group and other:
        return "its group and other users"
    return "its group" if group else "other users"


def ownership_problem(st: StatLike, expected_uid: int, *, secret: bool) -> str | None:
    """Why a file or directory with stat ``st`` must not be trusted by a process
    running as ``expected_uid``, or None when it may.

    ``secret`` (keys): also refuse group/other read access.
    """
    if st.st_uid != expected_uid:
        return (f"it is owned by {describe_uid(st.st_uid)}, not by "
                f"{describe_uid(expected_uid)} that the node runs as")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        return f"{_who(mode & 0o022)} can write it"
    if secret and mode & 0o044:
        return f"{_who(mode & 0o044)} can read it"
    return None


def admin_socket_problem(socket_path: Path, socket_st: StatLike, dir_st: StatLike,
                         my_uid: int) -> str | None:
    """Why a client running as ``my_uid`` must not trust the admin socket at
    ``socket_path`` (stat ``socket_st``, its directory's stat ``dir_st``), or None.

    The node runs as its data directory's owner (it refuses any other), so the
    socket must be owned by that user, in a directory no one else can write;
    and unless the client is root, that user must be the client's own.
    """
    directory = socket_path.parent
    daemon_uid = dir_st.st_uid
    if my_uid not in (0, daemon_uid):
        return (f"the directory {directory} of admin socket {socket_path} is owned by "
                f"{describe_uid(daemon_uid)}, not by you ({describe_uid(my_uid)}): refusing "
                "to talk to it (run this command as the node's user)")
    dir_mode = stat.S_IMODE(dir_st.st_mode)
    if dir_mode & 0o022:
        return (f"the directory {directory} of admin socket {socket_path} is writable by "
                f"{_who(dir_mode & 0o022)} (mode {dir_mode:04o}), so anyone could have put "
                "the socket there: refusing to talk to it (a node refuses to run in such a "
                "directory)")
    if socket_st.st_uid != daemon_uid:
        return (f"admin socket {socket_path} is owned by {describe_uid(socket_st.st_uid)}, "
                f"not the daemon's user ({describe_uid(daemon_uid)}, the owner of "
                f"{directory}): refusing to talk to it")
    return None


class UnsafeFileError(Exception):
    """A data directory or key file is not private to the node's user.

    ``path``, ``owner`` (uid), ``mode`` (permission bits) and ``problem`` say
    what was found; the message adds how to fix it.
    """

    def __init__(self, what: str, path: Path, st: StatLike, expected_uid: int,
                 problem: str, *, secret: bool, origin: str) -> None:
        self.what = what
        self.path = path
        self.owner = st.st_uid
        self.mode = stat.S_IMODE(st.st_mode)
        self.problem = problem
        private = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            fix = f"remove it ({origin})"
        elif st.st_uid != expected_uid:
            try:
                name = pwd.getpwuid(expected_uid).pw_name
            except (KeyError, OverflowError):
                name = str(expected_uid)
            fix = (f"if it is yours, `chown {name} {path}` (and `chmod {private:o} {path}`); "
                   f"if you do not know who made it, remove it ({origin})")
        else:
            fix = f"`chmod {private:o} {path}`"
            if not secret:
                fix += (" (and check its content: another user could have put files in it; "
                        "if in doubt, remove it and let the node start afresh)")
            elif self.mode & 0o022:
                fix += f"; another user could have replaced it: if in doubt, remove it ({origin})"
            else:
                fix += f"; other users could have read it: to be safe, remove it ({origin})"
        super().__init__(
            f"refusing to use {what} {path}: {problem} (owner {describe_uid(st.st_uid)}, "
            f"mode {self.mode:04o}); fix: {fix}")


def _expected(expected_uid: int | None) -> int:
    return os.geteuid() if expected_uid is None else expected_uid


def check_private_dir(path: str | os.PathLike[str], *, what: str = "data directory",
                      expected_uid: int | None = None,
                      origin: str = "the node creates it with mode 0700") -> os.stat_result:
    """Raise :class:`UnsafeFileError` unless directory ``path`` is owned by
    ``expected_uid`` (default: this process's effective uid) and writable by
    no one else; return its stat. OSError (e.g. missing) propagates."""
    p = Path(path)
    st = os.stat(p)
    uid = _expected(expected_uid)
    problem = ownership_problem(st, uid, secret=False)
    if problem is not None:
        raise UnsafeFileError(what, p, st, uid, problem, secret=False, origin=origin)
    return st


def read_private_file(path: str | os.PathLike[str], *, what: str,
                      expected_uid: int | None = None, origin: str,
                      max_bytes: int = MAX_PRIVATE_FILE_BYTES) -> bytes:
    """The content of key file ``path`` after checking, on the opened file
    (no window for a swap between check and read), that it is a regular file
    owned by ``expected_uid`` that no one else can read or write.

    Raises :class:`UnsafeFileError` when it is not; OSError from opening or
    reading propagates. ``origin`` says where a fresh key comes from, for the
    fix in the message. Reads at most ``max_bytes`` + 1 bytes.
    """
    p = Path(path)
    uid = _expected(expected_uid)
    # O_NONBLOCK: a FIFO planted in place of the key must not hang the open
    fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFileError(what, p, st, uid, "it is not a regular file", secret=True,
                                  origin=origin)
        problem = ownership_problem(st, uid, secret=True)
        if problem is not None:
            raise UnsafeFileError(what, p, st, uid, problem, secret=True, origin=origin)
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
