"""Automatic grouping plugged into a node: its state, request handler, loop and hold.

:class:`NodeGroupingHost` is everything ``clustering.mode = "auto"`` adds to a
:class:`~p2p.runtime.node.Node`: it builds the node's
:class:`~p2p.runtime.grouping.driver.NodeGrouping` (None when the mode is
"off"), registers its ``GroupsPull`` handler, and is the
:class:`~p2p.runtime.grouping.driver.GroupingHost` grouping runs against.
:meth:`run` is the grouping task, :meth:`hold` the trainer's wait after an
attempt's pre-training (``clustering.hold``); :meth:`status`, :meth:`record`
and :meth:`restore` serve the admin commands and the checkpoint. Changing the
layout stays the node's job (:meth:`GroupedNode.add_semi_local`).

How it works: docs/design/partial-models.md ("At run time").
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Protocol

import numpy as np
import trio

from p2p.config import ConfigError
from p2p.runtime.grouping.driver import NodeGrouping
from p2p.runtime.grouping.messages import GroupsPull, GroupsReply
from p2p.runtime.grouping.status import GroupsStatus
from p2p.wire.messages import ERROR_BAD_REQUEST, Error
from p2p.wire.transport import TransportError

if TYPE_CHECKING:
    from learner.spec import PartialModelSpec
    from p2p.config import NodeConfig
    from p2p.runtime.assembly import LearningSetup
    from p2p.runtime.checkpoint import GroupsRecord
    from p2p.runtime.grouping.agreement import FindGroups, JoinGroup
    from p2p.runtime.node_transport import NodeTransport
    from p2p.runtime.peer_book import PeerBook
    from p2p.runtime.train_runner import TrainRunner
    from p2p.wire.dispatch import RequestDispatcher
    from p2p.wire.handshake import PeerInfo
    from p2p.wire.identity import Identity

__all__ = ["GroupedNode", "NodeGroupingHost", "build_grouping"]

logger = logging.getLogger(__name__)


class GroupedNode(Protocol):
    """What :class:`NodeGroupingHost` uses of :class:`~p2p.runtime.node.Node` (a Protocol:
    importing the node here would be an import cycle)."""

    identity: Identity
    learning: LearningSetup
    config: NodeConfig
    requests: RequestDispatcher
    runner: TrainRunner
    transport: NodeTransport
    peers: PeerBook

    @property
    def model_lock(self) -> trio.Lock: ...
    @property
    def shuffle_timeout(self) -> float: ...
    def rounds_done(self) -> int: ...
    def declare_model(self, spec: PartialModelSpec) -> str: ...
    async def add_semi_local(self, spec: PartialModelSpec, start: str) -> None: ...


def build_grouping(config: NodeConfig, identity: Identity, learning: LearningSetup, *,
                   find: FindGroups | None = None,
                   join: JoinGroup | None = None) -> NodeGrouping | None:
    """A node's automatic grouping (None with ``clustering.mode = "off"``); a clear
    :class:`~p2p.config.ConfigError` when the task has no public split to project on."""
    c = config.clustering
    if not c.auto:
        return None
    data, layout = learning.data, learning.layout
    if len(data.public_y) == 0:
        raise ConfigError(
            f"clustering.mode: \"auto\" projects the node on the task's public split, but "
            f"task {config.data.task!r} has none here; set data.public_size (e.g. 300)",
            key="clustering.mode")
    base = c.global_model(layout)
    return NodeGrouping(c, identity, global_model=base,
                        global_fingerprint=layout.fingerprint(base),
                        counts=c.semi_local_counts(layout),
                        length=data.num_classes * layout.network.sizes[-1],
                        find=find, join=join, training_rounds=config.training.rounds)


class NodeGroupingHost:
    """A node's automatic grouping and its plumbing (see the module docstring).

    Built in the node's constructor once its models are (``find``/``join``: tests
    inject small stand-ins for :mod:`learner.grouping`'s).
    """

    def __init__(self, node: GroupedNode, *, find: FindGroups | None = None,
                 join: JoinGroup | None = None) -> None:
        self._node = node
        #: the grouping (None with ``clustering.mode = "off"``: every call is then a no-op)
        self.grouping = build_grouping(node.config, node.identity, node.learning,
                                       find=find, join=join)
        self._held_for = -1  # the grouping attempt training last waited for (clustering.hold)
        if self.grouping is not None:
            node.requests.add(GroupsPull, self._serve_pull)

    # ------------------------------------------------------------------ node surface

    def status(self) -> GroupsStatus:
        """Where automatic grouping stands (``p2p groups``, ``p2p status``)."""
        if self.grouping is None:
            return GroupsStatus.off()
        return self.grouping.status(self._node.rounds_done())

    def record(self) -> GroupsRecord | None:
        """The applied groups, for the checkpoint (None before, or without grouping)."""
        return None if self.grouping is None else self.grouping.record()

    def restore(self, groups: GroupsRecord) -> None:
        """Resume a checkpoint's groups: declare its semi-local model again (before
        the node runs; no agreement is redone)."""
        if self.grouping is None:
            logger.warning("the checkpoint holds automatic groups (epoch %d) but "
                           "clustering.mode is \"off\": their semi-local model is dropped",
                           groups.epoch)
            return
        spec = self.grouping.restore(groups)
        if spec is not None:
            self._node.declare_model(spec)
        if not groups.fingerprint:
            logger.info("resumed %d projection records of grouping epoch %d; still collecting",
                        len(groups.records), groups.epoch)
            return
        logger.info("resumed the groups of epoch %d (%s)%s", groups.epoch,
                    groups.fingerprint[:12],
                    f": semi-local model {spec.name}" if spec is not None else ": alone")

    async def run(self) -> None:
        """The node's grouping task (returns at once without grouping)."""
        if self.grouping is not None:
            await self.grouping.run(self)

    async def hold(self, stop: trio.Event) -> None:
        """Once per grouping attempt, at the end of its pre-training: wait
        (``clustering.hold`` seconds at most, or until ``stop``) for the attempt to
        settle, so the rounds after it train the groups (or pre-train for the next
        attempt)."""
        g = self.grouping
        if (g is None or self._held_for >= g.attempt
                or not g.holds_training(self._node.rounds_done())):
            return
        self._held_for = g.attempt
        hold = self._node.config.clustering.hold
        async with trio.open_nursery() as nursery:
            async def stop_waits() -> None:
                await stop.wait()
                nursery.cancel_scope.cancel()
            nursery.start_soon(stop_waits)
            if not await g.wait_applied(hold):
                logger.warning("grouping epoch %d: no groups applied %.0f s after pre-training "
                               "(clustering.hold); training on, the groups apply when agreed",
                               self._node.config.clustering.epoch, hold)
            nursery.cancel_scope.cancel()

    async def _serve_pull(self, peer: PeerInfo, msg: GroupsPull) -> GroupsReply | Error:
        if self.grouping is None:  # pragma: no cover - only registered with grouping on
            return Error(code=ERROR_BAD_REQUEST, reason="this node does not group")
        return self.grouping.on_pull(peer.node_id, msg)

    # ------------------------------------------------------------------ GroupingHost

    async def pull_groups(self, peer: bytes, msg: GroupsPull) -> GroupsReply | None:
        """One record exchange with ``peer`` (None when it failed: tried again later)."""
        node = self._node
        address = node.peers.address_of(peer)
        if address is None:
            return None
        timeout = node.shuffle_timeout
        try:
            with trio.move_on_after(timeout):
                reply = await node.transport.request(address, msg, node_id=peer,
                                                     timeout=timeout)
                if isinstance(reply, GroupsReply):
                    return reply
                logger.debug("groups pull to %s answered with %s", address,
                             type(reply).__name__)
        except TransportError as exc:
            logger.debug("groups pull to %s failed: %s", address, exc)
        return None

    def grouping_peer(self) -> bytes | None:
        """A sampled peer to pull records from (a holder of the global model)."""
        sampler = self._node.peers.started
        if sampler is None or self.grouping is None:
            return None
        fp = self._node.learning.fingerprints[self.grouping.global_model]
        d = sampler.sample(fp) or sampler.sample()
        if d is None:
            return None
        self._node.peers.remember(d.node_id, d.address)
        return d.node_id

    async def project(self) -> np.ndarray:
        """The node's projection on the task's public split (between rounds)."""
        from learner.grouping.projection import project_network
        node = self._node
        async with node.model_lock:
            data = node.learning.data
            return await node.runner.run_blocking(functools.partial(
                project_network, node.learning.network, data.public_x, data.public_y,
                data.num_classes))

    async def add_semi_local(self, spec: PartialModelSpec, start: str) -> None:
        """Add the agreed semi-local model to the node (the node changes its layout)."""
        await self._node.add_semi_local(spec, start)

    def rounds_done(self) -> int:
        """Training rounds the node has done (counting a resumed checkpoint's)."""
        return self._node.rounds_done()
