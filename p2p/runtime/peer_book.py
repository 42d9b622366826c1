"""The peers a node's gossip talks to: sampled holders, where they listen, what failed.

Peer sampling hands out descriptors; gossip, masking, grouping and strategies
address peers by node id. :class:`PeerBook` links the two: it holds the node's
:class:`~peersampling.PeerSampler` once the node listens (before that
:attr:`PeerBook.sampler` raises), samples holders of a model and remembers their
addresses (:meth:`PeerBook.holders`, bounded by :data:`MAX_TRACKED_PEERS`;
:attr:`PeerBook.addresses` is read live by the request adapters), and passes
what gossip learnt back to peer sampling (:meth:`PeerBook.on_unreachable`,
:meth:`PeerBook.distrust`).

See docs/design/peer-sampling.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from p2p.wire.handshake import PeerInfo
    from peersampling import Descriptor, PeerSampler

__all__ = ["MAX_TRACKED_PEERS", "PeerBook", "peer_label"]

MAX_TRACKED_PEERS = 1024  # peers whose address is remembered (from sampled descriptors)

K = TypeVar("K")
V = TypeVar("V")


class PeerBook:
    """A node's sampler and the addresses of the peers it handed out (see the module
    docstring). ``shuffle_period``: peer sampling's period, the unit of a distrust."""

    def __init__(self, shuffle_period: float) -> None:
        self._period = shuffle_period
        self._sampler: PeerSampler | None = None
        self._addresses: dict[bytes, str] = {}  # node id -> address, from sampled descriptors

    # ------------------------------------------------------------------ the sampler

    def start(self, sampler: PeerSampler) -> None:
        """The node listens: ``sampler`` is its peer sampler from now on."""
        self._sampler = sampler

    @property
    def sampler(self) -> PeerSampler:
        """The peer sampler; it starts when the node listens (its descriptor needs the address)."""
        if self._sampler is None:
            raise RuntimeError("peer sampling has not started: the node is not listening yet")
        return self._sampler

    @property
    def started(self) -> PeerSampler | None:
        """The peer sampler, or None before the node listens."""
        return self._sampler

    # ------------------------------------------------------------------ addresses

    @property
    def addresses(self) -> Mapping[bytes, str]:
        """Node id -> address of the peers remembered (the same table as it changes)."""
        return self._addresses

    def remember(self, peer: bytes, address: str) -> None:
        """Remember where ``peer`` listens (from a sampled descriptor)."""
        _remember(self._addresses, peer, address)

    def address_of(self, peer: bytes) -> str | None:
        """Where ``peer`` listens, if a sampled descriptor said so."""
        return self._addresses.get(peer)

    # ------------------------------------------------------------------ holders

    def holders(self, fingerprint: bytes, count: int) -> list[bytes]:
        """Up to ``count`` distinct sampled holders of a model; remembers their addresses.

        Asked for at least the whole model view, it returns the whole view (in
        random order), so the partner choice sees every known holder.
        """
        sampler = self.sampler
        chosen: dict[bytes, Descriptor] = {}
        known = sampler.model_view(fingerprint)
        if known and count >= len(known):
            sampler.rng.shuffle(known)
            chosen = {d.node_id: d for d in known}
        for _ in range(count * 3 if not chosen else 0):
            d = sampler.sample(fingerprint)
            if d is None:
                break
            chosen.setdefault(d.node_id, d)
            if len(chosen) == count:
                break
        for d in chosen.values():
            self.remember(d.node_id, d.address)
        return list(chosen)

    def holder_count(self, fingerprint: bytes) -> int:
        """Holders of a model in the peer-sampling view (this node not included)."""
        if self._sampler is None:
            return 0
        return sum(1 for d in self._sampler.view() if fingerprint in d.tags)

    # ------------------------------------------------------------------ failures

    def on_unreachable(self, address: str) -> None:
        """A push surely did not reach ``address``: peer sampling drops or retries it."""
        self.sampler.on_failure(address)

    def distrust(self, peer: bytes, seconds: float) -> None:
        """A holder took a push and gave nothing back: out of the views for ``seconds``."""
        if self._sampler is not None:
            periods = max(1, math.ceil(seconds / self._period))
            self._sampler.distrust(peer, periods)


def peer_label(peer: PeerInfo) -> str:
    """How log lines name a connected peer: its id's first bytes and its address."""
    return f"{peer.node_id[:4].hex()}@{peer.listen_address}"


def _remember(table: dict[K, V], key: K, value: V) -> None:
    """Set ``table[key]`` as its newest entry, forgetting the oldest past the bound."""
    table.pop(key, None)
    table[key] = value
    while len(table) > MAX_TRACKED_PEERS:
        table.pop(next(iter(table)))
