"""Canonical descriptions of shared partial models and their fingerprints.

Two nodes average a model only when their fingerprints match, so the
description must contain exactly what decides the meaning of each vector entry
and nothing node-specific: the layer structure (number of layers, layer type,
activation), the declarations (name, own neuron counts, dependencies) of the
model and of every model it depends on, the vector length and dtype. It never
contains the node's total layer sizes, its other models or neuron positions.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from learner.spec import PartialModelSpec

__all__ = ["FORMAT", "ModelDescription", "fingerprint_of", "init_seed_of"]

#: Version tag of the description format; bump when the canonical order changes.
FORMAT = "p2p-gossip-learning/partial-model/v1"


@dataclass(frozen=True)
class ModelDescription:
    """Everything that identifies a shared model's canonical vector."""

    name: str
    cross: bool
    num_layers: int
    activation: str
    involved: tuple[PartialModelSpec, ...]  # canonical order
    vector_length: int
    dtype: str
    #: a network on images: its image size and convolutions
    #: (:meth:`learner.spec.NetworkSpec.structure`); None for a flat-input network,
    #: whose description stays exactly what it was before convolutions existed
    structure: dict[str, object] | None = None

    def to_bytes(self) -> bytes:
        """Canonical JSON (sorted keys, no whitespace) hashed by the fingerprint."""
        layers: dict[str, object] = {
            "count": self.num_layers,
            "type": "dense",
            "bias": True,
            "activation": self.activation,
        }
        if self.structure is not None:
            layers.update(type="convolutional", **self.structure)
        doc = {
            "format": FORMAT,
            "model": self.name,
            "cross_model": self.cross,
            "layers": layers,
            "involved": [
                {
                    "name": m.name,
                    "counts": list(m.counts),
                    "depends_on": sorted(m.depends_on),
                }
                for m in self.involved
            ],
            "vector_length": self.vector_length,
            "dtype": self.dtype,
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


def fingerprint_of(description: ModelDescription) -> bytes:
    """32-byte sha256 of the canonical description."""
    return hashlib.sha256(description.to_bytes()).digest()


def init_seed_of(fingerprint: bytes) -> int:
    """A 64-bit initialisation seed derived from a fingerprint (domain separated)."""
    return int.from_bytes(hashlib.sha256(b"init-seed\x00" + fingerprint).digest()[:8], "big")
