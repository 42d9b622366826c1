"""A gossip peer without a trainer: averages one vector with the daemon's own parts.

It runs what a node runs for one shared model, minus torch and training: the
TCP :class:`~p2p.wire.transport.Transport`, peer sampling from a bootstrap
list, a :class:`~gossip.driver.GossipDriver` and one
:class:`~gossip.pushsum.PushSum` core. Instead of pushing after training
rounds it pushes back to back while :meth:`AveragingPeer.mix` runs.
``scripts/bench_averaging.py`` runs one per process to time the averaging
primitive; tests can run several in one trio process.

``on_change`` is called after every change of the core's estimate (a merged
push, an acknowledged push), so an observer can measure the consensus error
exactly when it changes rather than by polling.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import trio

from gossip import Push, PushSum, PushSumOptions
from gossip import RejectedPush as PushRejected
from gossip.driver import GossipDriver
from p2p.runtime.protocol import register_node_messages
from p2p.runtime.transport_adapters import PushOverTransport, ShuffleOverTransport
from p2p.wire.codec import Message
from p2p.wire.dispatch import RequestDispatcher
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.messages import ERROR_REJECTED, Error, Ping, Pong
from p2p.wire.transport import Transport, TransportError, parse_address
from peersampling import Descriptor, PeerSampler, ShuffleRequest
from peersampling.driver import run_peer_sampling

__all__ = ["PARTNER_CHOICES", "AveragingPeer", "SocketCounters"]

log = logging.getLogger(__name__)

IDLE_PAUSE = 0.001  # seconds before a lane retries after a wave that sent nothing
PARTNER_CHOICES = ("random", "rotate", "hypercube")


@dataclass
class SocketCounters:
    """Bytes through this peer's outgoing connections (requests out, replies in).

    Every connection has one dialling end, so the sum over all peers of
    ``sent + received`` is every byte the peers exchanged over TCP.
    """

    sent: int = 0
    received: int = 0

    @property
    def total(self) -> int:
        return self.sent + self.received


class _CountingStream(trio.abc.Stream):
    """A TCP stream that adds what passes through it to :class:`SocketCounters`."""

    def __init__(self, inner: trio.abc.Stream, counters: SocketCounters) -> None:
        self._inner = inner
        self._counters = counters

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._inner.send_all(data)
        self._counters.sent += len(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self._inner.receive_some(max_bytes)
        self._counters.received += len(data)
        return data

    async def aclose(self) -> None:
        await self._inner.aclose()


class _AckHook:
    """The driver's duration sink, used as "an acknowledged push changed the estimate"."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        self._on_change = on_change

    def add(self, seconds: float) -> None:
        self._on_change()


class AveragingPeer:
    """One peer averaging ``values`` with the holders of ``model`` it discovers.

    ``core_options`` go to the :class:`PushSum` core unchanged (fanout,
    encodings, exchange kind...). ``push_timeout`` is the driver's
    retransmission timeout and the transport's wait for an acknowledgement.
    ``partners``: ``"random"`` samples each wave's partners from the holder
    view, as a node does; ``"rotate"`` cycles through the known holders in a
    random order of this peer's own, so it never picks the same partner twice
    in a row while others are known; ``"hypercube"`` (a power-of-two number of
    holders) pairs the holders, sorted by node id, in rounds: in round ``k``
    holder ``i`` exchanges with holder ``i XOR 2**(k mod log2 n)``, the lower
    one initiating and the other waiting for its push, so that every holder is
    in exactly one exchange at a time (a perfect matching per round, the
    schedule of a butterfly all-reduce).
    """

    def __init__(
        self,
        values: np.ndarray,
        model: bytes,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        identity: Identity | None = None,
        core_options: PushSumOptions | None = None,
        shuffle_period: float = 0.05,
        push_timeout: float = 30.0,
        on_change: Callable[[], None] | None = None,
        partners: str = "random",
    ) -> None:
        if partners not in PARTNER_CHOICES:
            raise ValueError(f"partners: expected one of {PARTNER_CHOICES}, got {partners!r}")
        register_node_messages()
        self.partners = partners
        self._rotation: list[bytes] = []
        self._round = 0  # hypercube: rounds completed
        self._partner: bytes | None = None  # hypercube: whom this round's wave pushes to
        self._merged_from: dict[bytes, int] = {}  # pushes merged per sender
        self._awaited_from: dict[bytes, int] = {}  # hypercube: pushes expected per sender
        self._merged = trio.Event()
        self.identity = identity or Identity.generate()
        self.model = model
        self.core = PushSum(model, values, **(core_options or {}))
        self.socket = SocketCounters()
        self.transport = Transport(self.identity, host, port, tags=frozenset({model}),
                                   read_timeout=push_timeout, connector=self._connect)
        self.shuffle_period = float(shuffle_period)
        self._on_change = on_change or (lambda: None)
        self._addresses: dict[bytes, str] = {}
        self.driver = GossipDriver(
            {"model": self.core},
            PushOverTransport(self.transport, self._addresses, timeout=push_timeout),
            self._holders,
            push_timeout=push_timeout,
            push_durations=_AckHook(self._changed),
        )
        self._requests = RequestDispatcher()
        self._requests.add(Push, self._serve_push)
        self._requests.add(ShuffleRequest, self._serve_shuffle)
        self._sampler: PeerSampler | None = None
        self._discovery = trio.CancelScope()

    # ------------------------------------------------------------------ state

    @property
    def sampler(self) -> PeerSampler:
        """The peer sampler (exists once :meth:`run` listens)."""
        if self._sampler is None:
            raise RuntimeError("the peer is not listening yet: start run() first")
        return self._sampler

    @property
    def rounds(self) -> int:
        """Hypercube rounds this peer has completed (0 with the other schedules)."""
        return self._round

    def known_holders(self) -> list[Descriptor]:
        """The other holders of the model this peer has discovered."""
        return [] if self._sampler is None else self._sampler.model_view(self.model)

    # ------------------------------------------------------------------ running

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve and discover peers until cancelled; ``task_status`` gets the address."""
        try:
            async with trio.open_nursery() as nursery:
                address: str = await nursery.start(self.transport.serve, self._requests)
                self._sampler = PeerSampler(
                    Descriptor(self.identity.node_id, address, 0, frozenset({self.model})),
                    rng=random.Random(self.identity.node_id),
                )
                nursery.start_soon(self._discover)
                task_status.started(address)
        finally:
            await self.transport.aclose()

    def join(self, bootstrap: Sequence[str]) -> None:
        """Contact these addresses to discover the other holders."""
        for address in bootstrap:
            parse_address(address)  # a clear error for a malformed address
        self.sampler.bootstrap(list(bootstrap))

    async def wait_for_holders(self, count: int, *, interval: float = 0.01) -> None:
        """Return once ``count`` other holders are known (no timeout: the caller's).

        They become the members of the ``"hypercube"`` schedule (views keep
        changing while peers shuffle; the schedule must not).
        """
        while len(self.known_holders()) < count:
            await trio.sleep(interval)
        members = self.known_holders()
        self._addresses.update((d.node_id, d.address) for d in members)
        self._members = sorted({self.identity.node_id, *(d.node_id for d in members)})

    async def warm_up(self) -> None:
        """Open (and authenticate) a connection to every known holder now, so that
        the first pushes do not pay for the handshake."""
        for d in self.known_holders():
            reply = await self.transport.request(d.address, Ping(0), node_id=d.node_id)
            if not isinstance(reply, Pong):
                raise TransportError(f"{d.address} answered a ping with {type(reply).__name__}")

    def stop_discovery(self) -> None:
        """Stop shuffling (the views keep what they hold; peers are still served)."""
        self._discovery.cancel()

    async def mix(self, stop: trio.Event) -> None:
        """Push back to back until ``stop`` is set; exchanges in progress finish
        (no push is abandoned halfway).

        Runs one lane of :meth:`GossipDriver.push_wave` calls per push the core
        lets fly at once (``max_in_flight``): each lane starts its next wave as
        soon as its own answer is in, so the pushes are pipelined.
        """
        if self.partners == "hypercube":
            self._hypercube_partner(0)  # a clear error now if the members do not fit
            await self._mix_hypercube(stop)
            return
        lanes = self.core.max_in_flight
        async with trio.open_nursery() as nursery:
            for _ in range(lanes):
                nursery.start_soon(self._mix_lane, stop)

    async def _mix_hypercube(self, stop: trio.Event) -> None:
        entered = -1  # the round whose expected push is counted already
        while not stop.is_set():
            partner, initiate = self._hypercube_partner(self._round)
            if initiate:
                acks = self.core.counters.acks
                self._partner = partner
                await self.driver.push_wave()
                if self.core.counters.acks == acks:  # failed: try again (retransmit on expiry)
                    await trio.sleep(IDLE_PAUSE)
                    continue
            else:
                if entered < self._round:
                    entered = self._round
                    self._awaited_from[partner] = self._awaited_from.get(partner, 0) + 1
                while self._merged_from.get(partner, 0) < self._awaited_from[partner]:
                    if stop.is_set():
                        return  # paused mid-round: the next mix() resumes this round
                    with trio.move_on_after(0.05):  # and look at `stop` again
                        await self._merged.wait()
            self._round += 1

    def _hypercube_partner(self, round_index: int) -> tuple[bytes, bool]:
        """This round's partner, and whether this peer initiates the exchange."""
        me, ids = self.identity.node_id, self._members
        dims = len(ids).bit_length() - 1
        if len(ids) < 2 or len(ids) != 1 << dims:
            raise ValueError(f"partners='hypercube' needs a power-of-two number of holders "
                             f"found by wait_for_holders(); there are {len(ids)} (this peer "
                             "included)")
        i = ids.index(me)
        j = i ^ (1 << (round_index % dims))
        return ids[j], i < j

    async def _mix_lane(self, stop: trio.Event) -> None:
        while not stop.is_set():
            before = self._sends()
            await self.driver.push_wave()
            if self._sends() == before:  # no free partner (all busy), or none known
                await trio.sleep(IDLE_PAUSE)

    # ------------------------------------------------------------------ helpers

    async def _connect(self, address: str) -> trio.abc.Stream:
        host, port = parse_address(address)
        return _CountingStream(await trio.open_tcp_stream(host, port), self.socket)

    async def _discover(self) -> None:
        with self._discovery:
            await run_peer_sampling(self.sampler, ShuffleOverTransport(self.transport),
                                    period=self.shuffle_period,
                                    timeout=max(self.shuffle_period, 1.0))

    def _holders(self, fingerprint: bytes, count: int) -> list[bytes]:
        if self.partners == "rotate":
            return self._next_in_rotation(fingerprint, count)
        if self.partners == "hypercube":
            return [] if self._partner is None else [self._partner]
        chosen: dict[bytes, str] = {}
        for _ in range(3 * count):
            d = self.sampler.sample(fingerprint)
            if d is None:
                break
            chosen.setdefault(d.node_id, d.address)
            if len(chosen) == count:
                break
        self._addresses.update(chosen)
        return list(chosen)

    def _next_in_rotation(self, fingerprint: bytes, count: int) -> list[bytes]:
        known = {d.node_id: d.address for d in self.sampler.model_view(fingerprint)}
        self._addresses.update(known)
        fresh = [p for p in known if p not in self._rotation]
        self.sampler.rng.shuffle(fresh)
        self._rotation = [p for p in self._rotation if p in known] + fresh
        chosen = self._rotation[:count]
        self._rotation = self._rotation[len(chosen):] + chosen
        return chosen

    def _sends(self) -> int:
        c = self.core.counters
        return c.pushes_sent + c.retransmissions

    def _changed(self) -> None:
        self._on_change()

    async def _serve_push(self, peer: PeerInfo, msg: Push) -> Message:
        if msg.model != self.model:
            return Error(ERROR_REJECTED, "this peer does not hold that model")
        try:
            ack = self.core.on_push(peer.node_id, msg, trio.current_time())
        except PushRejected as exc:
            return Error(ERROR_REJECTED, str(exc))
        self._merged_from[peer.node_id] = self._merged_from.get(peer.node_id, 0) + 1
        self._merged.set()
        self._merged = trio.Event()
        self._changed()
        return ack

    async def _serve_shuffle(self, peer: PeerInfo, msg: ShuffleRequest) -> Message:
        if msg.sender.node_id != peer.node_id:
            return Error(ERROR_REJECTED, "shuffle sender is not the peer")
        return self.sampler.on_request(msg, trio.current_time())
