"""The peer sampler a daemon runs: signed descriptors, Sybil rules, limited log lines.

One definition for every process that joins a swarm (the training node and
:class:`~lab.averaging.peers.AveragingPeer`), so that they all follow the
same rules (docs/design/peer-sampling.md, "Signed descriptors and fake identities").
"""

from __future__ import annotations

import functools
import logging
import random
import time

from gossip import LogLimiter
from p2p.wire.identity import Identity, verify_signature
from peersampling import Descriptor, PeerSampler, SybilRules


@functools.lru_cache(maxsize=1 << 16)
def _verify_in_process(node_id: bytes, signature: bytes, data: bytes) -> bool:
    """:func:`verify_signature` with its answers shared by every sampler of the process.

    In a simulation every node sees the same few thousand signed descriptors, each
    verified once by every node that receives it (each sampler caches its own answers);
    the same bytes give the same answer, so one Ed25519 check per descriptor serves the
    whole process. A daemon verifies for itself (one node per process: nothing to share).
    """
    return verify_signature(node_id, signature, data)


def signed_sampler(identity: Identity, address: str, tags: frozenset[bytes], *,
                   rng: random.Random, c: int = 20, l: int = 5,  # noqa: E741
                   in_process: bool = False) -> PeerSampler:
    """A :class:`PeerSampler` for ``identity`` listening at ``address`` and holding ``tags``.

    Its descriptor is signed with the identity key under an epoch of wall-clock
    milliseconds (so a restart supersedes what peers remember), received
    descriptors must verify (Ed25519), every view follows :class:`SybilRules`,
    and the lines peers cause are rate-limited per offender
    (:class:`gossip.log_limit.LogLimiter` on peer sampling's own logger).

    ``in_process`` (simulations only, never a daemon): every peer is another
    node of this process, so received descriptors' fields are not validated
    again (:class:`PeerSampler`'s option of that name; signatures still are, each
    distinct one once for the whole process rather than once per node).
    """
    return PeerSampler(
        Descriptor(identity.node_id, address, 0, tags, time.time_ns() // 1_000_000),
        c=c,
        l=l,
        rng=rng,
        sign=identity.sign,
        verify=_verify_in_process if in_process else verify_signature,
        sybil=SybilRules(),
        offences=LogLimiter(logging.getLogger(PeerSampler.__module__)),
        in_process=in_process,
    )


__all__ = ["signed_sampler"]
