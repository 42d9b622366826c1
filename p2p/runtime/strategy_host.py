"""A node's collaboration strategy: what it may use of the node, and how the node runs it.

:class:`StrategySupervisor` is the node's side of ``[strategy]``: it builds the
configured strategy, installs it with a :class:`NodeStrategyHost`, sets its loss
term on the trainer and runs its background task and after-round step, so that
a bug in the strategy switches the strategy off, never the node
(:attr:`StrategySupervisor.failure` says why; :meth:`StrategySupervisor.status`
is what ``p2p status`` shows). :class:`NodeStrategyHost` hands the strategy the
node's learning setup, push-sum cores, request dispatcher, runner and model
lock, sampled peers (:class:`~p2p.runtime.peer_book.PeerBook`), one-off
requests and *gossiped vectors* (:meth:`NodeStrategyHost.add_gossiped`:
auxiliary float64 push-sum cores, optionally a :class:`CheckedPushSum` whose
``check`` refuses impossible values and may answer :class:`OutOfStep`).

How it works: docs/design/strategies.md ("Gossiped vectors").
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
import trio

from gossip import InvalidValues, PushSum, RejectedPush
from gossip.messages import Push, PushAck
from gossip.validation import MAX_ABS_VALUE, validate_push
from p2p.config.schema import push_frame_bytes
from p2p.runtime.entropy import generator_for
from p2p.runtime.node_transport import node_frame_limit
from p2p.strategies import OutOfStep, Strategy, ValueCheck, build_strategy
from p2p.wire.codec import Message
from p2p.wire.transport import TransportError

if TYPE_CHECKING:
    from gossip import GossipDriver
    from p2p.config import NodeConfig
    from p2p.runtime.assembly import LearningSetup
    from p2p.runtime.entropy import Entropy
    from p2p.runtime.node_transport import NodeTransport
    from p2p.runtime.peer_book import PeerBook
    from p2p.runtime.train_runner import TrainRunner
    from p2p.wire.dispatch import RequestDispatcher
    from p2p.wire.identity import Identity

__all__ = ["GOSSIPED_ENCODING", "CheckedPushSum", "HostedNode", "NodeStrategyHost",
           "StrategySupervisor"]

logger = logging.getLogger(__name__)

R = TypeVar("R")

#: How gossiped vectors travel (absolute values and deltas alike): exact sums matter
#: more than bytes for what strategies gossip (FedCurv's Fisher sums).
GOSSIPED_ENCODING = "f64"


class CheckedPushSum(PushSum):
    """A push-sum core that refuses pushes, and drops push-pull replies, whose values
    fail a strategy's ``check`` (run before the merge; delta pushes are refused), and
    replies from its free mass (see the module docstring)."""

    def __init__(self, fingerprint: bytes, values: np.ndarray, *, check: ValueCheck,
                 **options: Any) -> None:
        # absolute values in every request, so that every push can be checked
        super().__init__(fingerprint, values, reference_store_bytes=0, **options)
        self._check = check

    def on_push(self, sender: bytes, push: Push, now: float) -> PushAck:
        try:
            y = validate_push(push, self.fingerprint, self.length, self.max_weight)
        except RejectedPush:
            return super().on_push(sender, push, now)  # refused, counted and logged there
        # one-way pushes are absolute: a delta (``base``) is no honest holder's
        reason = "a delta push for a checked vector" if push.base else self._check(y)
        if reason is not None:
            self._c["rejected"] += 1
            if isinstance(reason, OutOfStep):
                logger.debug("refused push for gossiped vector %s: %s",
                             self.fingerprint[:4].hex(), reason)
            else:
                self._offences.warning(now, sender.hex() if isinstance(sender, bytes) else "?",
                                       "rejected push for gossiped vector %s: %s",
                                       self.fingerprint[:4].hex(), reason)
            raise RejectedPush(str(reason))
        return super().on_push(sender, push, now)

    def _check_reply(self, o: Any, ack: PushAck) -> tuple[float, np.ndarray]:
        """The base checks, then ``check`` on the reply's values: a lying responder
        cannot inject through a reply what a push could not."""
        r, d = super()._check_reply(o, ack)
        reason = self._check(o.sent + d)
        if reason is not None:
            raise InvalidValues(f"reply values: {reason}")
        return r, d

    def _reply(self, sender: bytes, q_a: np.ndarray, push: Push, r: float,
               clip: float = 1.0) -> PushAck:
        """Reply from the free mass: the shares promised to this node's pushes in flight
        (``weight * sent`` each) are set aside, the base reply runs on the rest (``r``
        is at most its weight over ``fanout + 1``), and they are put back, so that the
        acks of those pushes take out exactly what is still here."""
        held = list(self._outstanding.values())
        if not held:
            return super()._reply(sender, q_a, push, r, clip)
        est = self._est  # the core's state (gossip.estimate)
        free_w = self.available_weight
        reserved_w = est.w - free_w
        reserved = sum(o.push.weight * o.sent for o in held)
        free = (est.w * est.x - reserved) / free_w
        est.x = est.z = free  # no noise is ever held here: x and z are one array
        est.w = free_w
        ack = super()._reply(sender, q_a, push, r, clip)
        total_w = est.w + reserved_w
        whole = (est.w * est.x + reserved) / total_w
        est.x = est.z = whole
        est.w = total_w
        return ack


class HostedNode(Protocol):
    """What :class:`NodeStrategyHost` uses of :class:`~p2p.runtime.node.Node` (a Protocol:
    importing the node here would be an import cycle)."""

    identity: Identity
    learning: LearningSetup
    cores: dict[str, PushSum]
    gossiped: dict[str, PushSum]
    by_fingerprint: dict[bytes, str]
    requests: RequestDispatcher
    runner: TrainRunner
    config: NodeConfig
    transport: NodeTransport
    gossip: GossipDriver
    peers: PeerBook
    entropy: Entropy | None

    @property
    def model_lock(self) -> trio.Lock: ...
    @property
    def shuffle_timeout(self) -> float: ...
    def rounds_done(self) -> int: ...
    def retag(self) -> None: ...


class NodeStrategyHost:
    """:class:`~p2p.strategies.base.StrategyHost` over a node (built by the node itself)."""

    def __init__(self, node: HostedNode) -> None:
        self._node = node

    @property
    def node_id(self) -> bytes:
        return self._node.identity.node_id

    @property
    def learning(self) -> LearningSetup:
        return self._node.learning

    @property
    def cores(self) -> Mapping[str, PushSum]:
        return self._node.cores

    @property
    def requests(self) -> RequestDispatcher:
        return self._node.requests

    @property
    def runner(self) -> TrainRunner:
        return self._node.runner

    @property
    def model_lock(self) -> trio.Lock:
        return self._node.model_lock

    def rounds_done(self) -> int:
        return self._node.rounds_done()

    def sample_peers(self, count: int, fingerprint: bytes | None = None) -> Sequence[bytes]:
        """Up to ``count`` distinct peers of the view (holders of ``fingerprint`` when given);
        nothing before the node listens."""
        peers = self._node.peers
        if peers.started is None or count < 1:
            return []
        if fingerprint is not None:
            return peers.holders(fingerprint, count)
        view = peers.sampler.view()
        peers.sampler.rng.shuffle(view)
        chosen = view[:count]
        for d in chosen:
            peers.remember(d.node_id, d.address)
        return [d.node_id for d in chosen]

    async def request(self, peer: bytes, msg: Message, expected: type[R], *,
                      timeout: float | None = None) -> R | None:
        node = self._node
        address = node.peers.address_of(peer)
        if address is None:
            logger.debug("%s to %s: address unknown", type(msg).__name__, peer[:4].hex())
            return None
        limit = node.shuffle_timeout if timeout is None else timeout
        try:
            with trio.move_on_after(limit):
                reply = await node.transport.request(address, msg, node_id=peer, timeout=limit)
                if isinstance(reply, expected):
                    return reply
                logger.debug("%s to %s answered with %s", type(msg).__name__, address,
                             type(reply).__name__)
        except TransportError as exc:
            logger.debug("%s to %s failed: %s", type(msg).__name__, address, exc)
        return None

    def add_gossiped(self, name: str, fingerprint: bytes, values: np.ndarray,
                     check: ValueCheck | None = None) -> PushSum:
        node = self._node
        if name in node.cores or name in node.gossiped:
            raise ValueError(f"add_gossiped: {name!r} is already a model or gossiped vector")
        if fingerprint in node.by_fingerprint:
            raise ValueError(f"add_gossiped({name!r}): fingerprint {fingerprint[:4].hex()} "
                             f"is already {node.by_fingerprint[fingerprint]!r}'s")
        g = node.config.gossip
        if g.masking != "none":
            raise ValueError(f"add_gossiped({name!r}): gossiped vectors are not masked; "
                             f"gossip.privacy {g.privacy!r} would leave them in clear")
        vector = np.asarray(values, dtype=np.float64)
        limit = node_frame_limit(node.config)
        if push_frame_bytes(vector.size) > limit:
            raise ValueError(f"add_gossiped({name!r}): a push of {vector.size} values "
                             f"({push_frame_bytes(vector.size)} bytes) exceeds the node's "
                             f"frame limit ({limit} bytes, from its largest model)")
        # The merge guard's weight checks stay; its value clipping does not: a
        # contribution that jumps (a new Fisher estimate) is a legitimate large update,
        # and a clipped reply's excess is dropped, which would make the sums inexact.
        guard = None if g.guard is None else dataclasses.replace(g.guard, clip_factor=0.0)
        # push ids and guard draws: the OS's in a daemon, the node's streams in a simulation
        rng = generator_for(node.entropy, f"gossiped:{name}")
        core: PushSum
        if check is None:
            core = PushSum(fingerprint, vector, fanout=g.fanout, exchange=g.exchange,
                           encoding=GOSSIPED_ENCODING, delta_encoding=GOSSIPED_ENCODING,
                           max_in_flight=g.max_in_flight, guard=guard,
                           max_abs_value=MAX_ABS_VALUE, rng=rng)
        else:
            core = CheckedPushSum(fingerprint, vector, check=check, fanout=g.fanout,
                                  exchange=g.exchange, encoding=GOSSIPED_ENCODING,
                                  delta_encoding=GOSSIPED_ENCODING,
                                  max_in_flight=g.max_in_flight, guard=guard,
                                  max_abs_value=MAX_ABS_VALUE, rng=rng)
        node.gossiped[name] = core
        node.by_fingerprint[fingerprint] = name
        # exchanged after every round: the adaptive rule spaces out the rounds of a core
        # whose exchanges look mixed, and a strategy's sum starts all zeros on most
        # holders (FedCurv's Fisher vector mixed once in about 8 rounds so)
        node.gossip.add_core(name, core, rule=dataclasses.replace(node.gossip.rule,
                                                                  max_interval=1))
        node.retag()
        logger.info("gossiping %s (%d values) among holders of %s", name, vector.size,
                    fingerprint[:6].hex())
        return core


class StrategySupervisor:
    """A node's collaboration strategy, built, installed and run (see the module docstring).

    Built last in the node's constructor, then :meth:`install`-ed once the node
    holds it: the strategy sees the whole node through :class:`NodeStrategyHost`,
    ``node.strategy`` included.
    """

    def __init__(self, node: HostedNode) -> None:
        self._node = node
        #: the strategy ``[strategy]`` names
        self.strategy: Strategy = build_strategy(node.config)
        #: why the strategy was switched off, if it failed (the node runs on without it)
        self.failure: str | None = None

    def install(self) -> None:
        """Hand the strategy its host and put its loss term (if any) into the trainer."""
        self.strategy.install(NodeStrategyHost(self._node))
        self._node.learning.trainer.loss_term = self.strategy.loss_term()

    def status(self) -> dict[str, Any]:
        """What the strategy reports (``p2p status``, ``p2p metrics``, the swarm's JSON)."""
        status: dict[str, Any] = {"name": self.strategy.name, **self.strategy.status()}
        if self.failure is not None:
            status["failed"] = self.failure
        return status

    async def run(self) -> None:
        """The strategy's background task: a bug in it switches the strategy off, never
        the node (its nursery would otherwise stop without a final checkpoint)."""
        try:
            await self.strategy.run()
        except Exception as exc:
            self.failed("run", exc)

    def after_round(self) -> None:
        """The strategy's step after a training round (the caller holds the model lock);
        nothing once it failed."""
        if self.failure is not None:
            return
        try:
            self.strategy.after_round()
        except Exception as exc:
            self.failed("after_round", exc)

    def failed(self, where: str, exc: Exception) -> None:
        """Switch the strategy off after ``exc`` in ``where``: no loss term, no more
        after-round calls; the node keeps training and gossiping its shared models."""
        self.failure = f"{where}: {type(exc).__name__}: {exc}"
        self._node.learning.trainer.loss_term = None
        logger.error("strategy %s failed in %s and is switched off; the node trains and "
                     "gossips on without it", self.strategy.name, where, exc_info=exc)
