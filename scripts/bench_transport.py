"""Throughput of the p2p transport against a raw trio socket, on loopback.

A ~1 MB model (float64 vector of 131072 values inside a gossip ``Push``) is sent
request/reply (the receiver answers with a ``PushAck``) between two
:class:`p2p.wire.transport.Transport` instances in one trio process, without a swarm
key and with sealing by ChaCha20-Poly1305 and AES-256-GCM. The baseline, measured
in the same run and interleaved with the others, sends the same number of bytes
over a raw trio TCP stream and waits for a 1-byte acknowledgement.

Also prints the in-process cost of the pieces (codec, AEAD) for context.

    .venv/bin/python scripts/bench_transport.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import trio

from p2p.wire import codec
from p2p.wire.framing import encode_frame
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.sealing import Opener, Sealer
from p2p.wire.transport import Transport

VECTOR_LENGTH = 131072
MODES = ("plain", "chacha20", "aes-gcm")


def _messages() -> tuple[type, type, str]:
    """Use gossip's Push/PushAck when available, else an equivalent local pair."""
    try:
        from p2p.runtime.protocol import register_node_messages

        register_node_messages()
        from gossip.messages import Push, PushAck

        return Push, PushAck, "gossip.messages.Push"
    except (codec.CodecError, ImportError):

        @dataclass(frozen=True)
        class BenchPush:
            model: bytes
            push_id: int
            values: np.ndarray
            weight: float

        @dataclass(frozen=True)
        class BenchAck:
            model: bytes
            push_id: int

        codec.register(BenchPush, "bench_push")
        codec.register(BenchAck, "bench_ack")
        return BenchPush, BenchAck, "local BenchPush"


PUSH, ACK, MESSAGE_SOURCE = _messages()
MODEL = b"m" * 32


def make_push(i: int) -> object:
    values = np.random.default_rng(i).standard_normal(VECTOR_LENGTH)
    return PUSH(MODEL, i, values, 0.5)  # type: ignore[call-arg]


async def _ack_handler(peer: PeerInfo, msg: object) -> object:
    return ACK(msg.model, msg.push_id)  # type: ignore[attr-defined,call-arg]


async def run_transport(mode: str, sends: int, push: object) -> float:
    """Seconds for ``sends`` request/replies of ``push`` over a fresh Transport pair."""
    key = None if mode == "plain" else os.urandom(32)
    cipher = "chacha20" if mode == "plain" else mode
    server = Transport(Identity.generate(), "127.0.0.1", 0, swarm_key=key, cipher=cipher)
    client = Transport(Identity.generate(), "127.0.0.1", 0, swarm_key=key, cipher=cipher)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, _ack_handler)
        await client.request(address, push)  # connect + handshake outside the timing
        start = time.perf_counter()
        for _ in range(sends):
            reply = await client.request(address, push)
            assert isinstance(reply, ACK), reply
        elapsed = time.perf_counter() - start
        await client.aclose()
        await server.aclose()
    return elapsed


async def run_raw(sends: int, payload: bytes) -> float:
    """Seconds for ``sends`` length-prefixed sends of ``payload`` + 1-byte ack, raw trio."""
    frame = encode_frame(payload)

    async def serve(stream: trio.SocketStream) -> None:
        buf = bytearray()
        while True:
            while len(buf) < 4:
                chunk = await stream.receive_some(256 * 1024)
                if not chunk:
                    return
                buf += chunk
            size = int.from_bytes(buf[:4], "big")
            while len(buf) < 4 + size:
                chunk = await stream.receive_some(256 * 1024)
                if not chunk:
                    return
                buf += chunk
            del buf[: 4 + size]
            await stream.send_all(b"\x01")

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(frame)
        await stream.receive_some(1)
        start = time.perf_counter()
        for _ in range(sends):
            await stream.send_all(frame)
            assert await stream.receive_some(1) == b"\x01"
        elapsed = time.perf_counter() - start
        await stream.aclose()
        nursery.cancel_scope.cancel()
    return elapsed


def micro(push: object, reps: int) -> dict[str, float]:
    """In-process MB/s of the codec and of each AEAD on the same payload."""
    payload = codec.encode(push)
    mb = len(payload) / 1e6
    out: dict[str, float] = {}
    t = time.perf_counter()
    for _ in range(reps):
        codec.encode(push)
    out["codec_encode_MBps"] = mb * reps / (time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(reps):
        codec.decode(payload)
    out["codec_decode_MBps"] = mb * reps / (time.perf_counter() - t)
    for cipher in ("chacha20", "aes-gcm"):
        key = os.urandom(32)
        sealer, opener = Sealer(key, cipher), Opener(key, cipher)
        sealed = [sealer.seal(payload) for _ in range(reps)]  # untimed: frames to open
        timing_sealer = Sealer(key, cipher)
        t = time.perf_counter()
        for _ in range(reps):
            timing_sealer.seal(payload)
        out[f"{cipher}_seal_MBps"] = mb * reps / (time.perf_counter() - t)
        t = time.perf_counter()
        for frame in sealed:
            opener.open(frame)
        out[f"{cipher}_open_MBps"] = mb * reps / (time.perf_counter() - t)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sends and repeats")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--sends", type=int, help="sends per measurement")
    parser.add_argument("--repeats", type=int, help="interleaved repeats (median reported)")
    args = parser.parse_args(argv)
    sends = args.sends or (20 if args.quick else 100)
    repeats = args.repeats or (3 if args.quick else 7)

    push = make_push(0)
    payload = codec.encode(push)
    mb = len(payload) / 1e6
    times: dict[str, list[float]] = {"raw": [], **{m: [] for m in MODES}}
    for _ in range(repeats):
        times["raw"].append(trio.run(run_raw, sends, payload))
        for mode in MODES:
            times[mode].append(trio.run(run_transport, mode, sends, push))

    def mbps(seconds: float) -> float:
        return mb * sends / seconds

    raw_runs = [mbps(t) for t in times["raw"]]
    raw = statistics.median(raw_runs)
    results: dict[str, object] = {
        "message": MESSAGE_SOURCE,
        "payload_bytes": len(payload),
        "sends": sends,
        "repeats": repeats,
        "load_average_1min": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "raw_MBps": raw,
        "raw_MBps_range": [min(raw_runs), max(raw_runs)],
        "modes": {},
    }
    print(f"payload: {MESSAGE_SOURCE}, {len(payload)} bytes; {sends} sends x {repeats} repeats")
    print(f"{'mode':<10} {'MB/s':>9} {'range':>19} {'ratio to raw':>13}")
    print(f"{'raw trio':<10} {raw:9.1f} {min(raw_runs):9.1f}-{max(raw_runs):<9.1f} {1.0:13.2f}")
    for mode in MODES:
        runs = [mbps(t) for t in times[mode]]
        med = statistics.median(runs)
        # ratio per repeat against the raw run of the same repeat, then the median
        ratios = [m / r for m, r in zip(runs, raw_runs, strict=True)]
        ratio = statistics.median(ratios)
        results["modes"][mode] = {  # type: ignore[index]
            "MBps": med,
            "MBps_range": [min(runs), max(runs)],
            "ratio_to_raw": ratio,
            "ratio_range": [min(ratios), max(ratios)],
        }
        print(f"{mode:<10} {med:9.1f} {min(runs):9.1f}-{max(runs):<9.1f} {ratio:13.2f}")
    parts = micro(push, 10 if args.quick else 50)
    results["in_process"] = parts
    print("in-process (MB/s): " + ", ".join(f"{k[:-5]} {v:.0f}" for k, v in parts.items()))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
