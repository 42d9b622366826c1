"""The node's peer book: sampled holders, their addresses, failures back to peer sampling."""

from __future__ import annotations

import random
from typing import cast

import pytest

from p2p.runtime.peer_book import MAX_TRACKED_PEERS, PeerBook, peer_label
from p2p.wire.handshake import PeerInfo
from peersampling import Descriptor, PeerSampler

MODEL = b"\x01" * 32
OTHER = b"\x02" * 32


def _descriptor(i: int, tags: frozenset[bytes] = frozenset({MODEL})) -> Descriptor:
    return Descriptor(bytes([i]) * 32, f"10.0.0.{i}:7000", 0, tags)


class FakeSampler:
    """The part of a PeerSampler the book uses; records what it was told."""

    def __init__(self, view: list[Descriptor]) -> None:
        self._view = view
        self.rng = random.Random(1)
        self.failures: list[str] = []
        self.distrusted: list[tuple[bytes, int]] = []
        self.samples = 0  # calls of sample(): the whole-view answer makes none

    def view(self) -> list[Descriptor]:
        return list(self._view)

    def model_view(self, model: bytes) -> list[Descriptor]:
        return [d for d in self._view if model in d.tags]

    def sample(self, model: bytes | None = None) -> Descriptor | None:
        self.samples += 1
        known = self._view if model is None else self.model_view(model)
        return self.rng.choice(known) if known else None

    def on_failure(self, address: str) -> None:
        self.failures.append(address)

    def distrust(self, node_id: bytes, periods: int) -> None:
        self.distrusted.append((node_id, periods))


def _started(view: list[Descriptor], period: float = 0.5) -> tuple[PeerBook, FakeSampler]:
    book = PeerBook(period)
    sampler = FakeSampler(view)
    book.start(cast(PeerSampler, sampler))
    return book, sampler


def test_before_the_node_listens_there_is_no_sampler_and_nothing_to_count() -> None:
    book = PeerBook(0.5)
    assert book.started is None
    with pytest.raises(RuntimeError, match="peer sampling has not started"):
        _ = book.sampler
    assert book.holder_count(MODEL) == 0
    book.distrust(b"\x09" * 32, 3.0)  # nothing to tell yet: no error


def test_addresses_keep_the_newest_peers_up_to_the_bound() -> None:
    book = PeerBook(0.5)
    table = book.addresses
    for i in range(MAX_TRACKED_PEERS + 5):
        book.remember(i.to_bytes(4, "big"), f"host{i}:1")
    book.remember((5).to_bytes(4, "big"), "moved:2")  # seen again: now the newest
    book.remember(b"new!", "new:3")
    assert len(book.addresses) == MAX_TRACKED_PEERS
    assert book.addresses is table  # the adapters read the same table as it changes
    assert book.address_of((5).to_bytes(4, "big")) == "moved:2"
    assert book.address_of((6).to_bytes(4, "big")) is None  # the oldest left first
    assert book.address_of((7).to_bytes(4, "big")) == "host7:1"


def test_holders_are_distinct_holders_of_the_model_and_their_addresses_remembered() -> None:
    view = [_descriptor(1), _descriptor(2), _descriptor(3), _descriptor(4, frozenset({OTHER}))]
    book, sampler = _started(view)
    everyone = book.holders(MODEL, 10)  # at least the whole model view: all of it
    assert sorted(everyone) == [bytes([i]) * 32 for i in (1, 2, 3)]
    assert sorted(book.holders(MODEL, 3)) == sorted(everyone)  # exactly the view's size
    assert sampler.samples == 0  # the whole view, read at once, not sampled
    assert book.address_of(bytes([2]) * 32) == "10.0.0.2:7000"
    assert book.address_of(bytes([4]) * 32) is None  # holds another model only
    two = book.holders(MODEL, 2)
    assert len(two) == len(set(two)) == 2 and set(two) <= set(everyone)
    assert sampler.samples > 0  # fewer than the view: sampled
    assert book.holder_count(MODEL) == 3 and book.holder_count(OTHER) == 1


def test_the_whole_view_comes_in_random_order() -> None:
    view = [_descriptor(i) for i in range(1, 9)]
    book, _ = _started(view)
    orders = {tuple(book.holders(MODEL, 8)) for _ in range(5)}
    assert len(orders) > 1  # 8 holders: five shuffles agreeing by chance is (1/8!)^4
    assert all(sorted(o) == sorted(d.node_id for d in view) for o in orders)


def test_failures_go_back_to_peer_sampling() -> None:
    book, sampler = _started([_descriptor(1)], period=0.5)
    book.on_unreachable("10.0.0.1:7000")
    book.distrust(b"\x01" * 32, 1.2)  # 1.2 s of 0.5 s periods: 3 periods
    book.distrust(b"\x01" * 32, 0.1)  # at least one period
    assert sampler.failures == ["10.0.0.1:7000"]
    assert sampler.distrusted == [(b"\x01" * 32, 3), (b"\x01" * 32, 1)]


def test_a_peer_is_named_by_its_id_and_address_in_log_lines() -> None:
    peer = PeerInfo(bytes.fromhex("a1b2c3d4") + bytes(28), "10.0.0.7:7000", frozenset())
    assert peer_label(peer) == "a1b2c3d4@10.0.0.7:7000"
