"""Trio driver: runs push-sum cores over an abstract push transport.

After each training round (:meth:`GossipDriver.signal_round`) the driver mixes
every shared model at once: it retransmits what expired and makes exchange
*waves* (one push or push-pull request per model, to freshly sampled holders)
as the :class:`~gossip.wave_rule.WaveRule` decides. With a core's
``max_in_flight`` > 1 the next wave starts as soon as the core allows it.
Acknowledgements and failures go back into the cores, whose
:meth:`PushSum.on_undelivered` rule the simulator shares; while mask noise is
held it keeps mixing until the next round. The node plugs in its connections
(a :class:`PushTransport`) and holder sampling (a :data:`Holders` callable);
tests plug in a fake network and trio's ``MockClock``.

How it works: docs/design/gossip.md ("In the daemon").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import trio

from .errors import PushRefused, PushUndelivered, RejectedAck, RejectedReply
from .log_limit import LogLimiter
from .messages import Push, PushAck
from .partner_choice import PartnerChoice
from .pushsum import PushSum
from .wave_rule import AUTO, Next, WavePlan, WaveRule

log = logging.getLogger(__name__)

NOISY_WAVE_PAUSE = 0.005  # seconds between extra push waves while masks mix
MAX_TRACKED_PEERS = 1024  # peers whose consecutive push failures are remembered

# (model fingerprint, how many) -> up to that many distinct peer ids holding the model
Holders = Callable[[bytes, int], Sequence[bytes]]


class PushTransport(Protocol):
    """Delivers one push to a peer and returns its acknowledgement.

    Raises :class:`~gossip.errors.PushUndelivered` (with ``maybe_delivered``)
    when no acknowledgement came back, and :class:`~gossip.errors.PushRefused`
    when the peer answered without merging.  Must return or raise within a
    bounded time (the transport owns the timeout).
    """

    async def push(self, peer: bytes, push: Push) -> PushAck: ...


class DurationSink(Protocol):
    """Receives the send-to-ack durations of acknowledged pushes (seconds)."""

    def add(self, seconds: float) -> None: ...


class EpochHook(Protocol):
    """Masking epochs around the exchanges (the node's
    :class:`~p2p.runtime.masking.driver.NodeMasking`; None: no epochs)."""

    async def prepare(self, name: str, core: PushSum) -> None:
        """After a training round, before the model's pushes: start an epoch if due and
        return once its pairs are agreed (noise first, then data)."""
        ...

    def pushed(self, name: str, peer: bytes, fraction: float, push_id: int) -> None:
        """Push ``push_id`` was acknowledged; it took ``fraction`` of the sender's mass
        as it was when the push was made."""
        ...

    def settle(self, name: str, core: PushSum) -> None:
        """After pushes were made: the core may have folded its noise."""
        ...

    def unreachable(self, peer: bytes, *, surely: bool, failures: int) -> None:
        """A push to ``peer`` got no answer (``surely``: it did not reach it)."""
        ...


class GossipDriver:
    """Drives the push-sum cores of one node (one per shared model, by name)."""

    def __init__(
        self,
        cores: Mapping[str, PushSum],
        transport: PushTransport,
        holders: Holders,
        *,
        push_timeout: float,
        pushes_per_round: int | str = AUTO,
        noisy_wave_pause: float = NOISY_WAVE_PAUSE,
        push_durations: DurationSink | None = None,
        clock: Callable[[], float] = trio.current_time,
        max_tracked_peers: int = MAX_TRACKED_PEERS,
        partners: PartnerChoice | None = None,
        epochs: EpochHook | None = None,
    ) -> None:
        """``push_timeout``: seconds before an unacknowledged push is retransmitted.

        ``pushes_per_round``: ``"auto"`` or a fixed count of waves after each
        round (:class:`~gossip.wave_rule.WaveRule`).  ``push_durations``
        receives how long each acknowledged push took; ``clock`` gives the
        time the cores see (trio's clock by default).  ``partners`` chooses
        the targets among sampled holders from how earlier exchanges went
        (:mod:`gossip.partner_choice`; None: the holders as sampled).
        """
        if not push_timeout > 0:
            raise ValueError(f"push_timeout: expected a number > 0, got {push_timeout!r}")
        self.rule = WaveRule.parse(pushes_per_round)
        if not noisy_wave_pause > 0:
            raise ValueError(f"noisy_wave_pause: expected a number > 0, got {noisy_wave_pause!r}")
        if max_tracked_peers < 1:
            raise ValueError(f"max_tracked_peers: expected >= 1, got {max_tracked_peers!r}")
        self._cores = dict(cores)
        self._transport = transport
        self._holders = holders
        self.push_timeout = float(push_timeout)
        self.pushes_per_round = pushes_per_round
        self.noisy_wave_pause = float(noisy_wave_pause)
        self._durations = push_durations
        self._clock = clock
        self._max_tracked = max_tracked_peers
        self.partners = partners
        self.epochs = epochs  # masking epochs (privacy "masked"), see EpochHook
        self._failures: dict[bytes, int] = {}
        # lines a peer's answers cause (refusals, bad acks): one per peer and minute
        self._answers = LogLimiter(log)
        self._undelivered: dict[str, int] = dict.fromkeys(self._cores, 0)
        self._plans: dict[str, WavePlan] = {name: self.rule.plan() for name in self._cores}
        self._waves: dict[str, int] = dict.fromkeys(self._cores, 0)
        self._round_done = trio.Event()
        self._wake = trio.Event()  # a round ended, or a merge may have brought noise in

    @property
    def peer_failures(self) -> Mapping[bytes, int]:
        """Peer id -> pushes that got no answer since the last acknowledged one."""
        return self._failures

    @property
    def undelivered(self) -> Mapping[str, int]:
        """Model name -> sends (first or retransmitted) that got no answer: the
        same events as :attr:`peer_failures`, counted per model and never reset."""
        return self._undelivered

    @property
    def waves(self) -> Mapping[str, int]:
        """Model name -> exchange waves made after rounds (never reset)."""
        return self._waves

    @property
    def plans(self) -> Mapping[str, WavePlan]:
        """Model name -> its mixing state (``interval``, this round's ``waves`` and ``gaps``)."""
        return self._plans

    @property
    def noisy(self) -> bool:
        """True while some core holds mask noise apart from its trained values."""
        return any(core.noisy for core in self._cores.values())

    def add_core(self, name: str, core: PushSum, rule: WaveRule | None = None) -> None:
        """Start driving one more model (a semi-local model added while running), mixed
        as ``rule`` says (None: the driver's rule).

        Call it from the event loop; it joins the next round's mixing."""
        if name in self._cores:
            raise ValueError(f"add_core: model {name!r} is already driven")
        self._cores[name] = core
        self._undelivered.setdefault(name, 0)
        self._plans[name] = (self.rule if rule is None else rule).plan()
        self._waves.setdefault(name, 0)

    def signal_round(self) -> None:
        """The trainer finished a round: push (again) at the next opportunity."""
        self._round_done.set()
        self._wake.set()

    def notify_merged(self) -> None:
        """A push was merged into a core: if it brought mask noise, start mixing now."""
        if self.noisy:
            self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Push after every signalled round and while noise is held apart, forever (cancel to stop)."""
        task_status.started()
        while True:
            # Wake for the next round, or as soon as a merge brought noise in:
            # it must start mixing now, like its sender's, not a round later.
            # Otherwise, while this node trains, its sender pushes alone: its
            # noise ages with pushes that mix nothing into its own estimate,
            # and it folds mask-sized values into the trained ones.
            if not self._round_done.is_set() and not self.noisy:
                await self._wake.wait()
            self._wake = trio.Event()
            if self._round_done.is_set():
                self._round_done = trio.Event()
                await self.mix_round()
            # While mask noise is held apart from the trained values, keep
            # mixing until the next round: the noise cancels sooner and the
            # models rejoin the average after fewer rounds of local training.
            while self.noisy and not self._round_done.is_set():
                await self.push_wave()
                await trio.sleep(self.noisy_wave_pause)

    async def push_wave(self) -> None:
        """Push every model once (and retransmit expired pushes); wait for every answer."""
        now = self._clock()
        async with trio.open_nursery() as nursery:
            for name, core in self._cores.items():
                for peer, push in core.expire(now, self.push_timeout):
                    nursery.start_soon(self._send, name, core, peer, push)
                for peer, push in core.make_pushes(self._targets(core, now), now):
                    nursery.start_soon(self._send, name, core, peer, push)
                if self.epochs is not None:
                    self.epochs.settle(name, core)

    async def mix_round(self) -> None:
        """After a training round: mix every model as its plan decides; wait for every answer."""
        if self.epochs is not None:
            # masking epochs due now agree their pairs before any data push
            async with trio.open_nursery() as nursery:
                for name, core in self._cores.items():
                    nursery.start_soon(self.epochs.prepare, name, core)
        async with trio.open_nursery() as nursery:
            for name, core in self._cores.items():
                if self._plans[name].begin_round():
                    nursery.start_soon(self._mix_model, name, core)
                else:  # auto skips this round's exchanges, not the retransmissions
                    for peer, push in core.expire(self._clock(), self.push_timeout):
                        nursery.start_soon(self._send, name, core, peer, push)

    async def _mix_model(self, name: str, core: PushSum) -> None:
        """One model's waves after a round: start them while the plan says so and the
        core allows (``max_in_flight``), waiting for answers in between."""
        plan = self._plans[name]
        due = 0  # sends of this model not yet answered
        answered = trio.Event()

        async def exchange(peer: bytes, push: Push) -> None:
            nonlocal due
            try:
                gap = await self._send(name, core, peer, push)
                if gap is not None:
                    plan.gaps.append(gap)
            finally:
                due -= 1
                answered.set()

        async with trio.open_nursery() as nursery:
            while True:
                now = self._clock()
                for peer, push in core.expire(now, self.push_timeout):
                    due += 1
                    nursery.start_soon(exchange, peer, push)
                step = plan.next(core.round_drift, due)
                if step is Next.STOP:
                    break
                if step is Next.START:
                    pushes = core.make_pushes(self._targets(core, now), now)
                    if self.epochs is not None:
                        self.epochs.settle(name, core)
                    if pushes:
                        plan.waves += 1
                        self._waves[name] = self._waves.get(name, 0) + 1
                        for peer, push in pushes:
                            due += 1
                            nursery.start_soon(exchange, peer, push)
                        continue
                if not due:
                    break  # nothing to wait for: no partner, or a push awaits its retransmission
                await answered.wait()
                answered = trio.Event()
        plan.end_round(core.round_drift)
        log.debug("mixed %s after a round: %d waves, drift %s, gaps %s, next interval %d",
                  name, plan.waves, core.round_drift, [f"{g:.3g}" for g in plan.gaps],
                  plan.interval)

    def _targets(self, core: PushSum, now: float) -> list[bytes]:
        """The holders to offer ``core.make_pushes``, in the order to try them."""
        wanted = core.holders_wanted
        if self.partners is None:
            return list(self._holders(core.fingerprint, wanted))
        pool = self._holders(core.fingerprint, max(wanted, self.partners.settings.candidates))
        return self.partners.choose(pool, wanted, now)

    async def _send(self, name: str, core: PushSum, peer: bytes, push: Push) -> float | None:
        """Deliver one push and feed the outcome to the core; the partner gap it measured, if any."""
        started = self._clock()
        try:
            ack = await self._transport.push(peer, push)
        except PushRefused as exc:
            # protocol detail (the node's status names the most frequent refusal)
            self._answers.log(self._clock(), _short(peer), logging.DEBUG,
                              "push of %s to %s refused: %s", name, _short(peer), exc.reason)
            core.on_undelivered(push.push_id, maybe_delivered=False)
            return None
        except PushUndelivered as exc:
            # The core decides: forgotten with the weight kept if surely not
            # merged, else kept outstanding for expire() to retransmit.
            core.on_undelivered(push.push_id, maybe_delivered=exc.maybe_delivered)
            self._undelivered[name] = self._undelivered.get(name, 0) + 1
            failures = self._count_failure(peer)
            if self.epochs is not None:
                self.epochs.unreachable(peer, surely=not exc.maybe_delivered, failures=failures)
            if (self.partners is not None and exc.maybe_delivered
                    and failures % core.max_attempts == 0):
                # Silent for a push's every attempt in a row: a peer that takes
                # requests and never answers (or hangs) blocks this model's new
                # pushes for max_attempts x push_timeout each time it is picked
                # (one such holder among 3 cut a node's exchanges to 6 %).  A
                # strike pauses it, as a sink; random loss rarely fails so often.
                self.partners.strike(peer, self._clock())
            # Said at the 1st, 10th, 100th... failure in a row: visible, yet
            # bounded however often a peer fails.
            level = logging.INFO if _is_power_of_ten(failures) else logging.DEBUG
            log.log(level, "push of %s to %s failed (%d in a row): %s", name, _short(peer),
                    failures, exc.reason or type(exc).__name__)
            return None
        # of the mass as it was when the push was made (merges since do not count)
        fraction = core.push_fraction(push.push_id)
        try:
            core.on_ack(peer, ack, self._clock())
        except RejectedAck as exc:
            self._answers.warning(self._clock(), _short(peer), "ack from %s for %s rejected: %s",
                                  _short(peer), name, exc)
            if self.partners is not None and isinstance(exc, RejectedReply):
                self.partners.strike(peer, self._clock())  # merged our share, lied in its reply
            return None
        if self.partners is not None:
            self.partners.on_answer(peer, push, ack, self._clock(), reply=core.last_reply)
        if self.epochs is not None and ack.reply is None and fraction is not None:
            self.epochs.pushed(name, peer, fraction, push.push_id)
        if self._durations is not None:
            self._durations.add(self._clock() - started)
        self._failures.pop(peer, None)
        return core.last_gap if ack.reply is not None else None

    def _count_failure(self, peer: bytes) -> int:
        count = self._failures.pop(peer, 0) + 1
        self._failures[peer] = count  # newest last; the oldest go past the bound
        while len(self._failures) > self._max_tracked:
            self._failures.pop(next(iter(self._failures)))
        return count


def _short(peer: bytes) -> str:
    return bytes(peer)[:4].hex()


def _is_power_of_ten(n: int) -> bool:
    while n % 10 == 0 and n > 1:
        n //= 10
    return n == 1


__all__ = [
    "MAX_TRACKED_PEERS",
    "NOISY_WAVE_PAUSE",
    "DurationSink",
    "EpochHook",
    "GossipDriver",
    "Holders",
    "PushTransport",
]
