"""A bound on the maps and arrays one msgpack payload may make msgpack build.

Each empty array or map byte of a payload becomes a Python list or dict
(~70-90 bytes of heap), per-container limits do not stop nesting, and msgpack
builds the whole payload before the codec reads its type. So
:func:`unpackb_bounded` counts containers as msgpack finishes them (its
``list_hook`` and ``object_hook``) and stops once a payload of ``n`` bytes made
more than :func:`container_limit` ``(n)``: one per :data:`BYTES_PER_CONTAINER`
bytes, which admits the densest honest message (a grouping of lone nodes),
capped at :data:`MAX_CONTAINERS`. Payloads up to :data:`COUNT_ABOVE` bytes and
the part of a push msgpack parses (:mod:`p2p.wire.msgpack_views`) go without
hooks: ordinary traffic pays nothing.

How it works: docs/design/transport.md ("Limits and failure handling").
"""

from __future__ import annotations

from typing import Any

import msgpack

__all__ = [
    "BYTES_PER_CONTAINER",
    "COUNT_ABOVE",
    "MAX_CONTAINERS",
    "MIN_CONTAINERS",
    "TooManyContainers",
    "container_limit",
    "unpackb_bounded",
]

#: Payloads up to this many bytes are not counted (each container takes a byte).
COUNT_ABOVE = 4096
#: Containers any payload may hold, whatever its size.
MIN_CONTAINERS = COUNT_ABOVE
#: Bytes of payload per container allowed above :data:`MIN_CONTAINERS` (the
#: densest honest message spends 35).
BYTES_PER_CONTAINER = 32
#: Containers no payload may pass (~11 MB of lists at most): about twice the most an
#: honest message holds (see the module docstring).
MAX_CONTAINERS = 1 << 17


class TooManyContainers(ValueError):
    """A payload that holds more maps and arrays than its size allows."""


def container_limit(size: int) -> int:
    """The most maps and arrays a payload of ``size`` bytes may hold."""
    return min(MAX_CONTAINERS, max(MIN_CONTAINERS, size // BYTES_PER_CONTAINER))


def unpackb_bounded(data: bytes | bytearray | memoryview, **options: Any) -> object:
    """``msgpack.unpackb(data, **options)``, raising :class:`TooManyContainers`
    (as soon as it is passed) when ``data`` holds more than
    :func:`container_limit` maps and arrays. ``options`` must not set
    ``list_hook``, ``object_hook`` or ``object_pairs_hook``."""
    size = data.nbytes if isinstance(data, memoryview) else len(data)
    if size <= COUNT_ABOVE:
        return msgpack.unpackb(data, **options)
    limit = container_limit(size)
    built = 0

    def count(container: Any) -> Any:
        nonlocal built
        built += 1
        if built > limit:
            raise TooManyContainers(
                f"more than {limit} maps/arrays in a {size}-byte payload "
                f"(at most 1 per {BYTES_PER_CONTAINER} bytes)")
        return container

    return msgpack.unpackb(data, list_hook=count, object_hook=count, **options)
