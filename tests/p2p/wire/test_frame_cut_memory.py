"""A frame cut when it cannot grow frees its buffer with its decoder.

When a large frame finds no room to grow (FrameDecoder._grow), the decoder
keeps the FrameBudgetExceeded in ``_failed``. That exception's traceback
holds the frames it passed through: _grow (whose local ``failure`` is the
exception itself: a reference cycle), buffer_updated, and the reader's frame
(``feed`` here, ``MessageStream._read_frame`` in the transport) whose local
``target`` is a view of the frame's body buffer. So the cut frame's buffer (up
to the frame's size, with every byte that arrived resident, one read past
what the budget allowed included) outlives the decoder until the cyclic
garbage collector runs, while the budget said it was given back (found by a
review; the readers now drop their view before the decoder can fail). Frames
refused at their header (the code before) never allocated one; a budget
meant to bound memory should not depend on when gc runs.
"""

from __future__ import annotations

import contextlib
import gc
import tracemalloc
import weakref

import pytest
import trio
import trio.testing

from p2p.wire.admission import FrameBudget
from p2p.wire.framing import FrameBudgetExceeded, FrameDecoder, encode_frame
from p2p.wire.transport import ConnectionFailure, MessageStream

K = 1024


def test_a_cut_frame_frees_its_buffer_with_its_decoder_without_the_cycle_collector() -> None:
    budget = FrameBudget(512 * K)
    frame = encode_frame(bytes(4 << 20))
    decoder = FrameDecoder(8 << 20, budget, source="10.0.0.1")
    assert decoder.feed(frame[: 64 * K]) == []  # admitted at its header: one step
    body = decoder._body
    assert body is not None
    owner = weakref.ref(body.obj)  # the array the body's buffer belongs to
    del body
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            decoder.feed(frame[64 * K : 1 << 20])  # a read far past what it may hold
        except FrameBudgetExceeded:
            pass
        else:
            raise AssertionError("the frame should have been cut")
        assert budget.held == 0  # the budget says the bytes were given back...
        del decoder
        # ...and so should the memory, as soon as nothing refers to the decoder
        assert owner() is None, "the cut frame's buffer outlives its decoder until gc runs"
    finally:
        if was_enabled:
            gc.enable()


async def test_a_stream_cut_mid_frame_frees_its_buffer_when_dropped(
        autojump_clock: trio.testing.MockClock) -> None:
    # the same through MessageStream._read_frame (its local ``target`` views the body)
    budget = FrameBudget(1 << 20)
    assert budget.reserve(1 << 20, take=(1 << 20) - 200 * K)  # others hold most of it
    near, far = trio.testing.memory_stream_pair()
    ms = MessageStream(near, max_frame_size=8 << 20, budget=budget, source="10.0.0.3")
    frame = encode_frame(bytes(4 << 20))
    was_enabled = gc.isenabled()
    gc.disable()
    tracemalloc.start()
    try:
        async with trio.open_nursery() as nursery:
            async def send_in_two_parts() -> None:
                await far.send_all(frame[: 100 * K])
                await trio.sleep(1)
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await far.send_all(frame[100 * K : 1 << 20])

            nursery.start_soon(send_in_two_parts)
            with pytest.raises(ConnectionFailure, match="node busy: frame of .* cut after"):
                await ms.receive_payload(10, 10)
            nursery.cancel_scope.cancel()
        await ms.aclose()
        del ms
        grown = tracemalloc.get_traced_memory()[0]  # since tracemalloc.start()
        assert grown < 2 << 20, (
            f"{grown >> 10} KiB still allocated once the stream is dropped: the cut "
            "frame's 4 MiB buffer stays until gc runs")
    finally:
        tracemalloc.stop()
        if was_enabled:
            gc.enable()
