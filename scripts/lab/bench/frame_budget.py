"""Squatting the frame budget by reconnecting: what honest pushes get, and at what cost.

A sans-IO simulation (no sockets, no handshakes, virtual time in ticks) of one
node's :class:`p2p.wire.admission.FrameBudget` (the default 16 MiB) fed by
:class:`p2p.wire.framing.FrameDecoder` s:

- squatters at ``--sources`` addresses, ``--sessions`` sessions each, announce
  1 MiB frames, send ``burst`` bytes of each at once, and hang up just before
  the pace rule would cut the frame (``FRAME_PACE_GRACE`` + burst at the
  floor rate, less 0.1 s), then reconnect ``--reconnect`` s later and start
  over (a refused one tries again after 0.5 s);
- an honest source pushes a ``--push``-byte frame every 5 s, arriving whole
  within a tick (link speed).

Printed per burst size, for the budget held in steps (this code) and for a
budget that reserves each frame's whole size at its header (the code before,
``FrameBudget(step=limit)``): honest pushes that arrived, the squatters' bytes
per second (what holding the budget cost them; handshakes not counted), and
the bytes held on average and at most. A refused squatter is charged its
header only (it would send the rest once admitted).

Then what holding the budget in steps costs an honest receiver: the reads
(``os.readv`` calls) a :class:`p2p.wire.transport.MessageStream` makes per
1 MiB and 8 MiB frame sent back to back over loopback TCP, in steps and
with whole reservations (reads are not held back at what a frame holds, so
the two should differ by noise only).

    .venv/bin/python scripts/bench/frame_budget.py [--sources 8] [--sessions 8]
        [--seconds 300] [--push 200000] [--reconnect 0.1] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import struct
from dataclasses import dataclass
from pathlib import Path

import trio

import p2p.wire.transport as transport_module
from p2p.wire.admission import (
    DEFAULT_FRAME_BUDGET,
    DEFAULT_MIN_FRAME_RATE,
    FRAME_PACE_GRACE,
    FrameBudget,
)
from p2p.wire.framing import FrameBudgetExceeded, FrameDecoder, encode_frame

FRAME = 1 << 20
TICK = 0.1


@dataclass
class _Squatter:
    source: str
    decoder: FrameDecoder | None = None
    since: float = 0.0
    next_try: float = 0.0


def run(*, stepped: bool, burst: int, sources: int, sessions: int, seconds: float,
        push: int, reconnect: float, seed: int = 1) -> dict[str, float]:
    """One simulated run; its figures."""
    limit = DEFAULT_FRAME_BUDGET
    budget = FrameBudget(limit) if stepped else FrameBudget(limit, step=limit)
    rng = random.Random(seed)
    hold = FRAME_PACE_GRACE + burst / DEFAULT_MIN_FRAME_RATE - 0.1
    squatters = [_Squatter(f"198.51.100.{s + 1}", next_try=rng.uniform(0, hold))
                 for s in range(sources) for _ in range(sessions)]
    announce = struct.pack(">I", FRAME) + bytes(burst)
    frame = encode_frame(bytes(push))
    sent = pushes = arrived = 0
    held_sum = 0.0
    steps = int(seconds / TICK)
    for step in range(steps):
        now = step * TICK
        for sq in squatters:
            if sq.decoder is not None and now - sq.since >= hold:
                sq.decoder.release()
                sq.decoder, sq.next_try = None, now + reconnect
        for sq in squatters:
            if sq.decoder is None and now >= sq.next_try:
                decoder = FrameDecoder(FRAME, budget, source=sq.source)
                try:
                    decoder.feed(announce)
                except FrameBudgetExceeded:
                    sent += 4  # a header: the burst waits until the frame is admitted
                    sq.next_try = now + 0.5
                    continue
                sent += len(announce)
                sq.decoder, sq.since = decoder, now
        held_sum += budget.held
        if step % round(5.0 / TICK) == round(2.5 / TICK):
            pushes += 1
            honest = FrameDecoder(FRAME, budget, source="203.0.113.9")
            try:
                for at in range(0, len(frame), 64 * 1024):
                    honest.feed(frame[at : at + 64 * 1024])
            except FrameBudgetExceeded:
                continue
            arrived += 1
    for sq in squatters:
        if sq.decoder is not None:
            sq.decoder.release()
    return {
        "honest_arrived": arrived,
        "honest_pushes": pushes,
        "squatter_KiBps": sent / seconds / 1024,
        "held_mean_MiB": held_sum / steps / (1 << 20),
        "held_peak_MiB": budget.peak / (1 << 20),
    }


def reads_per_frame(size: int, *, stepped: bool, frames: int = 40) -> float:
    """``os.readv`` calls a MessageStream makes per ``size``-byte frame, frames
    sent back to back over loopback TCP (the first frame not counted)."""
    calls = 0
    real = os.readv

    def counting(fd: int, buffers: list[memoryview]) -> int:
        nonlocal calls
        calls += 1
        return real(fd, buffers)

    async def run_frames() -> None:
        nonlocal calls
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        frame = encode_frame(bytes(size))
        limit = 64 << 20
        budget = FrameBudget(limit) if stepped else FrameBudget(limit, step=limit)
        async with trio.open_nursery() as nursery:
            async def send() -> None:
                stream = await listeners[0].accept()
                for _ in range(frames):
                    await stream.send_all(frame)

            nursery.start_soon(send)
            client = await trio.open_tcp_stream("127.0.0.1", port)
            stream = transport_module.MessageStream(client, max_frame_size=16 << 20,
                                                    budget=budget)
            await stream.receive_payload(10, 10)
            calls = 0
            for _ in range(frames - 1):
                await stream.receive_payload(10, 10)
            await stream.aclose()
            nursery.cancel_scope.cancel()

    transport_module.os.readv = counting  # type: ignore[attr-defined]
    try:
        trio.run(run_frames)
    finally:
        transport_module.os.readv = real  # type: ignore[attr-defined]
    return calls / (frames - 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", type=int, default=8)
    parser.add_argument("--sessions", type=int, default=8, help="per source")
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--push", type=int, default=200_000, help="honest push, bytes")
    parser.add_argument("--reconnect", type=float, default=0.1,
                        help="seconds from hanging up to announcing again")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    rows = []
    print(f"{args.sources} sources x {args.sessions} sessions announcing 1 MiB frames; "
          f"honest {args.push} B push every 5 s; {args.seconds:g} s; budget "
          f"{DEFAULT_FRAME_BUDGET >> 20} MiB")
    print(f"{'reservation':<12} {'burst':>8} {'honest':>9} {'squat KiB/s':>12} "
          f"{'held mean':>10} {'held peak':>10}")
    for burst in (8, 64 * 1024, 128 * 1024, 192 * 1024, 256 * 1024, 512 * 1024):
        for stepped in (False, True):
            fig = run(stepped=stepped, burst=burst, sources=args.sources,
                      sessions=args.sessions, seconds=args.seconds, push=args.push,
                      reconnect=args.reconnect)
            rows.append({"stepped": stepped, "burst": burst, **fig})
            print(f"{'in steps' if stepped else 'whole':<12} {burst:>8} "
                  f"{fig['honest_arrived']:>4}/{fig['honest_pushes']:<4} "
                  f"{fig['squatter_KiBps']:>12.1f} {fig['held_mean_MiB']:>8.2f} M "
                  f"{fig['held_peak_MiB']:>8.2f} M")
    print("reads per frame over loopback TCP (os.readv calls, frames back to back):")
    for size in (1 << 20, 8 << 20):
        whole = reads_per_frame(size, stepped=False)
        steps = reads_per_frame(size, stepped=True)
        rows.append({"frame_bytes": size, "reads_whole": whole, "reads_in_steps": steps})
        print(f"  {size >> 20} MiB: {whole:.1f} reserving whole frames, {steps:.1f} in steps")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
