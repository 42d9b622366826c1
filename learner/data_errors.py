"""The error raised for unusable data, data specs and label permutations."""

from __future__ import annotations

from learner.errors import FieldError

__all__ = ["DataError"]


class DataError(FieldError):
    """Bad data input: the message names the file, key or field and the expected form.

    Raised by :class:`learner.data.DataSpec` with ``field`` set (``data.path: ...``).
    """

    prefix = "data"
