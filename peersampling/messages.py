"""Shuffle messages exchanged by peer sampling.

Plain fields only (bytes, str, int, tuples, frozensets of bytes, nested
:class:`Descriptor`) so the wire codec can serialize them by their fields.
"""

from __future__ import annotations

from dataclasses import dataclass

from .descriptor import Descriptor


@dataclass(frozen=True, slots=True)
class ShuffleRequest:
    """Sent by the initiator of a shuffle.

    ``sender`` is the initiator's fresh (age 0) descriptor; ``entries`` are the
    other descriptors it offers. ``view`` is ``None`` for the main view, or the
    fingerprint of the partial model whose holder-view is being shuffled.
    An empty ``entries`` means "I know nobody (here): tell me about yourself".
    """

    sender: Descriptor
    entries: tuple[Descriptor, ...]
    view: bytes | None = None


@dataclass(frozen=True, slots=True)
class ShuffleReply:
    """The responder's answer: descriptors from its view (never the initiator)."""

    entries: tuple[Descriptor, ...]
    view: bytes | None = None


#: The wire surface of peer sampling: (message class, wire type name) pairs. The
#: p2p codec encodes each field by its annotation (a :class:`Descriptor` nests as
#: a map); the node registers these at start.
WIRE_MESSAGES: tuple[tuple[type, str], ...] = (
    (ShuffleRequest, "shuffle_request"),
    (ShuffleReply, "shuffle_reply"),
)
