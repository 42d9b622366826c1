"""Builders of a node's gossip parts from its ``[gossip]`` settings.

:func:`new_core` is the push-sum core of one shared model (the node builds one
per model, and one more when automatic grouping adds a model); :func:`gossip_driver`
is the node's :class:`~gossip.GossipDriver` over its transport and
:class:`~p2p.runtime.peer_book.PeerBook`. :class:`~p2p.runtime.node.Node`
composes them. See docs/design/architecture.md.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np

from gossip import GossipDriver, PartnerChoice, PushSum
from gossip.masking.epochs import magnitude_bound
from gossip.validation import MAX_ABS_VALUE
from p2p.runtime.transport_adapters import PushOverTransport

if TYPE_CHECKING:
    from gossip import Push
    from gossip.driver import DurationSink, EpochHook
    from p2p.config.schema import GossipConfig
    from p2p.runtime.node_transport import NodeTransport
    from p2p.runtime.peer_book import PeerBook

__all__ = ["gossip_driver", "new_core"]


def new_core(g: GossipConfig, fingerprint: bytes, values: np.ndarray, *,
             rng: np.random.Generator | None = None) -> PushSum:
    """A push-sum core for the shared model ``fingerprint``, starting from ``values``;
    ``rng``: its push ids, masks and guard draws (None: the OS, as a daemon)."""
    return PushSum(
        fingerprint,
        values,
        rng=rng,
        fanout=g.fanout,
        privacy=g.masking,
        masked_pushes=0,  # "masked": the noise comes from epochs' pairs (NodeMasking)
        # the receivers' bound follows from the mask scale in use (masked mode)
        max_abs_value=(magnitude_bound(g.epochs) if g.masking == "masked"
                       else MAX_ABS_VALUE),
        mask_std=g.mask_std,
        unmask_after=g.unmask_after,
        exchange=g.exchange,
        encoding=g.encoding,
        delta_encoding=g.delta_encoding,
        max_in_flight=g.max_in_flight,
        guard=g.guard,
    )


def gossip_driver(g: GossipConfig, cores: Mapping[str, PushSum], transport: NodeTransport,
                  peers: PeerBook, *,
                  on_outcome: Callable[[Push, str | None], None],
                  push_durations: DurationSink, epochs: EpochHook | None,
                  rng: random.Random) -> GossipDriver:
    """The driver pushing ``cores`` to holders ``peers`` samples, over ``transport``;
    ``on_outcome``: told how each push went (the collaboration watcher); ``rng``: the
    partner choice's draws."""
    return GossipDriver(
        cores,
        PushOverTransport(transport, peers.addresses, timeout=g.push_timeout,
                          on_unreachable=peers.on_unreachable, on_outcome=on_outcome),
        peers.holders,
        push_timeout=g.push_timeout,
        pushes_per_round=g.pushes_per_round,
        push_durations=push_durations,
        # push targets: holders that gave weight back first (docs/design/trust.md, "Partner choice")
        partners=(PartnerChoice(rng, on_strike=peers.distrust)
                  if g.partner_choice == "reciprocity" else None),
        epochs=epochs,
    )
