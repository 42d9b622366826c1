"""scripts/bench/transport.py: its size arguments and the per-size table's figures."""

from __future__ import annotations

import argparse
from types import ModuleType

import pytest
import trio
from lab.bench import transport as bench_transport

from p2p.wire import codec
from p2p.wire.identity import Identity
from p2p.wire.transport import Transport


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return bench_transport


def test_sizes_parse_in_binary_units(bench: ModuleType) -> None:
    assert bench.parse_size("64K") == 64 << 10
    assert bench.parse_size("1M") == 1 << 20
    assert bench.parse_size("8MiB") == 8 << 20
    assert bench.parse_size("1000") == 1000
    with pytest.raises(argparse.ArgumentTypeError, match="not a size: '12Q'"):
        bench.parse_size("12Q")


def test_ratios_at_one_size_come_from_all_modes(bench: ModuleType) -> None:
    figures = bench.ratios_at_size(64 << 10, sends=2, repeats=1)
    assert figures["payload_bytes"] > 64 << 10
    for key in ("raw_MBps", "plain_MBps", "plain_ratio_to_raw",
                *(f"{c}_ratio_to_ceiling" for c in bench.CIPHERS)):
        assert figures[key] > 0, key


async def test_baselines_ack_with_the_transports_reply_size(bench: ModuleType) -> None:
    # raw and floor send back as many bytes as the transport's reply frame, so
    # that every mode moves the same bytes both ways
    push = bench.make_push(1, 64 << 10)
    server = Transport(Identity.generate(), "127.0.0.1", 0)
    client = Transport(Identity.generate(), "127.0.0.1", 0)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(server.serve, bench._ack_handler)
        await client.request(address, push)  # the handshake's frames first
        before = server.bytes_sent.total
        await client.request(address, push)
        replied = server.bytes_sent.total - before
        await client.aclose()
        await server.aclose()
    assert len(bench.reply_frame(codec.encode(push))) == replied
    assert await bench.run_raw(2, codec.encode(push)) > 0
    assert await bench.run_floor(2, codec.encode(push)) > 0
