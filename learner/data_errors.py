"""The error raised for unusable data, data specs and label permutations."""

from __future__ import annotations

__all__ = ["DataError"]


class DataError(ValueError):
    """Bad data input: the message names the file, key or field and the expected form."""
