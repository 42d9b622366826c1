"""Reservations (trio): a node that peers cannot dial keeps one or two relays.

While :attr:`RelayReservations.needed` (the connectivity driver decides), the
node picks relays (``relay.relays`` first, then relays found by peer sampling:
descriptors with :data:`~p2p.runtime.relay.book.RELAY_TAG`) and keeps
``waiting`` connections to each, every one waiting for a circuit
(:class:`~p2p.wire.circuit.RelayWait`). A circuit that comes is served as an
incoming session; the connection is then replaced. A relay that refuses or
disappears is retried with backoff and replaced when another is known; the
status says which and why. See docs/guide/deployment.md#relays.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import trio

from p2p.runtime.relay.service import KEEPALIVE
from p2p.wire.circuit import RelayIdle, RelayIncoming, RelayWait
from p2p.wire.messages import Error
from p2p.wire.peer_text import printable
from p2p.wire.stream import ConnectionFailure
from p2p.wire.transport import PeerUnreachable, Transport

__all__ = ["RelayReservations", "ReservationState"]

logger = logging.getLogger(__name__)

#: Seconds between two looks at which relays to hold.
RESELECT = 1.0
FIRST_BACKOFF = 1.0
MAX_BACKOFF = 300.0


@dataclass
class ReservationState:
    """One relay this node reserves with, as ``p2p status`` shows it."""

    address: str
    node_id: bytes | None
    state: str = "connecting"  # connecting, active, refused, unreachable
    reason: str = ""
    circuits: int = 0  # circuits served through it
    active_until: float = 0.0  # the reservation holds until then (its last RelayIdle)
    failures: int = 0  # consecutive
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)

    def report(self) -> dict[str, object]:
        return {"relay": self.address, "state": self.state, "reason": self.reason,
                "circuits": self.circuits}


class RelayReservations:
    """The node's reservations (see the module docstring).

    ``candidates()``: relays to consider, best first, as (address, node id or
    None); ``on_change()``: the relayed addresses changed (advertise them).
    """

    def __init__(self, transport: Transport, node_id: bytes, *,
                 candidates: Callable[[], Sequence[tuple[str, bytes | None]]],
                 on_change: Callable[[], None], wanted: int = 2, waiting: int = 1) -> None:
        self.transport = transport
        self.node_id = node_id
        self.candidates = candidates
        self.on_change = on_change
        self.wanted = wanted
        self.waiting = waiting
        self.needed = False
        self.relays: dict[str, ReservationState] = {}
        self._retry_at: dict[str, float] = {}  # relays given up on: not before then
        self._advertised: list[str] = []
        self._nursery: trio.Nursery | None = None

    # ------------------------------------------------------------------ reading

    def relayed_addresses(self, now: float) -> list[str]:
        """This node's circuit addresses through the relays holding its reservation."""
        me = self.node_id.hex()
        return [f"{r.address}/circuit/{me}" for r in self.relays.values()
                if r.state == "active" and r.active_until > now]

    def status(self) -> list[dict[str, object]]:
        return [r.report() for r in self.relays.values()]

    def problem(self) -> str:
        """Why this node has no reservation while it needs one ("" otherwise)."""
        if not self.needed or any(r.state == "active" for r in self.relays.values()):
            return ""
        failed = [f"{r.address}: {r.reason}" for r in self.relays.values() if r.reason]
        if failed:
            return "no relay holds a reservation (" + "; ".join(failed) + "); retrying"
        if not self.relays:
            return "no relay known yet (none configured in relay.relays, none sampled)"
        return "reserving with " + ", ".join(self.relays)

    # ------------------------------------------------------------------ running

    async def run(self) -> None:
        """Keep reservations while :attr:`needed`, until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            while True:
                self._select(trio.current_time())
                self._notify(trio.current_time())
                await trio.sleep(RESELECT)

    def _select(self, now: float) -> None:
        if not self.needed:
            for address in list(self.relays):
                self._drop(address, now, retry=False)
            return
        # a relay that failed gives way when another is known
        spare = [c for c in self.candidates() if c[0] not in self.relays
                 and self._retry_at.get(c[0], 0.0) <= now]
        for r in list(self.relays.values()):
            if r.state in ("refused", "unreachable") and spare:
                self._drop(r.address, now, retry=True)
        for address, node_id in spare:
            if len(self.relays) >= self.wanted:
                break
            if address not in self.relays:
                self._start(address, node_id)

    def _start(self, address: str, node_id: bytes | None) -> None:
        assert self._nursery is not None
        state = self.relays[address] = ReservationState(address, node_id)
        logger.info("reserving a slot with relay %s", address)
        self._nursery.start_soon(self._keep, state)

    def _drop(self, address: str, now: float, *, retry: bool) -> None:
        state = self.relays.pop(address)
        state.scope.cancel()
        if retry:
            self._retry_at[address] = now + min(MAX_BACKOFF, FIRST_BACKOFF * 2 ** state.failures)

    def _notify(self, now: float) -> None:
        addresses = self.relayed_addresses(now)
        if addresses != self._advertised:
            self._advertised = addresses
            self.on_change()

    async def _keep(self, state: ReservationState) -> None:
        with state.scope:
            async with trio.open_nursery() as nursery:
                for _ in range(self.waiting):
                    nursery.start_soon(self._wait_loop, state)

    async def _wait_loop(self, state: ReservationState) -> None:
        """One connection waiting at the relay, replaced after each circuit or failure."""
        backoff = FIRST_BACKOFF
        while True:
            try:
                await self._wait_once(state)
                backoff = FIRST_BACKOFF
                continue
            except (PeerUnreachable, ConnectionFailure) as exc:
                reason = exc.reason
                kind = "unreachable"
            except _Refused as exc:
                reason, kind = exc.reason, "refused"
            if state.state != kind or state.reason != reason:
                logger.warning("relay %s %s: %s; retrying in %.0f s", state.address,
                               "refused the reservation" if kind == "refused" else "unreachable",
                               reason, backoff)
            state.state, state.reason = kind, reason
            state.failures += 1
            self._notify(trio.current_time())
            await trio.sleep(backoff)
            backoff = min(MAX_BACKOFF, backoff * 2)

    async def _wait_once(self, state: ReservationState) -> None:
        t = self.transport
        async with t.dialer.session(state.address, state.node_id) as (ms, relay):
            state.node_id = relay.node_id  # the relay proved who it is: the same from now on
            # Nothing past an answer is read as a frame of this session: after
            # RelayIncoming the bytes are the initiator's.
            ms.set_receive_limit(ms.max_frame_size, exact=True)
            seconds = 0.0  # the first answer confirms the reservation at once
            while True:
                await ms.send(RelayWait(seconds))
                seconds = KEEPALIVE
                reply = await ms.receive(KEEPALIVE + t.read_timeout, t.read_timeout)
                now = trio.current_time()
                if isinstance(reply, Error):
                    raise _Refused(printable(reply.reason))
                if isinstance(reply, RelayIdle):
                    state.state, state.reason, state.failures = "active", "", 0
                    state.active_until = now + max(reply.ttl, KEEPALIVE)
                    self._notify(now)
                    continue
                if isinstance(reply, RelayIncoming):
                    state.circuits += 1
                    state.active_until = now + KEEPALIVE + t.read_timeout
                    label = f"{state.address}/circuit/{reply.initiator.hex()}"
                    handler = t.handler
                    stream = ms.detach()
                    if handler is None or self._nursery is None:
                        await trio.aclose_forcefully(stream)
                    else:
                        self._nursery.start_soon(t.serve_stream, stream, handler, label)
                    return
                raise _Refused(f"answered {type(reply).__name__}")


class _Refused(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
