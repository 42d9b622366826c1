"""The shortcuts of peer sampling's hot path give exactly what the plain code gives."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from peersampling import Descriptor, InvalidDescriptor, validate_descriptor
from peersampling.draws import _EXACT, sample
from peersampling.signed import (
    SignatureCheck,
    sign_descriptor,
    simulated_signer,
    simulated_verify,
)

TAG = bytes(32)


def test_sample_draws_as_the_standard_library() -> None:
    assert _EXACT  # on this Python the written-out sample is used
    for seed in range(30):
        ours, theirs = random.Random(seed), random.Random(seed)
        for n in (0, 1, 4, 19, 20, 21, 22, 50, 300):
            population = [f"x{i}" for i in range(n)]
            for k in sorted({0, min(n, 1), min(n, 4), min(n, 5), min(n, 9), n}):
                assert sample(ours, population, k) == theirs.sample(population, k)
        assert ours.getstate() == theirs.getstate()
    with pytest.raises(ValueError, match="Sample larger than population"):
        sample(random.Random(0), [1, 2], 3)


def test_sample_leaves_subclasses_to_their_own_method() -> None:
    class Fixed(random.Random):
        def sample(self, population, k, *, counts=None):  # type: ignore[no-untyped-def,override]
            return list(population)[:k]

    assert sample(Fixed(0), [5, 6, 7], 2) == [5, 6]


def test_fast_validation_passes_exactly_what_the_full_checks_pass() -> None:
    good = Descriptor(b"id", "host:7400", 3, frozenset({TAG}), 5, bytes(64))
    assert validate_descriptor(good) is good
    bad = [
        replace(good, node_id=b""), replace(good, node_id="id"),  # type: ignore[arg-type]
        replace(good, address="no port"), replace(good, address=7),  # type: ignore[arg-type]
        replace(good, age=-1), replace(good, age=True), replace(good, age=11_000),
        replace(good, tags=frozenset({b"short"})), replace(good, epoch=-1),
        replace(good, epoch=2**64), replace(good, signature=b"x"),
    ]
    for d in bad:
        with pytest.raises(InvalidDescriptor):
            validate_descriptor(d)
    with pytest.raises(InvalidDescriptor, match="age"):
        validate_descriptor(good, max_age=2)
    listed = replace(good, tags=[TAG])  # type: ignore[arg-type]
    assert validate_descriptor(listed).tags == frozenset({TAG})  # normalised copy
    with pytest.raises(InvalidDescriptor, match="address"):  # a bad address is never remembered
        validate_descriptor(replace(good, address="bad host:1"))
    with pytest.raises(InvalidDescriptor, match="address"):
        validate_descriptor(replace(good, address="bad host:1"))


def test_signature_cache_never_vouches_for_other_content() -> None:
    d = sign_descriptor(Descriptor(b"n1", "a:1", 0, frozenset(), 1), simulated_signer(b"n1"))
    check = SignatureCheck(simulated_verify)
    assert check(d) and check(replace(d, age=4)) and check.checks == 1
    forged = replace(d, address="evil:1")  # the same signature over other content
    assert not check(forged) and not check(forged)
    assert check.checks == 3  # each forged copy is verified: no cached answer fits it
    assert check(d) and check.checks == 3  # the valid answer was kept
