"""Signed self-descriptors: what a node signs about itself and how peers check it.

A node signs its id, address, model fingerprints (tags), an epoch and its
alternate addresses with its Ed25519 key; the age is left out because every
hop changes it. The package
never imports a crypto library: the node injects a ``sign`` callable
(``data -> signature``) and a ``verify`` callable with the argument order of
:func:`p2p.wire.identity.verify_signature` (``node_id, signature, data ->
bool``; the node id is the public key). :class:`SignatureCheck` wraps
``verify`` with a bounded cache, since the same descriptor is seen over and
over while peers shuffle.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace

from .descriptor import Descriptor

#: ``sign(data) -> 64-byte signature`` (the node's identity key).
Signer = Callable[[bytes], bytes]
#: ``verify(node_id, signature, data) -> bool`` (``node_id`` is the public key).
Verifier = Callable[[bytes, bytes, bytes], bool]

_DOMAIN = b"p2p-peer-descriptor-v1\x00"
_ALTERNATES = b"\x00alternates"


def signing_payload(d: Descriptor) -> bytes:
    """The bytes a node signs for its descriptor ``d``: every field but age and signature.

    Length-prefixed and with the tags sorted, so one descriptor has exactly one
    payload and no two descriptors share one.
    """
    parts = [_DOMAIN, len(d.node_id).to_bytes(1, "big"), d.node_id]
    address = d.address.encode("utf-8")
    parts += [len(address).to_bytes(2, "big"), address, d.epoch.to_bytes(8, "big")]
    tags = sorted(d.tags)
    parts.append(len(tags).to_bytes(2, "big"))
    parts.extend(tags)
    if d.alternates:  # absent when empty: descriptors without them sign as before
        parts += [_ALTERNATES, len(d.alternates).to_bytes(1, "big")]
        for alternate in d.alternates:
            data = alternate.encode("utf-8")
            parts += [len(data).to_bytes(2, "big"), data]
    return b"".join(parts)


def sign_descriptor(d: Descriptor, sign: Signer) -> Descriptor:
    """``d`` (age 0) with its signature made by ``sign``."""
    return replace(d, age=0, signature=sign(signing_payload(d)))


class SignatureCheck:
    """``verify`` applied to descriptors, remembering the last ``capacity`` answers.

    Answers are looked up by signature and hold the whole signed content they
    were computed for; a hit counts only if that content equals the
    descriptor's, so a cached "valid" can never vouch for different content.
    (Keyed by the signature alone, a hit costs one lookup of a bytes object
    whose hash is cached, instead of building and hashing a 5-tuple.)
    """

    __slots__ = ("_verify", "_cache", "capacity", "checks")

    def __init__(self, verify: Verifier, *, capacity: int = 4096) -> None:
        self._verify = verify
        # signature -> (node_id, address, tags, epoch, alternates, answer)
        self._cache: dict[bytes, tuple[bytes, str, frozenset[bytes], int, tuple[str, ...],
                                       bool]] = {}
        self.capacity = capacity
        self.checks = 0  # calls of ``verify`` (cache misses)

    def __call__(self, d: Descriptor) -> bool:
        signature = d.signature
        if not signature:
            return False
        hit = self._cache.get(signature)
        if (
            hit is not None and hit[0] == d.node_id and hit[1] == d.address
            and hit[3] == d.epoch and hit[2] == d.tags and hit[4] == d.alternates
        ):
            return hit[5]
        self.checks += 1
        ok = bool(self._verify(d.node_id, signature, signing_payload(d)))
        if ok or hit is None or not hit[5]:  # a forgery never evicts the valid answer
            if len(self._cache) >= self.capacity:
                self._cache.clear()  # simple bound; refilled from live traffic
            self._cache[signature] = (d.node_id, d.address, d.tags, d.epoch, d.alternates, ok)
        return ok


def simulated_signer(node_id: bytes) -> Signer:
    """A stand-in signature for simulated identities (not Ed25519): keyed BLAKE2b.

    Lets the simulator exercise the signed-descriptor rules at the cost of a
    hash instead of an Ed25519 operation; anyone who knows the node id can
    forge it, so it models honest signers only.
    """
    key = hashlib.blake2b(node_id, digest_size=32).digest()

    def sign(data: bytes) -> bytes:
        return hashlib.blake2b(data, key=key, digest_size=64).digest()

    return sign


def simulated_verify(node_id: bytes, signature: bytes, data: bytes) -> bool:
    """Checks :func:`simulated_signer`'s stand-in signatures."""
    return simulated_signer(node_id)(data) == signature
