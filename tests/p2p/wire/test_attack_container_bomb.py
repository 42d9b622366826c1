"""Container bombs: a payload of empty msgpack maps/arrays is refused cheaply.

Every byte 0x90 (empty array) or 0x80 (empty map) used to become a Python
list or dict (~70-90 bytes of heap, one more object for the GC) before the
codec even read the message type: a 256 KiB first handshake frame (before
the swarm key is checked) or a 1-16 MiB request cost tens of MB to a GB of
heap and up to seconds of blocked event loop. p2p.wire.container_limit now
stops the unpacking once a payload holds more containers than its size
allows; the honest maxima still decode.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import msgpack
import numpy as np
import pytest

from p2p.runtime.grouping.agreement import RECORDS_PER_MESSAGE
from p2p.runtime.grouping.messages import GroupsReply, ProjectionRecord
from p2p.runtime.protocol import register_node_messages
from p2p.wire import codec
from p2p.wire.admission import MIN_FRAME_LIMIT
from p2p.wire.container_limit import (
    COUNT_ABOVE,
    MAX_CONTAINERS,
    TooManyContainers,
    container_limit,
    unpackb_bounded,
)
from p2p.wire.handshake import Handshake, HandshakeError
from p2p.wire.identity import Identity
from p2p.wire.msgpack_views import LARGE_BIN
from p2p.wire.transport import HANDSHAKE_MAX_FRAME_SIZE
from peersampling.descriptor import Descriptor
from peersampling.messages import ShuffleReply

register_node_messages()

# What the node may allocate per byte of a refused payload: generous (an honest
# 1 MiB push decodes as a view, i.e. ~0x per byte; a bomb used to cost ~70x).
MAX_BYTES_PER_BYTE = 8


def _bomb(size: int, type_name: str, element: bytes = b"\x90") -> bytes:
    """A ``size``-byte payload: a well-formed header map for ``type_name`` whose
    one extra field is an array32 of ``element`` (an empty container) repeated."""
    name = type_name.encode()
    head = (b"\x83\xa1v" + bytes([codec.PROTOCOL_VERSION]) + b"\xa1t"
            + bytes([0xA0 | len(name)]) + name + b"\xa1x")
    count = (size - len(head) - 5) // len(element)
    return head + b"\xdd" + count.to_bytes(4, "big") + element * count


def _peak_allocated(run: Callable[[], None]) -> int:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("element", [b"\x90", b"\x80"], ids=["empty-arrays", "empty-maps"])
def test_pre_auth_handshake_frame_bomb_is_refused_cheaply(element: bytes) -> None:
    # A responder WITH a swarm key: the attacker does not have it.
    responder = Handshake(Identity.generate(), initiator=False, listen_address="127.0.0.1:1",
                          swarm_key=b"k" * 32)
    responder.start()
    payload = _bomb(HANDSHAKE_MAX_FRAME_SIZE, "noise_hello", element)

    def run() -> None:
        with pytest.raises(HandshakeError):
            responder.receive(payload)

    size = len(payload)
    peak = _peak_allocated(run)
    assert peak <= MAX_BYTES_PER_BYTE * size, (
        f"an unauthenticated {size}-byte first frame made the responder allocate "
        f"{peak / 1e6:.0f} MB ({peak / size:.0f} bytes per byte received) before "
        "it checked the swarm key")


@pytest.mark.parametrize("element", [b"\x90", b"\x80", b"\x91\x90"],
                         ids=["empty-arrays", "empty-maps", "nested"])
def test_post_auth_request_frame_bomb_is_refused_cheaply(element: bytes) -> None:
    payload = _bomb(MIN_FRAME_LIMIT, "ping", element)  # the smallest frame cap a node has

    def run() -> None:
        with pytest.raises(codec.DecodeError, match="maps/arrays"):
            codec.decode(payload)

    size = len(payload)
    peak = _peak_allocated(run)
    assert peak <= MAX_BYTES_PER_BYTE * size, (
        f"a {size}-byte request made codec.decode allocate {peak / 1e6:.0f} MB "
        f"({peak / size:.0f} bytes per byte)")


def test_a_bomb_beside_a_viewed_large_bin_is_counted_on_what_msgpack_parses() -> None:
    # Push-shaped: a large bin (cut out and viewed, msgpack_views) before the bomb.
    bombs = LARGE_BIN
    head = (b"\x84\xa1v" + bytes([codec.PROTOCOL_VERSION]) + b"\xa1t\xa4ping"
            + b"\xa1b\xc6" + (2 * bombs).to_bytes(4, "big") + b"\0" * (2 * bombs) + b"\xa1x")
    payload = head + b"\xdd" + bombs.to_bytes(4, "big") + b"\x90" * bombs
    with pytest.raises(codec.DecodeError, match=f"more than {container_limit(bombs)} "):
        codec.decode(payload)


def test_the_bound_leaves_decoded_values_unchanged() -> None:
    value = {"a": [[1, 2], {"k": [3, {}]}], b"\x01": [[]] * 3000, 7: {"x": [b"y" * 20] * 100}}
    packed = msgpack.packb(value, use_bin_type=True)
    assert len(packed) > COUNT_ABOVE  # the counting path runs
    options = {"raw": False, "use_list": True, "strict_map_key": False, "max_ext_len": 0}
    assert unpackb_bounded(packed, **options) == msgpack.unpackb(packed, **options) == value
    with pytest.raises(TooManyContainers):
        unpackb_bounded(msgpack.packb([[]] * (container_limit(len(packed)) + 1)), **options)


def _honest_maximum_grouping_reply() -> GroupsReply:
    """A grouping announcement at the protocol's honest maximum: 64 records and
    65,536 nodes (grouping.max_records at its upper limit), each in a group alone."""
    ids = [i.to_bytes(32, "big") for i in range(1, 65_537)]
    records = tuple(ProjectionRecord(ids[i], 1, np.zeros(4), b"s" * 64)
                    for i in range(RECORDS_PER_MESSAGE))
    return GroupsReply(1, records, "f" * 64, 65_536, tuple((node,) for node in ids))


def _containers(payload: bytes) -> int:
    built = 0

    def count(container: object) -> object:
        nonlocal built
        built += 1
        return container

    msgpack.unpackb(payload, raw=False, strict_map_key=False, list_hook=count, object_hook=count)
    return built


def test_the_densest_honest_messages_decode() -> None:
    reply = _honest_maximum_grouping_reply()
    payload = codec.encode(reply)
    assert _containers(payload) <= container_limit(len(payload)) <= MAX_CONTAINERS
    assert _containers(payload) * 3 // 2 <= MAX_CONTAINERS  # the ceiling leaves room
    decoded = codec.decode(payload)
    assert isinstance(decoded, GroupsReply) and decoded.agreed == reply.agreed
    # a shuffle of unsigned descriptors without tags (2 containers each, the fewest bytes)
    entries = tuple(Descriptor(i.to_bytes(32, "big"), f"10.0.{i // 250}.{i % 250}:1")
                    for i in range(3000))
    payload = codec.encode(ShuffleReply(entries, None))
    assert len(payload) > COUNT_ABOVE
    assert codec.decode(payload) == ShuffleReply(entries, None)
