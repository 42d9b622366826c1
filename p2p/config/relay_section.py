"""``[relay]``: relaying for nodes that cannot be dialled, and hole punching.

A reachable node may serve as a relay (``serve``) within its limits; a node
that peers cannot dial reserves with relays (``use``) and upgrades relayed
sessions to direct ones by hole punching (``hole_punch``). The defaults of the
limits come from the relay's (:class:`~p2p.wire.circuit.RelayLimits`).
See docs/guide/deployment.md#relays.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.address import HostPort
from p2p.config.kinds import AddressList, Boolean, Choice, Integer, Number, setting
from p2p.wire.circuit import RelayLimits

__all__ = ["RELAY_USES", "RelayConfig"]

#: ``relay.use``: when a node reserves with relays.
RELAY_USES = ("auto", "always", "never")

_D = RelayLimits()


@dataclass(frozen=True)
class RelayConfig:
    """``[relay]``: see the module docstring."""

    serve: bool = setting(False, Boolean(), "relay circuits for nodes that cannot be dialled")
    max_circuits: int = setting(_D.max_circuits, Integer(minimum=1),
                                "circuits relayed at once at most")
    max_reservations: int = setting(_D.max_reservations, Integer(minimum=1),
                                    "nodes holding a reservation at once at most")
    circuit_rate: int = setting(_D.circuit_rate, Integer(minimum=0),
                                "bytes per second each way per circuit (0: no limit)")
    circuit_duration: float = setting(_D.circuit_duration, Number(above=0),
                                      "seconds a circuit may last")
    circuits_per_peer: int = setting(_D.circuits_per_peer, Integer(minimum=1),
                                     "circuits a node or a source address may hold at once")
    use: str = setting("auto", Choice(RELAY_USES),
                       "when to reserve with relays: when peers cannot dial this node, "
                       "always, or never")
    relays: tuple[HostPort, ...] = setting((), AddressList(),
                                           "relays to reserve with first")
    reservations: int = setting(2, Integer(minimum=1, maximum=4), "relays to reserve with")
    hole_punch: bool = setting(True, Boolean(),
                               "try a direct connection to peers reached through a relay")

    def limits(self) -> RelayLimits:
        """The relay's limits as configured."""
        return RelayLimits(max_circuits=self.max_circuits,
                           max_reservations=self.max_reservations,
                           circuit_rate=self.circuit_rate,
                           circuit_duration=self.circuit_duration,
                           circuits_per_peer=self.circuits_per_peer)
