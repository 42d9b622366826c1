"""Push-sum averaging per partial model, with an optional masked exchange.

Sans-IO: the cores take messages, the current time and a random generator and
return what to send.  :class:`GossipDriver` (trio) runs them over a
:class:`PushTransport`;  The driver names are imported lazily so that importing this package
never imports trio.  No torch or p2p imports here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gossip.compression import (
    ENCODINGS,
    INT8_BLOCK,
    EncodedVector,
    decode,
    encode,
    encoded_nbytes,
)
from gossip.counters import PushSumCounters
from gossip.drift_budget import DriftBudget
from gossip.dup_window import DupWindow, Seen
from gossip.errors import (
    GossipError,
    InvalidValues,
    PushRefused,
    PushUndelivered,
    RejectedAck,
    RejectedPush,
    RejectedReply,
)
from gossip.log_limit import LogLimiter
from gossip.masking import MaskSource, mask_source_from
from gossip.masking.epochs import (
    MASK_MESSAGES,
    EpochSettings,
    MaskEpochs,
    PairAccept,
    PairOffer,
    hiding_warning,
    magnitude_bound,
    noise_bound,
    pair_secret,
    pair_seed,
)
from gossip.merge_guard import GuardSettings, MergeGuard, RefusedByGuard
from gossip.messages import FINGERPRINT_BYTES, Push, PushAck
from gossip.messages import WIRE_MESSAGES as _PUSH_MESSAGES
from gossip.model_sync import AveragingCore, ModelSync, VectorModel
from gossip.partner_choice import PartnerChoice, PartnerSettings
from gossip.pushsum import (
    EXCHANGES,
    PRIVACY_MODES,
    PushSum,
    PushSumOptions,
    PushSumSnapshot,
    PushSumTuning,
    UndeliveredOutcome,
)
from gossip.references import PairReferences, ReferenceKey
from gossip.wave_rule import AUTO, Next, WavePlan, WaveRule

#: The wire surface of gossip: push-sum exchanges and masking pairs.
WIRE_MESSAGES: tuple[tuple[type, str], ...] = (*_PUSH_MESSAGES, *MASK_MESSAGES)

if TYPE_CHECKING:
    from gossip.driver import DurationSink, GossipDriver, Holders, PushTransport

__all__ = [
    "AUTO",
    "ENCODINGS",
    "EXCHANGES",
    "FINGERPRINT_BYTES",
    "INT8_BLOCK",
    "PRIVACY_MODES",
    "WIRE_MESSAGES",
    "AveragingCore",
    "DriftBudget",
    "DupWindow",
    "DurationSink",
    "EncodedVector",
    "GossipDriver",
    "GossipError",
    "GuardSettings",
    "MASK_MESSAGES",
    "Holders",
    "InvalidValues",
    "LogLimiter",
    "MaskSource",
    "MaskEpochs",
    "EpochSettings",
    "PairAccept",
    "PairOffer",
    "hiding_warning",
    "magnitude_bound",
    "noise_bound",
    "pair_seed",
    "pair_secret",
    "MergeGuard",
    "Next",
    "ModelSync",
    "PairReferences",
    "PartnerChoice",
    "PartnerSettings",
    "Push",
    "PushAck",
    "PushRefused",
    "PushSum",
    "PushSumCounters",
    "PushSumOptions",
    "PushSumSnapshot",
    "PushSumTuning",
    "PushTransport",
    "PushUndelivered",
    "ReferenceKey",
    "RefusedByGuard",
    "RejectedAck",
    "RejectedPush",
    "RejectedReply",
    "Seen",
    "UndeliveredOutcome",
    "VectorModel",
    "WavePlan",
    "WaveRule",
    "decode",
    "encode",
    "encoded_nbytes",
    "mask_source_from",
]

_DRIVER_NAMES = {"DurationSink", "GossipDriver", "Holders", "PushTransport"}


def __getattr__(name: str) -> object:
    if name in _DRIVER_NAMES:
        from gossip import driver

        return getattr(driver, name)
    raise AttributeError(f"module 'gossip' has no attribute {name!r}")
