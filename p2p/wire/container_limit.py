"""A bound on the maps and arrays one msgpack payload may make msgpack build.

Every byte ``0x90`` (an empty array) or ``0x80`` (an empty map) of a payload
becomes a new Python list or dict: ~70-90 bytes of heap and one more object
for the garbage collector to walk, for one byte received. Per-container
limits (``max_array_len``, ``max_map_len``) do not help, since nesting
defeats them; and msgpack builds the whole payload before the codec reads the
message type. So :func:`unpackb_bounded` counts the containers as msgpack
finishes them (its ``list_hook`` and ``object_hook``, which return each one
unchanged) and stops the unpacking once a payload of ``n`` bytes has made
more than :func:`container_limit` ``(n)`` of them.

The limit follows the payload's size, because the honest need does too: the
densest honest message is a grouping announcement whose groups hold one node
each (``agreed`` of :class:`~p2p.runtime.grouping.messages.GroupsReply`:
35 bytes per tuple, a 32-byte id, its bin8 header and the fixarray byte);
every other container of the protocol (a message, a nested dataclass, an
array map, a descriptor and its tag set) spends more bytes on field names and
values. One container per :data:`BYTES_PER_CONTAINER` bytes therefore admits
every honest payload, and turns a bomb's ~70 bytes of heap per byte into
~2-3. :data:`MAX_CONTAINERS` caps large frames (up to 16 MiB) well above the
most an honest message holds (a grouping of ``grouping.max_records`` =
65,536 nodes, its upper limit, each alone, plus 64 records: ~65,700).

Payloads of at most :data:`COUNT_ABOVE` bytes are unpacked without hooks
(they cannot hold more than :data:`MIN_CONTAINERS` containers anyway), and so
is the part of a push msgpack parses (its large array data is cut out first,
:mod:`p2p.wire.msgpack_views`): ordinary traffic pays nothing.
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
