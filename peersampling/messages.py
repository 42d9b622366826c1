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


# The slots' own setters build a message several times faster than the frozen
# dataclass's __init__ (which sets each field through object.__setattr__); the
# core builds a request and a reply per shuffle.
_new_object = object.__new__
_set_sender = ShuffleRequest.__dict__["sender"].__set__
_set_request_entries = ShuffleRequest.__dict__["entries"].__set__
_set_request_view = ShuffleRequest.__dict__["view"].__set__
_set_reply_entries = ShuffleReply.__dict__["entries"].__set__
_set_reply_view = ShuffleReply.__dict__["view"].__set__


def new_request(
    sender: Descriptor, entries: tuple[Descriptor, ...], view: bytes | None
) -> ShuffleRequest:
    """``ShuffleRequest(sender, entries, view)``, built faster."""
    req = _new_object(ShuffleRequest)
    _set_sender(req, sender)
    _set_request_entries(req, entries)
    _set_request_view(req, view)
    return req


def new_reply(entries: tuple[Descriptor, ...], view: bytes | None) -> ShuffleReply:
    """``ShuffleReply(entries, view)``, built faster."""
    reply = _new_object(ShuffleReply)
    _set_reply_entries(reply, entries)
    _set_reply_view(reply, view)
    return reply


#: The wire surface of peer sampling: (message class, wire type name) pairs. The
#: p2p codec encodes each field by its annotation (a :class:`Descriptor` nests as
#: a map); the node registers these at start.
WIRE_MESSAGES: tuple[tuple[type, str], ...] = (
    (ShuffleRequest, "shuffle_request"),
    (ShuffleReply, "shuffle_reply"),
)
