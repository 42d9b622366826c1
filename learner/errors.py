"""The base of the learner's validation errors: which field was wrong, and why.

Callers that map the learner's settings onto their own keys (the node's
config maps ``TrainConfig.lr`` onto ``training.lr``) read :attr:`FieldError.field`
and :attr:`FieldError.detail` instead of parsing the message.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["FieldError"]


class FieldError(ValueError):
    """A value object refused a setting.

    ``field`` is the attribute at fault (None when no single field is);
    ``detail`` is the message without the ``prefix.field:`` lead-in.
    """

    #: Written before the field in the message (``"data"`` gives ``data.path: ...``).
    prefix: ClassVar[str] = ""

    def __init__(self, detail: str, *, field: str | None = None) -> None:
        self.field = field
        self.detail = detail
        lead = f"{self.prefix}.{field}: " if field and self.prefix else ""
        super().__init__(lead + detail)
