"""Wire messages of FedLinked: a pull of a peer's representation of the public split.

A node asks a sampled peer for its representation (:class:`FedLinkedPull`); the
peer answers with the float32 matrix of its last hidden layer's activations on
the public split (:class:`FedLinkedReply`, row-major, ``rows x features``).
Both carry the digest of the public inputs they were computed on, so that nodes
whose public splits differ never compare unrelated rows. Nothing here carries a
parameter. :func:`representation_of` checks a reply before its values are used.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from p2p.strategies.public_split import public_digest

__all__ = [
    "FEDLINKED_MESSAGES",
    "MAX_FEATURES",
    "MAX_ROWS",
    "MAX_VALUES",
    "FedLinkedMessageError",
    "FedLinkedPull",
    "FedLinkedReply",
    "public_digest",
    "representation_of",
]

#: Bounds on a representation a node accepts (and serves): public samples,
#: features per sample and values in all (960 kB of float32 at most: a reply fits
#: the smallest frame limit a node has, 1 MiB).
MAX_ROWS = 20_000
MAX_FEATURES = 8_192
MAX_VALUES = 240_000



class FedLinkedMessageError(ValueError):
    """A FedLinked reply that cannot be used (the message says what was wrong)."""


@dataclass(frozen=True)
class FedLinkedPull:
    """A request for the peer's representation of the public split ``digest`` names."""

    digest: bytes


@dataclass(frozen=True)
class FedLinkedReply:
    """The peer's representation: ``rows x features`` float32 values, row-major,
    computed after ``round`` training rounds."""

    digest: bytes
    rows: int
    features: int
    round: int
    values: NDArray[np.float32]


def representation_of(reply: FedLinkedReply, digest: bytes, rows: int) -> np.ndarray:
    """The (rows, features) float32 matrix of `reply`, after checking that it is of the
    public split `digest` with `rows` samples, within the bounds, and finite.

    Raises :class:`FedLinkedMessageError` naming the field that was wrong.
    """
    if reply.digest != digest:
        raise FedLinkedMessageError("fedlinked reply: digest differs from this node's public "
                                    "split (another data.task, data.seed or data.public_size)")
    if reply.rows != rows:
        raise FedLinkedMessageError(f"fedlinked reply: rows is {reply.rows}, expected {rows} "
                                    "(one per public sample)")
    if not 1 <= reply.features <= MAX_FEATURES:
        raise FedLinkedMessageError(f"fedlinked reply: features is {reply.features}, expected "
                                    f"1..{MAX_FEATURES}")
    if reply.rows * reply.features > MAX_VALUES:
        raise FedLinkedMessageError(f"fedlinked reply: {reply.rows} x {reply.features} values "
                                    f"exceed the limit of {MAX_VALUES}")
    if reply.round < 0:
        raise FedLinkedMessageError(f"fedlinked reply: round is {reply.round}, expected >= 0")
    values = np.asarray(reply.values)
    if values.ndim != 1 or values.size != reply.rows * reply.features:
        raise FedLinkedMessageError(f"fedlinked reply: values holds {values.size} numbers, "
                                    f"expected rows x features = {reply.rows * reply.features}")
    if not np.all(np.isfinite(values)):
        raise FedLinkedMessageError("fedlinked reply: values contain NaN or infinite numbers")
    return values.astype(np.float32).reshape(reply.rows, reply.features)


#: The wire surface of FedLinked, declared by its plug-in (a node registers every
#: strategy's).
FEDLINKED_MESSAGES: tuple[tuple[type, str], ...] = (
    (FedLinkedPull, "fedlinked.pull"),
    (FedLinkedReply, "fedlinked.reply"),
)
