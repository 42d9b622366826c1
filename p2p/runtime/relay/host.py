"""A node's relaying: the service it offers and the reservations it holds.

:class:`NodeRelay` registers the relay's handlers (they refuse unless
``relay.serve`` is on and the node is not known to be unreachable), finds
relays among the sampled peers (descriptors tagged
:data:`~p2p.runtime.relay.book.RELAY_TAG`, relayed addresses excepted), and
runs the reservations while the connectivity driver says the node needs them.
Training nodes and relay-only nodes (:mod:`p2p.runtime.relay_node`) both run one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from common.address import is_circuit
from p2p.config.relay_section import RelayConfig
from p2p.runtime.relay.book import RELAY_TAG
from p2p.runtime.relay.client import RelayReservations
from p2p.runtime.relay.service import RelayService
from p2p.wire.dispatch import RequestDispatcher
from p2p.wire.transport import Transport
from peersampling import PeerSampler

__all__ = ["NodeRelay"]


class NodeRelay:
    """The ``[relay]`` part of a node (see the module docstring). ``on_change()``:
    the relayed addresses or the relay tag changed (advertise again)."""

    def __init__(self, transport: object, requests: RequestDispatcher, config: RelayConfig,
                 node_id: bytes, *, on_change: Callable[[], None]) -> None:
        self.config = config
        self.node_id = node_id
        self.reachable = "unknown"  # the connectivity driver's verdict
        self.service = RelayService(config.limits(), serving=self.serving, node_id=node_id)
        self.service.register(requests)
        if isinstance(transport, Transport):  # a peer reserved here: reach it directly
            transport.local_circuit = self.service.local_circuit
        self._sampler: PeerSampler | None = None
        self.reservations: RelayReservations | None = None
        if isinstance(transport, Transport) and config.use != "never":
            self.reservations = RelayReservations(
                transport, node_id, candidates=self._candidates, on_change=on_change,
                wanted=config.reservations)

    def attach(self, sampler: PeerSampler) -> None:
        """Peer sampling started: relays are found in its views."""
        self._sampler = sampler

    def serving(self) -> bool:
        """Whether this node relays: ``relay.serve``, unless peers could not dial it."""
        return self.config.serve and self.reachable != "no"

    def tags(self) -> frozenset[bytes]:
        """What this node's descriptor adds to its models' tags."""
        return frozenset({RELAY_TAG}) if self.serving() else frozenset()

    def _candidates(self) -> list[tuple[str, bytes | None]]:
        out: list[tuple[str, bytes | None]] = [(str(a), None) for a in self.config.relays]
        if self._sampler is not None:
            seen = {a for a, _ in out}
            for entry in self._sampler.peer_entries():
                d = entry.descriptor
                if (RELAY_TAG in d.tags and d.node_id != self.node_id
                        and not is_circuit(d.address) and d.address not in seen):
                    seen.add(d.address)
                    out.append((d.address, d.node_id))
        return out

    def relayed_addresses(self, now: float) -> list[str]:
        return [] if self.reservations is None else self.reservations.relayed_addresses(now)

    def set_needed(self, needed: bool) -> None:
        if self.reservations is not None:
            self.reservations.needed = needed

    async def run(self) -> None:
        """Serve this node's own circuits and keep its reservations, until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.service.run)
            if self.reservations is not None:
                nursery.start_soon(self.reservations.run)

    def status(self) -> dict[str, Any]:
        """``p2p status``'s ``relay`` field."""
        r = self.reservations
        return {"serving": self.serving(), **self.service.status(),
                "reserved_with": [] if r is None else r.status(),
                "reservation_problem": "" if r is None else r.problem()}
