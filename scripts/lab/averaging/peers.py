"""A gossip peer without a trainer: averages one vector with the daemon's own parts.

It runs what a node runs for one shared model, minus torch and training: the
TCP :class:`~p2p.wire.transport.Transport`, peer sampling from a bootstrap
list (signed descriptors and the Sybil rules, as the node:
:func:`~p2p.runtime.signed_sampling.signed_sampler`), a :class:`~gossip.driver.GossipDriver` and one
:class:`~gossip.pushsum.PushSum` core. Instead of pushing after training
rounds it pushes back to back while :meth:`AveragingPeer.mix` runs.
``scripts/bench/averaging.py`` runs one per process to time the averaging
primitive; tests can run several in one trio process.

``on_change`` is called after every change of the core's estimate (a merged
push, an acknowledged push), so an observer can measure the consensus error
exactly when it changes rather than by polling.

The default partner schedule is ``"matched"``
(:mod:`lab.averaging.schedule`): rounds of pairwise exchanges, each
bounded by ``round_timeout`` so that a dead or slow partner costs a skipped
round, not a stalled peer.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import cast

import numpy as np
import trio

from gossip import Push, PushAck, PushSum, PushSumOptions, PushUndelivered
from gossip import RejectedPush as PushRejected
from gossip.driver import GossipDriver, PushTransport
from lab.averaging.schedule import MeetingLedger, matched_partner
from p2p.runtime.protocol import register_node_messages
from p2p.runtime.signed_sampling import signed_sampler
from p2p.runtime.transport_adapters import PushOverTransport, ShuffleOverTransport
from p2p.wire.codec import Message
from p2p.wire.dispatch import RequestDispatcher
from p2p.wire.handshake import PeerInfo
from p2p.wire.identity import Identity
from p2p.wire.messages import ERROR_REJECTED, Error, Ping, Pong
from p2p.wire.transport import Transport, TransportError, parse_address
from peersampling import Descriptor, PeerSampler, ShuffleRequest
from peersampling.driver import run_peer_sampling

__all__ = [
    "DEFAULT_ROUND_TIMEOUT", "MATCHED_MAX_IN_FLIGHT", "PARTNER_CHOICES", "AveragingPeer",
    "SocketCounters",
]

log = logging.getLogger(__name__)

IDLE_PAUSE = 0.001  # seconds before a lane retries after a wave that sent nothing
PARTNER_CHOICES = ("matched", "random", "rotate")
DEFAULT_ROUND_TIMEOUT = 5.0  # seconds a matched round may take before it is skipped
# Matched rounds: an initiator whose exchange failed retries after this pause,
# doubled after each failure up to the cap (a dead partner is not hammered).
FIRST_RETRY_PAUSE = 0.01
MAX_RETRY_PAUSE = 0.5
STOP_POLL = 0.05  # seconds between looks at `stop` while a waiting round waits
SKIP_LOG_INTERVAL = 30.0  # seconds between warnings about skipped rounds, per partner
# A matched round's push that got no acknowledgement before the deadline stays
# outstanding (it may have been merged) until the core resolves it; the
# schedule makes one new push per round, so this only bounds how many such
# pushes (one per unresponsive partner) may wait before new rounds cannot push.
MATCHED_MAX_IN_FLIGHT = 8


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


@dataclass(frozen=True)
class _Round:
    """The matched round a push wave belongs to: its partner and deadline."""

    partner: bytes
    deadline: float


# Set in each matched push wave's task; the driver's tasks for that wave's
# sends inherit it, so a wave still finishing a retransmission keeps its own
# round's deadline while the next round's wave runs.
_wave_round: ContextVar[_Round | None] = ContextVar("averaging_wave_round", default=None)


class _RoundBoundPushes:
    """The driver's push transport, cut off at the deadline of the wave's matched round.

    A push still unanswered at the deadline is reported undelivered with
    ``maybe_delivered`` (it may have been merged: the core keeps it
    outstanding and retransmits it with the same id). Records the newest push
    id sent, and per peer the newest one acknowledged, so that a round can
    tell its own exchange from a retransmission of an older one (push ids
    grow with every new push of a core); ``on_ack`` hears of every ack.
    """

    def __init__(self, inner: PushTransport, on_ack: Callable[[], None]) -> None:
        self._inner = inner
        self._on_ack = on_ack
        self.newest_sent = 0
        self.newest_acked: dict[bytes, int] = {}

    async def push(self, peer: bytes, push: Push) -> PushAck:
        self.newest_sent = max(self.newest_sent, push.push_id)
        current = _wave_round.get()
        deadline = math.inf if current is None else current.deadline
        if trio.current_time() >= deadline:  # nothing sent: surely not merged
            raise PushUndelivered("the round's deadline passed before sending",
                                  maybe_delivered=False)
        with trio.move_on_at(deadline):
            ack = await self._inner.push(peer, push)
            self.newest_acked[peer] = max(self.newest_acked.get(peer, 0), push.push_id)
            self._on_ack()  # the caller applies the ack before its next checkpoint
            return ack
        raise PushUndelivered("no acknowledgement before the round's deadline",
                              maybe_delivered=True)


class _AckHook:
    """The driver's duration sink, used as "an acknowledged push changed the estimate"."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        self._on_change = on_change

    def add(self, seconds: float) -> None:
        self._on_change()


class AveragingPeer:
    """One peer averaging ``values`` with the holders of ``model`` it discovers.

    ``core_options`` go to the :class:`PushSum` core unchanged (fanout,
    encodings, exchange kind...), except that the matched schedule defaults
    ``max_in_flight`` to :data:`MATCHED_MAX_IN_FLIGHT`. ``push_timeout`` is the
    driver's retransmission timeout (with the matched schedule, at most
    ``round_timeout``) and the transport's wait for an acknowledgement.

    ``partners``: ``"matched"`` (the default) pairs the holders found by
    :meth:`wait_for_holders`, sorted by node id, in rounds
    (:func:`~lab.averaging.schedule.matched_partner`): in round ``k``
    holder ``i`` exchanges with holder ``i XOR 2**(k mod ceil(log2 n))``, the
    lower one initiating and the other waiting for its push, and a holder
    whose partner index is ``>= n`` sits the round out; every holder is in at
    most one exchange per round (for a power-of-two ``n``, the schedule of a
    butterfly all-reduce). A round ends after ``round_timeout`` seconds at
    most: the initiator stops retrying, the waiting side stops waiting, the
    round is skipped (a warning, at most one per partner per
    :data:`SKIP_LOG_INTERVAL`) and the schedule moves on; a push that arrives
    late is still merged (see :class:`~lab.averaging.schedule.MeetingLedger`).
    ``"random"`` samples each wave's partners from the holder view, as a
    training node does; ``"rotate"`` cycles through the known holders in a
    random order of this peer's own, so it never picks the same partner twice
    in a row while others are known.
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
        partners: str = "matched",
        round_timeout: float = DEFAULT_ROUND_TIMEOUT,
    ) -> None:
        if partners not in PARTNER_CHOICES:
            raise ValueError(f"partners: expected one of {PARTNER_CHOICES}, got {partners!r}")
        if not (isinstance(round_timeout, int | float) and 0 < round_timeout < math.inf):
            raise ValueError(f"round_timeout: expected seconds > 0, got {round_timeout!r}")
        register_node_messages()
        self.partners = partners
        self.round_timeout = float(round_timeout)
        self._rotation: list[bytes] = []
        self.identity = identity or Identity.generate()
        # matched schedule: the members (fixed by wait_for_holders), the round
        # this peer is in, its skipped rounds and the waiting side's book
        self._members: list[bytes] = [self.identity.node_id]
        self._round = 0
        self._entered = -1  # the round whose owed push the ledger counts already
        self._skipped = 0
        self._ledger = MeetingLedger()
        self._merged = trio.Event()  # set (and replaced) at every merged push
        self._progress = trio.Event()  # set (and replaced) at every ack and wave's end
        self._skip_log: dict[bytes, tuple[float, int]] = {}  # partner -> (last said, unsaid)
        self.model = model
        options = dict(core_options or {})
        if partners == "matched":
            options.setdefault("max_in_flight", MATCHED_MAX_IN_FLIGHT)
        self.core = PushSum(model, values, **cast(PushSumOptions, options))
        self.socket = SocketCounters()
        self.transport = Transport(self.identity, host, port, tags=frozenset({model}),
                                   read_timeout=push_timeout, connector=self._connect)
        self.shuffle_period = float(shuffle_period)
        self._on_change = on_change or (lambda: None)
        self._addresses: dict[bytes, str] = {}
        self._pushes = _RoundBoundPushes(
            PushOverTransport(self.transport, self._addresses, timeout=push_timeout),
            self._progressed)
        # a matched round's push cut off at the deadline is retransmitted by
        # the next waves that find it expired, so that an answer from a partner
        # that was only slow resolves it within a round or two
        retransmit_after = (min(push_timeout, self.round_timeout) if partners == "matched"
                            else push_timeout)
        self.driver = GossipDriver(
            {"model": self.core},
            self._pushes,
            self._holders,
            push_timeout=retransmit_after,
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
        """Matched rounds this peer has finished: exchanged, skipped or sat out
        (0 with the other schedules)."""
        return self._round

    @property
    def skipped_rounds(self) -> int:
        """Matched rounds that ended at their deadline without the exchange."""
        return self._skipped

    @property
    def members(self) -> list[bytes]:
        """The matched schedule's members, sorted (this peer included)."""
        return list(self._members)

    def known_holders(self) -> list[Descriptor]:
        """The other holders of the model this peer has discovered."""
        return [] if self._sampler is None else self._sampler.model_view(self.model)

    # ------------------------------------------------------------------ running

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve and discover peers until cancelled; ``task_status`` gets the address."""
        try:
            async with trio.open_nursery() as nursery:
                address: str = await nursery.start(self.transport.serve, self._requests)
                # the node's rules: signed descriptors, Sybil rules, limited lines
                self._sampler = signed_sampler(self.identity, address, frozenset({self.model}),
                                               rng=random.Random(self.identity.node_id))
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

        They become the members of the ``"matched"`` schedule (views keep
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

        ``"matched"``: one round after the other (see the class); a round in
        progress when ``stop`` is set resumes at the next call. Otherwise: one
        lane of :meth:`GossipDriver.push_wave` calls per push the core lets fly
        at once (``max_in_flight``); each lane starts its next wave as soon as
        its own answer is in, so the pushes are pipelined.
        """
        if self.partners == "matched":
            self._matched_partner(0)  # a clear error now if there are no members
            async with trio.open_nursery() as waves:
                await self._mix_matched(stop, waves)
            return
        lanes = self.core.max_in_flight
        async with trio.open_nursery() as nursery:
            for _ in range(lanes):
                nursery.start_soon(self._mix_lane, stop)

    async def _mix_matched(self, stop: trio.Event, waves: trio.Nursery) -> None:
        while not stop.is_set():
            scheduled = self._matched_partner(self._round)
            if scheduled is None:  # no partner this round
                self._round += 1
                await trio.lowlevel.checkpoint()
                continue
            partner, initiate = scheduled
            deadline = trio.current_time() + self.round_timeout
            if initiate:
                done = await self._initiate(_Round(partner, deadline), stop, waves)
            else:
                done = await self._await_push(partner, deadline, stop)
            if done is None:
                return  # paused mid-round: the next mix() resumes this round
            if not done:
                self._round_skipped(partner, initiate)
            self._round += 1

    async def _initiate(self, this: _Round, stop: trio.Event, waves: trio.Nursery) -> bool | None:
        """Push to the round's partner until one push of this round is acknowledged
        (True), the deadline passes (False) or ``stop`` is set between attempts (None).

        Each wave runs in ``waves``: the round ends at its partner's ack, while a
        retransmission the same wave sent to an unresponsive peer (the core
        resends expired pushes in every wave) finishes in the background, cut
        off at this round's deadline.
        """
        mark = self._pushes.newest_sent  # a later id is a push made in this round

        def acked() -> bool:
            return self._pushes.newest_acked.get(this.partner, 0) > mark

        pause = FIRST_RETRY_PAUSE
        while True:
            finished = trio.Event()
            waves.start_soon(self._wave, this, finished)
            with trio.move_on_at(this.deadline):
                while not (acked() or finished.is_set()):
                    await self._progress.wait()
            if acked():
                return True
            if stop.is_set():
                return None
            # the wave failed (or the partner still awaits an older push of
            # ours, to be retransmitted once expired): try again after a
            # pause, unless that would start an attempt with no time left
            # (cut off at once, it would stay outstanding as maybe merged)
            if trio.current_time() + pause >= this.deadline:
                return False
            await trio.sleep(pause)
            pause = min(2 * pause, MAX_RETRY_PAUSE)

    async def _wave(self, this: _Round, finished: trio.Event) -> None:
        _wave_round.set(this)  # this task's context: its sends and its holders see it
        try:
            await self.driver.push_wave()
        finally:
            finished.set()
            self._progressed()

    async def _await_push(self, partner: bytes, deadline: float, stop: trio.Event) -> bool | None:
        """Wait until ``partner``'s push of this round is merged (True), the deadline
        passes (False: the push is forgiven) or ``stop`` is set (None)."""
        if self._entered < self._round:  # not again when resuming after a pause
            self._entered = self._round
            self._ledger.enter(partner)
        while not self._ledger.satisfied(partner):
            if stop.is_set():
                return None
            now = trio.current_time()
            if now >= deadline:
                self._ledger.forgive(partner)
                return False
            with trio.move_on_at(min(deadline, now + STOP_POLL)):
                await self._merged.wait()
        return True

    def _round_skipped(self, partner: bytes, initiated: bool) -> None:
        self._skipped += 1
        now = trio.current_time()
        said, unsaid = self._skip_log.get(partner, (-math.inf, 0))
        if now - said < SKIP_LOG_INTERVAL:
            self._skip_log[partner] = (said, unsaid + 1)
            return
        self._skip_log[partner] = (now, 0)
        what = ("no acknowledgement from" if initiated else "no push from")
        more = f" ({unsaid} more skipped rounds with it since the last warning)" if unsaid else ""
        log.warning("matched round %d skipped: %s %s within %g s%s", self._round, what,
                    partner[:4].hex(), self.round_timeout, more)

    def _matched_partner(self, round_index: int) -> tuple[bytes, bool] | None:
        """This round's partner and whether this peer initiates; None: it sits out."""
        me, ids = self.identity.node_id, self._members
        if len(ids) < 2:
            raise ValueError("partners='matched' needs at least 2 holders found by "
                             f"wait_for_holders(); there are {len(ids)} (this peer included)")
        i = ids.index(me)
        j = matched_partner(i, len(ids), round_index)
        if j is None:
            return None
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
        if self.partners == "matched":
            current = _wave_round.get()
            if current is None:
                return []
            if self.driver.peer_failures.get(current.partner) and self.core.outstanding:
                # no answer from it since a failure, and a push may be stuck
                # with it: a new one would be stuck too, reserving more weight;
                # the retransmissions probe it (an answer clears its failures)
                return []
            return [current.partner]
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

    def _progressed(self) -> None:
        self._progress.set()
        self._progress = trio.Event()

    async def _serve_push(self, peer: PeerInfo, msg: Push) -> Message:
        if msg.model != self.model:
            return Error(ERROR_REJECTED, "this peer does not hold that model")
        merged = self.core.counters.pushes_received
        try:
            ack = self.core.on_push(peer.node_id, msg, trio.current_time())
        except PushRejected as exc:
            return Error(ERROR_REJECTED, str(exc))
        if self.core.counters.pushes_received == merged:
            return ack  # a retransmission acknowledged again: nothing new merged
        self._ledger.merged(peer.node_id)
        self._merged.set()
        self._merged = trio.Event()
        self._changed()
        return ack

    async def _serve_shuffle(self, peer: PeerInfo, msg: ShuffleRequest) -> Message:
        if msg.sender.node_id != peer.node_id:
            return Error(ERROR_REJECTED, "shuffle sender is not the peer")
        return self.sampler.on_request(msg, trio.current_time())
