"""Relayed circuits, the client side: what a circuit address means to the dialer.

A node that peers cannot dial keeps *reservations* with relays: connections on
which it waits for circuits (:class:`RelayWait`). A peer dials it at
``<relay>/circuit/<node id>``: it opens a session to the relay, asks for a
circuit (:class:`RelayConnect`), and once the relay has answered
(:class:`RelayConnected`) the connection leaves framing and carries a new
session, handshake included, to the target. So Noise runs end to end between
the two nodes and the relay forwards sealed frames it can neither read nor
alter. The relay's side is :mod:`p2p.runtime.relay`; the design in
docs/design/transport.md#relays.
"""

from __future__ import annotations

from dataclasses import dataclass

import trio

from common.address import Circuit
from p2p.wire.dialer import Dialer
from p2p.wire.errors import PeerUnreachable
from p2p.wire.messages import Error
from p2p.wire.peer_text import printable
from p2p.wire.side import Connector
from p2p.wire.stream import ConnectionFailure

__all__ = ["CIRCUIT_MESSAGES", "RelayConnect", "RelayConnected", "RelayIdle", "RelayIncoming",
           "RelayLimits", "RelayWait", "open_circuit"]

NODE_ID_LIMIT = 64


@dataclass(frozen=True)
class RelayLimits:
    """What a relay allows (the ``[relay]`` keys of the same names)."""

    max_circuits: int = 32  # circuits open at once
    max_reservations: int = 64  # nodes holding a reservation at once
    circuit_rate: int = 1 << 20  # bytes per second, each way, per circuit (0: no limit)
    circuit_duration: float = 600.0  # seconds a circuit may last
    circuits_per_peer: int = 4  # circuits a node (or a source address) opens; twice to one target
    waiting_per_peer: int = 2  # connections a node may wait on at once
    reservation_ttl: float = 60.0  # seconds a reservation outlives its last wait

    def __post_init__(self) -> None:
        for name in ("max_circuits", "max_reservations", "circuits_per_peer",
                     "waiting_per_peer"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.circuit_rate < 0:
            raise ValueError(f"circuit_rate must be >= 0, got {self.circuit_rate}")
        if not self.circuit_duration > 0 or not self.reservation_ttl > 0:
            raise ValueError("circuit_duration and reservation_ttl must be > 0")


@dataclass(frozen=True)
class RelayLimit:
    """What a relay allows one circuit: ``seconds`` it may last, ``rate`` bytes per
    second each way (0: no limit)."""

    seconds: float
    rate: int


@dataclass(frozen=True)
class RelayWait:
    """Reserve a slot at the relay (or keep it) and wait on this connection for a
    circuit to this node, up to ``seconds`` (the relay may wait less; 0: answer
    at once, the reservation made); answered by :class:`RelayIdle` when none
    came, or :class:`RelayIncoming`."""

    seconds: float


@dataclass(frozen=True)
class RelayIdle:
    """No circuit came: the reservation holds ``ttl`` more seconds; wait again."""

    ttl: float
    limit: RelayLimit


@dataclass(frozen=True)
class RelayIncoming:
    """Node ``initiator`` asks for a circuit: from the next byte on, this connection
    carries its session (this node is the responder of its handshake)."""

    initiator: bytes
    limit: RelayLimit

    def __post_init__(self) -> None:
        if not 0 < len(self.initiator) <= NODE_ID_LIMIT:
            raise ValueError(f"initiator must be 1..{NODE_ID_LIMIT} bytes")


@dataclass(frozen=True)
class RelayConnect:
    """Open a circuit to node ``target``, which must hold a reservation here."""

    target: bytes

    def __post_init__(self) -> None:
        if not 0 < len(self.target) <= NODE_ID_LIMIT:
            raise ValueError(f"target must be 1..{NODE_ID_LIMIT} bytes")


@dataclass(frozen=True)
class RelayConnected:
    """The circuit is open: from the next byte on, this connection reaches the target."""

    limit: RelayLimit


CIRCUIT_MESSAGES = (
    (RelayLimit, "relay_limit"),
    (RelayWait, "relay_wait"),
    (RelayIdle, "relay_idle"),
    (RelayIncoming, "relay_incoming"),
    (RelayConnect, "relay_connect"),
    (RelayConnected, "relay_connected"),
)


async def open_circuit(dialer: Dialer, circuit: Circuit, connector: Connector,
                       timeout: float) -> trio.abc.Stream:
    """A stream through ``circuit.relay`` to ``circuit.target`` (not yet handshaken).

    ``connector`` reaches the relay; ``timeout`` bounds the relay's answer.
    Raises :class:`PeerUnreachable` naming the relay and its reason.
    """
    address = str(circuit)
    relay = str(circuit.relay)
    ms, _ = await dialer.open_session(relay, None, connector)
    try:
        # Nothing past the answer is read as a frame of this session: it is the target's.
        ms.set_receive_limit(ms.max_frame_size, exact=True)
        try:
            await ms.send(RelayConnect(circuit.target))
            reply = await ms.receive(timeout, timeout)
        except ConnectionFailure as exc:
            raise PeerUnreachable(address, f"relay {relay}: {exc.reason}") from None
        if isinstance(reply, Error):
            raise PeerUnreachable(address, f"relay {relay} refused the circuit: "
                                           f"{printable(reply.reason)}")
        if not isinstance(reply, RelayConnected):
            raise PeerUnreachable(address, f"relay {relay} answered {type(reply).__name__}")
        return ms.detach()
    finally:
        dialer.open -= 1  # the relay's session ends here; the circuit is counted as its own
        await ms.aclose()  # (the stream itself, once detached, stays open)
