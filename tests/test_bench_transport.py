"""scripts/bench_transport.py: its size arguments and the per-size table's figures."""

from __future__ import annotations

import argparse
from types import ModuleType

import pytest

from p2p.testing import load_script


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_script("bench_transport", monkeypatch)


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
