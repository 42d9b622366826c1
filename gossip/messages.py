"""Wire messages of push-sum gossip.

Only plain field types (bytes, int, float, bool, float64 numpy arrays) so that
the p2p wire codec can serialize the dataclasses generically, field by field.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

FINGERPRINT_BYTES = 32


@dataclass(frozen=True, eq=False)
class Push:
    """A share of a partial model's push-sum mass sent to one peer.

    The receiver merges ``values`` with weight ``weight`` and acknowledges.

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
    values: np.ndarray  # float64, 1-D
    weight: float
    masked: bool = False
    noisy: bool = False
    noise_age: int = 0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Push):
            return NotImplemented
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
                if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
                    return False
                if a.dtype != b.dtype or not np.array_equal(a, b):
                    return False
            elif a != b:
                return False
        return True

    __hash__ = object.__hash__

    @property
    def nbytes(self) -> int:
        """Approximate size on the wire (payload plus fixed fields)."""
        return len(self.model) + 8 + 8 + 2 + 8 + int(self.values.nbytes)


@dataclass(frozen=True)
class PushAck:
    """The receiver merged push ``push_id``: the sender may now drop the share."""

    model: bytes
    push_id: int

    @property
    def nbytes(self) -> int:
        """Approximate size on the wire."""
        return len(self.model) + 8


#: The wire surface of gossip: (message class, wire type name) pairs. The p2p
#: codec encodes each field by its annotation; the node registers these at start.
WIRE_MESSAGES: tuple[tuple[type, str], ...] = (
    (Push, "push"),
    (PushAck, "push_ack"),
)
