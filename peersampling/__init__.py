"""Gossip peer sampling: Cyclon-style views plus one holder view per partial model.

The core (:class:`PeerSampler`) is sans-IO; :func:`run_peer_sampling` (trio)
drives it over a :class:`ShuffleTransport`; :class:`Simulator` runs thousands
of cores in memory. Signed self-descriptors (:mod:`.signed`) and the
Sybil-resistant rules (:class:`SybilRules`, :class:`RankedView`) are opt-in. The driver names are imported lazily so that importing
this package never imports trio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .address import AddressError, HostPort, parse_host_port
from .core import ISLAND_REJOIN_EVERY, PeerEntry, PeerSampler, SamplerStats, SamplerTuning
from .descriptor import (
    MAX_AGE,
    MAX_TAGS,
    TAG_LENGTH,
    Descriptor,
    parse_address,
    validate_descriptor,
)
from .directory import HolderDirectory
from .errors import InvalidDescriptor, InvalidMessage, PeerSamplingError, PeerUnreachable
from .graph import (
    DegreeStats,
    dead_links,
    in_degree_stats,
    in_degrees,
    largest_strong_component,
    largest_weak_component,
)
from .lean import LeanPeriods, sample_address
from .messages import WIRE_MESSAGES, ShuffleReply, ShuffleRequest
from .offence_log import EveryLine, OffenceLog
from .ranked import RankedView
from .rules import SybilRules
from .signed import (
    SignatureCheck,
    Signer,
    Verifier,
    sign_descriptor,
    signing_payload,
    simulated_signer,
    simulated_verify,
)
from .simulator import Adversary, Simulator, SybilReport
from .view import PartialView

if TYPE_CHECKING:
    from .driver import ShuffleTransport, run_peer_sampling

__all__ = [
    "Adversary",
    "Simulator",
    "SybilReport",
    "ISLAND_REJOIN_EVERY",
    "MAX_AGE",
    "MAX_TAGS",
    "TAG_LENGTH",
    "WIRE_MESSAGES",
    "AddressError",
    "DegreeStats",
    "Descriptor",
    "EveryLine",
    "HolderDirectory",
    "HostPort",
    "InvalidDescriptor",
    "InvalidMessage",
    "LeanPeriods",
    "OffenceLog",
    "PartialView",
    "PeerEntry",
    "PeerSampler",
    "PeerSamplingError",
    "PeerUnreachable",
    "RankedView",
    "SamplerStats",
    "SamplerTuning",
    "ShuffleReply",
    "ShuffleRequest",
    "ShuffleTransport",
    "SignatureCheck",
    "Signer",
    "SybilRules",
    "Verifier",
    "dead_links",
    "in_degree_stats",
    "in_degrees",
    "largest_strong_component",
    "largest_weak_component",
    "parse_address",
    "parse_host_port",
    "run_peer_sampling",
    "sample_address",
    "sign_descriptor",
    "signing_payload",
    "simulated_signer",
    "simulated_verify",
    "validate_descriptor",
]

_DRIVER_NAMES = {"ShuffleTransport", "run_peer_sampling"}


def __getattr__(name: str) -> object:
    if name in _DRIVER_NAMES:
        from . import driver

        return getattr(driver, name)
    raise AttributeError(f"module 'peersampling' has no attribute {name!r}")
