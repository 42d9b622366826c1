"""The strategy seam: what a node trains and what it exchanges, chosen by ``[strategy]``.

A node always runs peer sampling, its transport and its trainer. A *strategy*
decides what collaboration adds on top of local SGD: ``partial`` (the default:
push-sum averaging of the partial models, nothing added), ``fedcurv`` (plus an
elastic penalty from gossiped Fisher sums), ``graph`` (personalised models mixed
along a learned collaboration graph), ``fedlinked`` (distillation towards peers'
representations of the public split; no parameter leaves the node).

Each strategy is one folder, ``p2p/strategies/<name>/``: ``settings.py`` (its
``[strategy]`` keys and checks; no torch), ``messages.py`` (its wire messages, if
any), ``maths.py`` (torch and numpy only: what the lab's references reuse) and
``node.py`` (a :class:`Strategy` over the node's :class:`StrategyHost`, the only
part of the node it sees); its ``__init__.py`` declares a :class:`StrategyPlugin`,
named by one line of :mod:`p2p.strategies.registry`. docs/design/architecture.md.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from p2p.config import NodeConfig
from p2p.config.plugins import PluginSection

if TYPE_CHECKING:
    import numpy as np
    import torch
    import trio

    from gossip.pushsum import PushSum
    from p2p.config import NodeConfig
    from p2p.runtime.assembly import LearningSetup
    from p2p.runtime.train_runner import TrainRunner
    from p2p.wire.codec import Message, WireMessage
    from p2p.wire.dispatch import RequestDispatcher

__all__ = ["LossTerm", "OutOfStep", "Strategy", "StrategyFactory", "StrategyHost",
           "StrategyPlugin", "ValueCheck"]

R = TypeVar("R")

#: An extra term added to each mini-batch's training loss; it reads the model
#: through a closure (a penalty on the parameters, a distillation loss on the
#: public split). Called inside the training step, in the trainer's thread.
LossTerm = Callable[[], "torch.Tensor"]

#: Why a gossiped vector's pushed values are impossible for an honest holder, or None.
ValueCheck = Callable[["np.ndarray"], "str | None"]


class OutOfStep(str):
    """A :data:`ValueCheck` reason that is no offence: the values are an honest holder's,
    only not mergeable here now (another generation of a renewed sum)."""


class StrategyHost(Protocol):
    """What a node offers the strategy it runs."""

    @property
    def node_id(self) -> bytes:
        """This node's id (its Ed25519 public key)."""
        ...

    @property
    def learning(self) -> LearningSetup:
        """Network, layout, data and trainer of this node."""
        ...

    @property
    def cores(self) -> Mapping[str, PushSum]:
        """Push-sum core per shared model name (empty when nothing is shared)."""
        ...

    @property
    def requests(self) -> RequestDispatcher:
        """Where the strategy registers the handlers of its request types."""
        ...

    @property
    def runner(self) -> TrainRunner:
        """Runs blocking work (a Fisher estimate, an SVD) off the event loop, or
        inline in a simulation."""
        ...

    @property
    def model_lock(self) -> trio.Lock:
        """Held while the trainer trains or the network is read or written."""
        ...

    def rounds_done(self) -> int:
        """Training rounds done so far."""
        ...

    def sample_peers(self, count: int, fingerprint: bytes | None = None) -> Sequence[bytes]:
        """Up to ``count`` distinct peers from the peer-sampling view (holders of
        ``fingerprint`` when given); their addresses are remembered for
        :meth:`request`."""
        ...

    async def request(self, peer: bytes, msg: Message, expected: type[R], *,
                      timeout: float | None = None) -> R | None:
        """Send ``msg`` to ``peer`` and return its reply if it is an ``expected``;
        None when the peer is unknown, unreachable, refused or answered with
        another type (logged, never raised: the strategy tries again later)."""
        ...

    def add_gossiped(self, name: str, fingerprint: bytes, values: np.ndarray,
                     check: ValueCheck | None = None) -> PushSum:
        """Gossip an auxiliary vector by push-sum among the nodes that add the same
        ``fingerprint`` (same rules, guard and transport as a shared model); returns
        its core. The strategy changes its contribution with ``core.set_values``
        between exchanges, as the model sync does. ``check`` (optional) says why a
        push's values are impossible for an honest holder: such pushes are refused
        (the vector then travels by one-way pushes only)."""
        ...


class Strategy(Protocol):
    """One collaboration scheme run by a node (see the module docstring)."""

    #: The ``strategy.name`` that selects it.
    name: str

    def install(self, host: StrategyHost) -> None:
        """Called once when the node is built, before it runs: register request
        handlers, add gossiped vectors."""
        ...

    def loss_term(self) -> LossTerm | None:
        """An extra training-loss term, or None."""
        ...

    def after_round(self) -> None:
        """After each training round, under the model lock, once the push-sum cores
        have taken the round's update (plain, quick work; blocking work goes through
        ``host.runner`` from :meth:`run`)."""
        ...

    async def run(self) -> None:
        """The strategy's background task (pulls from sampled peers); cancelled when
        the node stops. A strategy with nothing to do in the background returns."""
        ...

    def status(self) -> Mapping[str, object]:
        """What ``p2p status``, ``p2p metrics`` and the swarm's JSON show of it
        (JSON-able values)."""
        ...


#: Builds a strategy from the node's whole configuration.
StrategyFactory = Callable[[NodeConfig], Strategy]


@dataclass(frozen=True, kw_only=True)
class StrategyPlugin(PluginSection[NodeConfig]):
    """One strategy as the registry knows it: its config part (:class:`PluginSection`:
    name, summary, settings, checks), its wire messages, and where its node side is
    built: ``"module:factory"`` (imported only when a node runs it, with torch) or
    the factory itself."""

    build: str | StrategyFactory
    messages: tuple[WireMessage, ...] = ()

    def factory(self) -> StrategyFactory:
        """The node side's factory (imports it)."""
        if not isinstance(self.build, str):
            return self.build
        module, _, attr = self.build.partition(":")
        factory: StrategyFactory = getattr(importlib.import_module(module), attr)
        return factory
