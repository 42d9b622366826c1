"""What went wrong, for the one error line of the ``p2p`` command.

A node runs in a trio nursery, so an error raised by one of its tasks reaches
the command wrapped in an :class:`ExceptionGroup` ("Exceptions from Trio
nursery (1 sub-exception)"), which names nothing. :func:`root_cause` unwraps
it to the exception that says what happened, so the command can print that
and pick the exit status for it.
"""

from __future__ import annotations

__all__ = ["describe", "root_cause"]


def _is_cancellation(exc: BaseException) -> bool:
    # trio.Cancelled, matched by name: this module must not import trio
    return type(exc).__name__ == "Cancelled" and type(exc).__module__.startswith("trio")


def root_cause(exc: BaseException) -> BaseException:
    """``exc`` itself, or, for a group holding one real error (cancellations
    of the sibling tasks aside), that error, unwrapped recursively."""
    while isinstance(exc, BaseExceptionGroup):
        real = [e for e in exc.exceptions if not _is_cancellation(e)]
        if len(real) != 1:
            return exc
        exc = real[0]
    return exc


def describe(exc: BaseException) -> str:
    """One line: ``Type: message`` (a group lists its unwrapped members)."""
    exc = root_cause(exc)
    if isinstance(exc, BaseExceptionGroup):
        parts = [describe(e) for e in exc.exceptions if not _is_cancellation(e)]
        return "; ".join(parts) or "cancelled"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
