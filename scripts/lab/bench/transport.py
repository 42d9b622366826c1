"""Throughput of the p2p transport against a raw trio socket and the ciphers' ceiling.

A ~1 MB gossip ``Push`` (262144 float32 values, the wire's default encoding) is
sent request/reply (the receiver answers with a ``PushAck``) between two
:class:`p2p.wire.transport.Transport` instances in one trio process on loopback:
without a swarm key (``plain``) and sealed with ChaCha20-Poly1305 and AES-256-GCM.

Every repeat measures, one after the other (so that load on a shared machine
hits all of them alike):

- ``raw``: the same frame (4-byte length + the push's payload) over a raw trio
  ``SocketStream``: ``send_all`` out, an ack of the transport's reply size
  back (the bytes of the framed ``PushAck``, ~100). The receiver reads with
  ``receive_some`` up to the end of the frame and drops what it reads: it
  neither assembles the frame in one buffer nor decodes it, which the
  transport must do (and trio's stream yields after every call: ~5 yields
  per exchange against the transport's 2).
  Its sockets get the transport's socket option (``TCP_NOTSENT_LOWAT``
  lifted: trio's 16 KiB default makes a 1 MB write take several calls and
  the throughput swing with the congestion window). This is the baseline of
  the targets. ``trio dflt`` is the same with trio's default (the baseline of
  figures measured before the transport lifted the limit).
- ``floor``: the same exchange with the calls the transport itself makes
  (nonblocking ``writev``/``readv`` on the socket into a buffer reused for every
  frame, waiting on trio only when the socket is not ready): the bound a
  transport in this process cannot pass. Trio's stream costs ``raw`` its own
  overhead (a scheduler round trip per call, a fresh ``bytes`` per receive),
  so the transport may pass ``raw``, never ``floor``.
- each cipher alone, in process, sealing and opening a frame of the push's size
  into preallocated buffers (the cheapest way to call it);
- each transport mode.

A sealed mode's serial ceiling is what the socket and the cipher allow when
sealing, sending and opening run one after the other:
``1 / (1/raw + 1/seal + 1/open)``. Ratios are taken per repeat against the
figures of the same repeat, then the median is reported. Targets (issue 13):
plain >= 0.8x raw; each sealed mode >= 0.8x its serial ceiling, judged on the
main table (``--size``, 1 MiB of vector data by default).

A second table gives the same ratios at several vector sizes (``--sizes``,
64 KiB, 1 MiB and 8 MiB by default; fewer repeats, each measurement moving
the same number of bytes): the transport's cost per exchange is mostly fixed
(Python work), so the ratios fall with the size of a push and rise with it.

Also printed, for context: the codec's time per push in process, and whether
the ciphers release the GIL (how long a Python thread is held up during one
large seal). They do, but a frame is one AEAD message: it cannot go out before
its seal completes nor be opened before it has all arrived, and request/reply
keeps one frame in flight, so a worker thread would have nothing to overlap
with here; the transport seals inline.

    .venv/bin/python scripts/bench/transport.py [--quick] [--clock cpu] [--json PATH]
        [--size 1M] [--sizes 64K,1M,8M|none]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import statistics
import threading
import time
from functools import partial
from pathlib import Path

# OpenBLAS's worker threads spin for a while after any BLAS call numpy makes
# (cachegrind caught them during the exchanges): on a shared 2-core machine
# they take CPU from the exchanges and count in --clock cpu. One thread: none.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import trio  # noqa: E402
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305  # noqa: E402

from p2p.runtime.protocol import register_node_messages  # noqa: E402
from p2p.wire import codec  # noqa: E402
from p2p.wire.framing import encode_frame  # noqa: E402
from p2p.wire.handshake import Handshake, PeerInfo  # noqa: E402
from p2p.wire.identity import Identity  # noqa: E402
from p2p.wire.messages import Ping  # noqa: E402
from p2p.wire.sealing import CIPHERS, TAG_SIZE  # noqa: E402
from p2p.wire.transport import Transport  # noqa: E402

register_node_messages()
from gossip.messages import Push, PushAck  # noqa: E402  (registered just above)

PAYLOAD_TARGET = 1 << 20  # bytes of vector data per push
MODES = ("plain", *CIPHERS)
TARGET_RATIO = 0.8
MODEL = b"m" * 32
_clock = time.perf_counter
AAD = b"p2p-gossip frame v1"  # as the transport seals; any 19 bytes cost the same


def make_push(i: int, nbytes: int = PAYLOAD_TARGET) -> Push:
    """A push of ``nbytes`` of vector data (~1 MB by default): float32 values
    when pushes carry encoded vectors."""
    rng = np.random.default_rng(i)
    if _carries_encoded_vector():
        from gossip.compression import encode as encode_vector

        return Push(MODEL, i, encode_vector(rng.standard_normal(nbytes // 4), "f32"), 0.5)
    return Push(MODEL, i, rng.standard_normal(nbytes // 8), 0.5)  # type: ignore[arg-type]


def _carries_encoded_vector() -> bool:
    annotation = {f.name: f.type for f in dataclasses.fields(Push)}["values"]
    return "EncodedVector" in str(annotation)


async def _ack_handler(peer: PeerInfo, msg: object) -> object:
    assert isinstance(msg, Push)
    return PushAck(msg.model, msg.push_id)


async def run_transport(mode: str, sends: int, push: Push) -> float:
    """Seconds for ``sends`` request/replies of ``push`` over a fresh Transport pair."""
    key = None if mode == "plain" else os.urandom(32)
    cipher = "chacha20" if mode == "plain" else mode
    server = Transport(Identity.generate(), "127.0.0.1", 0, swarm_key=key, cipher=cipher)
    client = Transport(Identity.generate(), "127.0.0.1", 0, swarm_key=key, cipher=cipher)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, _ack_handler)
        await client.request(address, push)  # connect + handshake outside the timing
        start = _clock()
        for _ in range(sends):
            reply = await client.request(address, push)
            assert isinstance(reply, PushAck), reply
        elapsed = _clock() - start
        await client.aclose()
        await server.aclose()
    return elapsed


def handshake_seconds(swarm_key: bytes | None, reps: int) -> float:
    """Seconds for one handshake, both ends run in this process (sans-IO: the
    handshake's own cost, no socket)."""
    ids = Identity.generate(), Identity.generate()
    start = _clock()
    for _ in range(reps):
        a = Handshake(ids[0], initiator=True, listen_address="127.0.0.1:1", swarm_key=swarm_key)
        b = Handshake(ids[1], initiator=False, listen_address="127.0.0.1:2", swarm_key=swarm_key)
        to_b, to_a = a.start(), b.start()
        while to_a or to_b:
            to_a, to_b = ([o for p in to_b for o in b.receive(p)],
                          [o for p in to_a for o in a.receive(p)])
        assert a.done and b.done
    return (_clock() - start) / reps


async def connect_seconds(swarm_key: bytes | None, reps: int) -> float:
    """Seconds per fresh connection over loopback: connect, handshake, one ping."""
    server = Transport(Identity.generate(), "127.0.0.1", 0, swarm_key=swarm_key)
    client_id = Identity.generate()
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, _ack_handler)
        start = _clock()
        for _ in range(reps):
            client = Transport(client_id, "127.0.0.1", 0, swarm_key=swarm_key)
            await client.request(address, Ping(1))
            await client.aclose()
        elapsed = _clock() - start
        await server.aclose()
    return elapsed / reps


def lift_send_limit(stream: trio.SocketStream) -> None:
    """The transport's socket option: no cap on bytes queued but not yet sent."""
    option = getattr(socket, "TCP_NOTSENT_LOWAT", None)
    if option is not None:
        stream.setsockopt(socket.IPPROTO_TCP, option, 0)


def reply_frame(payload: bytes) -> bytes:
    """The frame the transport answers the push of ``payload`` with (a framed
    ``PushAck``): the baselines send an ack of its size, so that every mode
    moves the same bytes both ways."""
    push = codec.decode(payload)
    assert isinstance(push, Push)
    return encode_frame(codec.encode(PushAck(push.model, push.push_id)))


async def _receive_exactly(stream: trio.SocketStream, size: int) -> bool:
    got = 0
    while got < size:
        chunk = await stream.receive_some(size - got)
        if not chunk:
            return False
        got += len(chunk)
    return True


async def run_raw(sends: int, payload: bytes, lift: bool = True) -> float:
    """Seconds for ``sends`` frames of ``payload``, each answered by an ack of
    the transport's reply size, over a trio SocketStream (``lift``: with the
    transport's socket option, else trio's)."""
    frame = encode_frame(payload)
    size = len(frame)
    ack = reply_frame(payload)

    async def serve(stream: trio.SocketStream) -> None:
        if lift:
            lift_send_limit(stream)
        while await _receive_exactly(stream, size):
            await stream.send_all(ack)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        if lift:
            lift_send_limit(stream)
        await stream.send_all(frame)
        await _receive_exactly(stream, len(ack))
        start = _clock()
        for _ in range(sends):
            await stream.send_all(frame)
            assert await _receive_exactly(stream, len(ack))
        elapsed = _clock() - start
        await stream.aclose()
        nursery.cancel_scope.cancel()
    return elapsed


async def _write_all(fd: int, data: memoryview) -> None:
    while data:
        try:
            data = data[os.writev(fd, [data]) :]
        except BlockingIOError:
            await trio.lowlevel.wait_writable(fd)


async def _read_into(fd: int, buffer: memoryview) -> bool:
    got = 0
    while got < len(buffer):
        try:
            received = os.readv(fd, [buffer[got:]])
        except BlockingIOError:
            await trio.lowlevel.wait_readable(fd)
            continue
        if not received:
            return False
        got += received
    return True


async def run_floor(sends: int, payload: bytes) -> float:
    """Seconds for the exchange of :func:`run_raw` with direct nonblocking socket
    calls, each frame read into one buffer reused for all (the socket's floor)."""
    frame = memoryview(encode_frame(payload))
    ack = memoryview(reply_frame(payload))

    async def serve(stream: trio.SocketStream) -> None:
        lift_send_limit(stream)
        fd = stream.socket.fileno()
        buffer = memoryview(bytearray(len(frame)))
        while await _read_into(fd, buffer):
            await _write_all(fd, ack)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        lift_send_limit(stream)
        fd = stream.socket.fileno()
        reply = memoryview(bytearray(len(ack)))
        await _write_all(fd, frame)
        await _read_into(fd, reply)
        start = _clock()
        for _ in range(sends):
            await _write_all(fd, frame)
            assert await _read_into(fd, reply) and reply == ack
        elapsed = _clock() - start
        await stream.aclose()
        nursery.cancel_scope.cancel()
    return elapsed


def cipher_seconds(cipher: str, payload: bytes, reps: int) -> tuple[float, float]:
    """Seconds for the cipher alone to seal and to open ``payload`` ``reps`` times.

    Calls the AEAD directly, into preallocated buffers: no allocation or
    framing, the least any transport must spend on it.
    """
    aead = _aead(cipher)
    nonces = [i.to_bytes(12, "big") for i in range(reps)]
    sealed = bytearray(len(payload) + TAG_SIZE)
    frames = []
    for nonce in nonces:  # untimed: frames to open
        aead.encrypt_into(nonce, payload, AAD, sealed)
        frames.append(bytes(sealed))
    start = _clock()
    for nonce in nonces:
        aead.encrypt_into(nonce, payload, AAD, sealed)
    seal = _clock() - start
    opened = bytearray(len(payload))
    start = _clock()
    for nonce, frame in zip(nonces, frames, strict=True):
        aead.decrypt_into(nonce, frame, AAD, opened)
    return seal, _clock() - start


def codec_figures(push: Push, reps: int) -> dict[str, float]:
    """In-process microseconds per push of the codec's hot path (for context):
    ``encode_parts`` as the sender calls it, ``decode`` of a read-only view as
    the receiver does."""
    payload = memoryview(codec.encode(push)).toreadonly()
    start = _clock()
    for _ in range(reps):
        codec.encode_parts(push)
    encode = (_clock() - start) / reps
    start = _clock()
    for _ in range(reps):
        codec.decode(payload)
    return {"codec_encode_us": encode * 1e6, "codec_decode_us": (_clock() - start) / reps * 1e6}


def gil_pauses(cipher: str, megabytes: int = 32) -> tuple[float, float]:
    """(seconds of one seal of ``megabytes`` MB, longest pause of a Python loop
    running meanwhile in another thread): a pause as long as the seal means the
    cipher holds the GIL, short pauses that it releases it."""
    aead = _aead(cipher)
    data = bytes(megabytes << 20)
    out = bytearray(len(data) + TAG_SIZE)
    start = time.perf_counter()
    aead.encrypt_into(bytes(12), data, AAD, out)
    alone = time.perf_counter() - start
    done = threading.Event()

    def seal() -> None:
        aead.encrypt_into(b"\x01" * 12, data, AAD, out)
        done.set()

    stamps = [time.perf_counter()]
    worker = threading.Thread(target=seal)
    worker.start()
    while not done.is_set():
        stamps.append(time.perf_counter())
    worker.join()
    return alone, max(b - a for a, b in zip(stamps, stamps[1:], strict=False))


def _aead(cipher: str) -> ChaCha20Poly1305 | AESGCM:
    key = os.urandom(32)
    return ChaCha20Poly1305(key) if cipher == "chacha20" else AESGCM(key)


def _serial_ceiling(raw: float, seal: float, opening: float) -> float:
    return 1.0 / (1.0 / raw + 1.0 / seal + 1.0 / opening)


def _span(values: list[float]) -> str:
    return f"{min(values):.0f}-{max(values):.0f}"


def parse_size(text: str) -> int:
    """``"64K"``, ``"1M"``, ``"8M"`` or a plain byte count -> bytes (KiB, MiB)."""
    units = {"K": 1 << 10, "M": 1 << 20}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 64K, 1M, 8M)") from None


def ratios_at_size(nbytes: int, sends: int, repeats: int) -> dict[str, float]:
    """Median per-repeat ratios at one push size: plain to raw, each cipher to
    its serial ceiling (repeats interleaved as in the main table)."""
    push = make_push(0, nbytes)
    payload = codec.encode(push)
    mb = len(payload) / 1e6
    runs: dict[str, list[float]] = {m: [] for m in ("raw", *MODES)}
    ceilings: dict[str, list[float]] = {c: [] for c in CIPHERS}
    for _ in range(repeats):
        raw = mb * sends / trio.run(run_raw, sends, payload)
        runs["raw"].append(raw)
        for cipher in CIPHERS:
            seal, opening = cipher_seconds(cipher, payload, sends)
            ceilings[cipher].append(_serial_ceiling(raw, mb * sends / seal, mb * sends / opening))
        for mode in MODES:
            runs[mode].append(mb * sends / trio.run(run_transport, mode, sends, push))
    result = {"payload_bytes": float(len(payload)), "sends": float(sends),
              "raw_MBps": statistics.median(runs["raw"]),
              "plain_MBps": statistics.median(runs["plain"]),
              "plain_ratio_to_raw": statistics.median(
                  m / r for m, r in zip(runs["plain"], runs["raw"], strict=True))}
    for cipher in CIPHERS:
        result[f"{cipher}_MBps"] = statistics.median(runs[cipher])
        result[f"{cipher}_ratio_to_ceiling"] = statistics.median(
            m / c for m, c in zip(runs[cipher], ceilings[cipher], strict=True))
    return result


def _size_label(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sends and repeats")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--sends", type=int, help="sends per measurement")
    parser.add_argument("--repeats", type=int, help="interleaved repeats (median reported)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="time measured: wall clock, or this process's CPU time (steadier "
                             "on a loaded machine; hides any gain from parallel threads)")
    parser.add_argument("--size", type=parse_size, default=PAYLOAD_TARGET,
                        help="vector bytes per push of the main table (default 1M)")
    parser.add_argument("--sizes", default="64K,1M,8M",
                        help="vector sizes of the per-size table (comma-separated, e.g. "
                             "64K,1M,8M; 'none' skips it); the targets are judged on the "
                             "main table (--size)")
    args = parser.parse_args(argv)
    try:
        sizes = [] if args.sizes.strip().lower() == "none" else \
            [parse_size(part) for part in args.sizes.split(",") if part.strip()]
    except argparse.ArgumentTypeError as exc:
        parser.error(f"--sizes: {exc}")
    global _clock
    _clock = time.process_time if args.clock == "cpu" else time.perf_counter
    sends = args.sends or (20 if args.quick else 100)
    repeats = args.repeats or (3 if args.quick else 7)

    load_before = os.getloadavg()[0]
    push = make_push(0, args.size)
    payload = codec.encode(push)
    mb = len(payload) / 1e6
    raw_runs: list[float] = []
    default_runs: list[float] = []
    floor_runs: list[float] = []
    mode_runs: dict[str, list[float]] = {m: [] for m in MODES}
    seal_runs: dict[str, list[float]] = {c: [] for c in CIPHERS}
    open_runs: dict[str, list[float]] = {c: [] for c in CIPHERS}
    for _ in range(repeats):
        raw_runs.append(mb * sends / trio.run(run_raw, sends, payload))
        default_runs.append(mb * sends / trio.run(run_raw, sends, payload, False))
        floor_runs.append(mb * sends / trio.run(run_floor, sends, payload))
        for cipher in CIPHERS:
            seal, opening = cipher_seconds(cipher, payload, sends)
            seal_runs[cipher].append(mb * sends / seal)
            open_runs[cipher].append(mb * sends / opening)
        for mode in MODES:
            mode_runs[mode].append(mb * sends / trio.run(run_transport, mode, sends, push))

    raw = statistics.median(raw_runs)
    print(f"payload: {type(push).__name__} of {len(payload)} bytes; "
          f"{sends} sends x {repeats} repeats; load {load_before:.1f} -> {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs; {args.clock} clock; MB/s medians (min-max)")
    print(f"{'mode':<9} {'MB/s':>7} {'range':>11} {'seal':>6} {'open':>6} {'ceiling':>8} "
          f"{'x raw':>6} {'x dflt':>6} {'x floor':>7} {'x ceiling':>9}  target")
    print(f"{'raw trio':<9} {raw:7.0f} {_span(raw_runs):>11}")
    for label, runs in (("trio dflt", default_runs), ("floor", floor_runs)):
        to_raw = statistics.median(f / r for f, r in zip(runs, raw_runs, strict=True))
        print(f"{label:<9} {statistics.median(runs):7.0f} {_span(runs):>11} "
              f"{'':>6} {'':>6} {'':>8} {to_raw:6.2f}")
    modes: dict[str, dict[str, object]] = {}
    failed = []
    for mode in MODES:
        runs = mode_runs[mode]
        if mode == "plain":
            ceilings = list(raw_runs)
            seals = opens = [float("inf")] * repeats
        else:
            seals, opens = seal_runs[mode], open_runs[mode]
            ceilings = [_serial_ceiling(r, s, o)
                        for r, s, o in zip(raw_runs, seals, opens, strict=True)]
        to_raw = statistics.median(m / r for m, r in zip(runs, raw_runs, strict=True))
        to_floor = statistics.median(m / f for m, f in zip(runs, floor_runs, strict=True))
        to_default = statistics.median(m / d for m, d in zip(runs, default_runs, strict=True))
        to_ceiling = statistics.median(m / c for m, c in zip(runs, ceilings, strict=True))
        met = to_ceiling >= TARGET_RATIO
        if not met:
            failed.append(mode)
        target = f">= {TARGET_RATIO}x {'raw' if mode == 'plain' else 'ceiling'}"
        seal_text = "-" if mode == "plain" else f"{statistics.median(seals):.0f}"
        open_text = "-" if mode == "plain" else f"{statistics.median(opens):.0f}"
        print(f"{mode:<9} {statistics.median(runs):7.0f} {_span(runs):>11} {seal_text:>6} "
              f"{open_text:>6} {statistics.median(ceilings):8.0f} {to_raw:6.2f} "
              f"{to_default:6.2f} {to_floor:7.2f} {to_ceiling:9.2f}  "
              f"{target}: {'met' if met else 'NOT met'}")
        modes[mode] = {
            "MBps": statistics.median(runs),
            "MBps_range": [min(runs), max(runs)],
            "ratio_to_raw": to_raw,
            "ratio_to_floor": to_floor,
            "ratio_to_trio_default": to_default,
            "serial_ceiling_MBps": statistics.median(ceilings),
            "ratio_to_ceiling": to_ceiling,
            "target_met": met,
        }
        if mode != "plain":
            modes[mode]["seal_MBps"] = statistics.median(seals)
            modes[mode]["open_MBps"] = statistics.median(opens)
    by_size = {}
    if sizes:
        # Same bytes per measurement at every size (at least 10 sends): small
        # frames show the fixed cost per exchange, large ones the per-byte cost.
        volume = (20 if args.quick else 100) * PAYLOAD_TARGET
        size_repeats = 3 if args.quick else max(3, repeats // 2)
        print(f"by vector size (sends moving {volume >> 20} MiB per measurement, "
              f"{size_repeats} interleaved repeats, medians):")
        print(f"{'size':>8} {'sends':>6} {'raw MB/s':>9} {'plain x raw':>12} "
              + " ".join(f"{c + ' x ceiling':>18}" for c in CIPHERS))
        for nbytes in sizes:
            figures = ratios_at_size(nbytes, max(10, volume // nbytes), size_repeats)
            by_size[_size_label(nbytes)] = figures
            print(f"{_size_label(nbytes):>8} {figures['sends']:6.0f} {figures['raw_MBps']:9.0f} "
                  f"{figures['plain_ratio_to_raw']:12.2f} "
                  + " ".join(f"{figures[c + '_ratio_to_ceiling']:18.2f}" for c in CIPHERS))
    parts = codec_figures(push, 20 if args.quick else 100)
    print(f"codec in process, per push: encode_parts {parts['codec_encode_us']:.0f} us, "
          f"decode {parts['codec_decode_us']:.0f} us")
    key = os.urandom(32)
    hs_reps = 20 if args.quick else 100
    handshake = {
        "no_key_us": handshake_seconds(None, hs_reps) * 1e6,
        "swarm_key_us": handshake_seconds(key, hs_reps) * 1e6,
        "connect_no_key_us": trio.run(connect_seconds, None, hs_reps) * 1e6,
        "connect_swarm_key_us": trio.run(connect_seconds, key, hs_reps) * 1e6,
    }
    print(f"handshake, both ends in process: {handshake['no_key_us']:.0f} us without a key, "
          f"{handshake['swarm_key_us']:.0f} us with one; a fresh loopback connection "
          f"(connect, handshake, ping): {handshake['connect_no_key_us']:.0f} us / "
          f"{handshake['connect_swarm_key_us']:.0f} us")
    gil = {cipher: gil_pauses(cipher) for cipher in CIPHERS}
    for cipher, (alone, pause) in gil.items():
        verdict = "holds" if pause >= 0.8 * alone else "releases"
        print(f"{cipher} {verdict} the GIL: a Python thread is held up for at most "
              f"{pause * 1e3:.0f} ms during a 32 MB seal of {alone * 1e3:.0f} ms")
    if args.json:
        results = {
            "message": type(push).__name__,
            "payload_bytes": len(payload),
            "sends": sends,
            "repeats": repeats,
            "load_average_1min": os.getloadavg()[0],
            "load_average_1min_before": load_before,
            "cpus": os.cpu_count(),
            "raw_MBps": raw,
            "raw_MBps_range": [min(raw_runs), max(raw_runs)],
            "trio_default_MBps": statistics.median(default_runs),
            "floor_MBps": statistics.median(floor_runs),
            "floor_MBps_range": [min(floor_runs), max(floor_runs)],
            "gil_seal_and_longest_pause_s": gil,
            "modes": modes,
            "codec": parts,
            "handshake": handshake,
            "by_vector_size": by_size,
            "targets_met": not failed,
        }
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
