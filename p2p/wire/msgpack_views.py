"""Unpack a msgpack payload without copying its large binary value.

``msgpack.unpackb`` copies every ``bin`` value; for a gossip push that is a
second pass over the megabyte just received. :func:`unpack_with_views` walks the
item headers before the payload's first large ``bin`` map value, cuts it out,
lets msgpack unpack the rest and puts a read-only memoryview of the payload in
its place. Layouts already walked are remembered, so the next push from a
sender costs one masked comparison. Anything unusual (an ext type, byte 0xc1,
truncation, more than :data:`_MAX_ITEMS` items) is left to ``unpackb``, so
malformed input fails as it did.

How it works: docs/design/transport.md ("The hot path").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack

__all__ = ["LARGE_BIN", "first_large_bin", "unpack_with_views"]

#: ``bin`` map values of at least this many bytes are viewed, not copied (the
#: size from which the codec's encoder references array data instead of copying).
LARGE_BIN = 64 * 1024
# The walk gives up beyond this many map entries or array items (msgpack then
# copies): it runs in Python, and a push has nine before its data.
_MAX_ITEMS = 128
# What stands in for the large bin while msgpack unpacks the rest: a fixext4
# (0xd6) of ext type 0 whose 4 bytes are zero.
_PLACEHOLDER = b"\xd6\x00\x00\x00\x00\x00"
_PLACEHOLDER_CODE = 0
_BIN32 = 0xC6


def _fixed_sizes() -> bytes:
    """Per first byte, the size of a whole item that has no length field:
    fixints, nil, booleans, floats, ints and fixstr; 0 for every other item."""
    sizes = bytearray(256)
    for first in (*range(0x00, 0x80), *range(0xE0, 0x100), 0xC0, 0xC2, 0xC3):
        sizes[first] = 1
    for first in range(0xA0, 0xC0):
        sizes[first] = 1 + (first & 0x1F)
    for first, size in ((0xCA, 5), (0xCB, 9), (0xCC, 2), (0xCD, 3), (0xCE, 5), (0xCF, 9),
                        (0xD0, 2), (0xD1, 3), (0xD2, 5), (0xD3, 9)):
        sizes[first] = size
    return bytes(sizes)


_FIXED_SIZES = _fixed_sizes()
# bin8/16/32 and str8/16/32: bytes of their length field.
_LENGTH_WIDTHS = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}
# array16/32 and map16/32: bytes of their count field.
_COUNT_WIDTHS = {0xDC: 2, 0xDD: 4, 0xDE: 2, 0xDF: 4}


class _Layout:
    """What a walk that found a large bin read: the bytes it branched on (the
    first byte of every item, every length and count field) and where the bin
    lay. The walk is a function of those bytes alone (and of the payload being
    at least ``start`` bytes long), so a payload whose first ``start`` bytes
    agree with them under ``mask`` walks the same way to the same bin."""

    __slots__ = ("expected", "mask", "start", "stop")

    def __init__(self, data: memoryview, read: list[tuple[int, int]], start: int,
                 stop: int) -> None:
        mask = bytearray(start)
        for pos, size in read:
            mask[pos : pos + size] = b"\xff" * size
        self.mask = int.from_bytes(mask, "big")
        self.expected = int.from_bytes(data[:start], "big") & self.mask
        self.start = start
        self.stop = stop


# Layouts of recent walks, newest first: a stream of pushes from one sender
# differs only in scalar values (ids, counts), which the walk does not read, so
# checking a layout (a few C operations) replaces walking (~25 Python steps per
# item). Only layouts with a short head are kept (the check reads all of it).
_LAYOUTS: list[_Layout] = []
_LAYOUTS_KEPT = 8
_LAYOUT_HEAD_MAX = 4096


def first_large_bin(data: memoryview) -> tuple[int, int] | None:
    """``(start, stop)`` of the first ``bin`` map value of at least
    :data:`LARGE_BIN` bytes (``data[start:stop]`` is its content, which may
    extend past ``data``), found by walking the msgpack items from the start
    of ``data``; None if the walk meets none (or gives up) within ``data``.

    ``data`` is a 1-D byte view of a payload or of its first bytes.
    """
    end = len(data)
    for layout in _LAYOUTS:
        start = layout.start
        if end >= start and int.from_bytes(data[:start], "big") & layout.mask \
                == layout.expected:
            return start, layout.stop
    read: list[tuple[int, int]] = []
    found = _walk(data, read)
    if found is not None and found[0] <= _LAYOUT_HEAD_MAX:
        _LAYOUTS.insert(0, _Layout(data, read, *found))
        del _LAYOUTS[_LAYOUTS_KEPT:]
    return found


def _walk(data: memoryview, read: list[tuple[int, int]]) -> tuple[int, int] | None:
    """:func:`first_large_bin` by walking the items; ``read`` receives the
    ``(position, size)`` of every byte range the walk branched on."""
    end = len(data)
    note = read.append
    sizes = _FIXED_SIZES
    pos = 0
    # Entries (of a map: key and value) or items (of an array) left in the
    # current container, and in the enclosing ones.
    left, in_map = 1, False
    enclosing: list[tuple[int, bool]] = []
    try:
        for _ in range(_MAX_ITEMS):
            if not left:
                if not enclosing:
                    return None
                left, in_map = enclosing.pop()
                continue
            left -= 1
            if in_map:  # the key first; only keys without a length field are walked
                size = sizes[data[pos]]  # (field names are fixstr)
                note((pos, 1))
                if not size:
                    return None
                pos += size
            first = data[pos]  # IndexError past the end
            note((pos, 1))
            size = sizes[first]
            if size:  # the common case: a scalar
                pos += size
                continue
            if 0x80 <= first <= 0x9F:  # fixmap, fixarray
                enclosing.append((left, in_map))
                in_map = first < 0x90
                left = first & 0x0F
                pos += 1
                continue
            width = _LENGTH_WIDTHS.get(first)
            if width is not None:  # bin, str
                start = pos + 1 + width
                if start > end:
                    return None
                note((pos + 1, width))
                pos = start + int.from_bytes(data[pos + 1 : start], "big")
                if first == _BIN32 and in_map and pos - start >= LARGE_BIN:
                    return start, pos
                continue
            width = _COUNT_WIDTHS.get(first)
            if width is None or pos + 1 + width > end:  # an ext type or 0xc1, or cut short
                return None
            enclosing.append((left, in_map))
            in_map = first >= 0xDE
            note((pos + 1, width))
            left = int.from_bytes(data[pos + 1 : pos + 1 + width], "big")
            pos += 1 + width
    except IndexError:
        pass
    return None


def unpack_with_views(data: memoryview, *, unpack: Callable[..., object] = msgpack.unpackb,
                      **options: Any) -> object:
    """``unpack(data, max_ext_len=0, **options)``, except that the first
    large ``bin`` map value (see :func:`first_large_bin`) comes back as a
    read-only memoryview of ``data`` instead of a ``bytes`` copy, when it makes
    up most of the payload (a view keeps all of it alive).

    The caller hands the bytes over: they must not change while anything
    decoded from them lives. ``data`` is a 1-D byte view. ``options`` must not
    set ``ext_hook`` or ``max_ext_len``: ext types stay refused. ``unpack`` is
    ``msgpack.unpackb`` or a wrapper of it taking the same arguments (the codec's
    bounded one, :func:`p2p.wire.container_limit.unpackb_bounded`): it unpacks
    only what remains once the large value is cut out.
    """
    found = first_large_bin(data) if len(data) >= LARGE_BIN else None
    if found is None or 2 * (found[1] - found[0]) < len(data) or found[1] > len(data):
        return unpack(data, max_ext_len=0, **options)
    start, stop = found
    view = data[start:stop].toreadonly()
    met: list[bool] = []

    def placeholder(code: int, payload: bytes) -> memoryview:
        # The walk met no ext type before the bin; any other ext is the peer's:
        # refused, as unpackb would.
        if met or code != _PLACEHOLDER_CODE or payload != _PLACEHOLDER[2:]:
            raise ValueError("ext types are not allowed")
        met.append(True)
        return view

    reduced = b"".join((data[: start - 5], _PLACEHOLDER, data[stop:]))  # 5: bin32 header
    return unpack(reduced, ext_hook=placeholder, max_ext_len=4, **options)
