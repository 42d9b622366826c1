"""Wire messages of push-sum gossip.

Only plain field types (bytes, int, float, bool) and the nested frozen
:class:`~gossip.compression.EncodedVector` so that the p2p wire codec can
serialize the dataclasses generically, field by field.  Vectors travel encoded
(float32 by default, see :mod:`gossip.compression`); the push-sum state itself
stays float64.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from gossip.compression import EncodedVector

FINGERPRINT_BYTES = 32
# push id + weight + flags/age + base, roughly as msgpack spends them
_PUSH_FIXED_BYTES = 8 + 8 + 4 + 8 + 9
_ACK_FIXED_BYTES = 8 + 8


def _same(a: object, b: object) -> bool:
    """Field-wise equality that understands numpy arrays and nested dataclasses."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and bool(np.array_equal(a, b))
        )
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        if type(a) is not type(b):
            return False
        return all(
            _same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)
        )
    return bool(a == b)


@dataclass(frozen=True, eq=False)
class Push:
    """A share of a partial model's push-sum mass sent to one peer.

    The receiver merges the decoded ``values`` with weight ``weight`` and
    acknowledges.  ``values`` is the sender's estimate (plus its mask, in the
    masked phase) encoded for the wire; both ends use exactly the decoded
    vector, so the quantization error stays in the sender's state.

    ``want_reply`` asks for a push-pull exchange: the receiver answers with a
    share of its own mass in the :class:`PushAck` (ignored by a receiver in
    masked mode, which answers with a plain ack).

    ``base`` names a *reference* both ends hold: the outcome of an earlier
    push-pull exchange between the two, named by that exchange's push id
    (0: none, ``values`` are absolute).  ``base_by_sender`` says who started
    that exchange (True: the sender of this push; False: its receiver), so the
    two ends' push ids never name the same reference.  With a base the values
    merged are ``reference + decode(values)``, a delta small once the two
    agree; a receiver that does not hold the reference refuses the push.

    Masked-mode fields:
    - ``masked``: ``values`` carry a fresh random mask (the sender is in its
      masked phase); the receiver cannot read the sender's parameters.
    - ``noisy``: ``values`` still contain mask noise that has not cancelled yet;
      the receiver keeps the deviation apart from its trained values.
    - ``noise_age``: rounds since the newest mask contained in ``values`` was
      injected (0 for a masked push).
    """

    model: bytes  # 32-byte fingerprint of the partial model
    push_id: int
    values: EncodedVector
    weight: float
    masked: bool = False
    noisy: bool = False
    noise_age: int = 0
    want_reply: bool = False
    base: int = 0
    base_by_sender: bool = False

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Push):
            return NotImplemented
        return _same(self, other)

    __hash__ = object.__hash__

    @property
    def nbytes(self) -> int:
        """Approximate size on the wire: the encoded payload plus fixed fields."""
        return len(self.model) + _PUSH_FIXED_BYTES + int(self.values.nbytes)


@dataclass(frozen=True, eq=False)
class PushAck:
    """The receiver merged push ``push_id``: the sender may now drop the share.

    In a push-pull exchange the receiver also gives away a share of its own
    mass: weight ``reply_weight`` with values ``q + decode(reply)`` where ``q``
    is the request's merged values (``reply`` is a delta against them, so it is
    small and compresses well).  ``reply`` is None for a plain acknowledgement.
    """

    model: bytes
    push_id: int
    reply: EncodedVector | None = None
    reply_weight: float = 0.0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PushAck):
            return NotImplemented
        return _same(self, other)

    __hash__ = object.__hash__

    @property
    def nbytes(self) -> int:
        """Approximate size on the wire: fixed fields plus the encoded reply, if any."""
        reply = 0 if self.reply is None else int(self.reply.nbytes)
        return len(self.model) + _ACK_FIXED_BYTES + reply


#: The wire surface of gossip: (message class, wire type name) pairs. The p2p
#: codec encodes each field by its annotation; the node registers these at start.
WIRE_MESSAGES: tuple[tuple[type, str], ...] = (
    (Push, "push"),
    (PushAck, "push_ack"),
)
