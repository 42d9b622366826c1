"""Push-sum averaging per partial model, with an optional masked exchange.

Sans-IO: the cores take messages, the current time and a random generator and
return what to send.  No torch, trio or p2p imports here.
"""

from gossip.counters import PushSumCounters
from gossip.errors import GossipError, InvalidValues, RejectedAck, RejectedPush
from gossip.masking import MaskSource, mask_source_from
from gossip.messages import FINGERPRINT_BYTES, Push, PushAck
from gossip.pushsum import PRIVACY_MODES, PushSum, PushSumSnapshot
from gossip.simulator import (
    Faults,
    ModelSpec,
    Sampler,
    Simulation,
    model_fingerprint,
    node_id,
    random_models,
    uniform_sampler,
)

__all__ = [
    "FINGERPRINT_BYTES",
    "PRIVACY_MODES",
    "Faults",
    "GossipError",
    "InvalidValues",
    "MaskSource",
    "ModelSpec",
    "Push",
    "PushAck",
    "PushSum",
    "PushSumCounters",
    "PushSumSnapshot",
    "RejectedAck",
    "RejectedPush",
    "Sampler",
    "Simulation",
    "mask_source_from",
    "model_fingerprint",
    "node_id",
    "random_models",
    "uniform_sampler",
]
