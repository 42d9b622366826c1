"""Text a peer chose, made fit for one log line.

A peer decides what its refusals say (``Error.reason``), and much of what a
node's own error messages quote (the keys of a malformed message, a decode
failure): up to a whole frame of it, with any characters. Whatever of it
reaches a log line or an exception's text goes through :func:`printable`
first: control characters escaped (no forged log lines) and at most a few
hundred characters kept (no megabyte lines, once per push or connection).
"""

from __future__ import annotations

__all__ = ["MAX_PEER_TEXT", "printable"]

#: Characters of a peer's text kept (an honest refusal is a sentence or two).
MAX_PEER_TEXT = 300


def printable(text: str, limit: int = MAX_PEER_TEXT) -> str:
    """``text`` as (part of) one log line: control characters escaped, at most
    ``limit`` characters kept (then "…")."""
    clean = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit])
    if len(clean) > limit or len(text) > limit:
        return clean[:limit] + "…"
    return clean
