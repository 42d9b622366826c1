"""FedLinked's maths, decentralized: representations, alignment, utilities, target, loss.

After the FedLinked report (``../shared/papers/002_*.txt``, sections 3.3-3.4):
nodes exchange only *representations* of the public split (last hidden layer
activations on the shared public inputs), and node ``j`` computes for itself
what the report's server would: the orthogonal alignment ``B = V U^T`` of a
peer's representation to its own (eq. 3.13), the peer's utility (eq. 3.14, on
centred, unit-norm representations, normalised so the squared utilities sum to
``eta``), and the utility-weighted target rescaled to the node's own norm and
mean, towards which :func:`distillation_loss` distils (eq. 3.6).

How it works: docs/design/strategies.md ("FedLinked").
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import torch
from torch import nn

__all__ = [
    "AlignedPeer",
    "DistillationTarget",
    "RepresentationError",
    "align",
    "alignment",
    "check_representation",
    "distillation_loss",
    "distillation_target",
    "public_representation",
    "representation_tensor",
    "similarity",
    "utilities",
]

logger = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

#: Below this Frobenius norm a centred representation is taken as constant
#: (a dead layer): it carries no information and gets utility 0.
_TINY = 1e-12


class RepresentationError(ValueError):
    """A representation matrix has the wrong shape or holds NaN/infinite values."""


def check_representation(rep: np.ndarray, where: str, *, rows: int | None = None,
                         width: int | None = None) -> np.ndarray:
    """`rep` as a float64 matrix (public samples, features) after checking it.

    Raises :class:`RepresentationError` naming `where` when it is not 2-D, has
    `rows` samples (when given) or `width` features (when given) other than
    expected, or holds NaN or infinite values.
    """
    array = np.asarray(rep)
    if array.ndim != 2:
        raise RepresentationError(f"{where}: expected a 2-D (samples, features) matrix, got "
                                  f"shape {array.shape}")
    if array.dtype.kind not in "fiu":
        raise RepresentationError(f"{where}: expected numbers, got dtype {array.dtype}")
    if rows is not None and array.shape[0] != rows:
        raise RepresentationError(f"{where}: has {array.shape[0]} rows, expected {rows} (one "
                                  "per public sample)")
    if width is not None and array.shape[1] != width:
        raise RepresentationError(f"{where}: has {array.shape[1]} features, expected {width}")
    if array.shape[0] < 2 or array.shape[1] < 1:
        raise RepresentationError(f"{where}: shape {array.shape} is too small; expected at "
                                  "least 2 samples and 1 feature")
    values = array.astype(np.float64)
    if not np.all(np.isfinite(values)):
        raise RepresentationError(f"{where}: contains NaN or infinite values")
    return values


def representation_tensor(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The last hidden layer's activations of `model` on the rows `x`, flattened to
    (samples, features); differentiable (for the distillation loss).

    `model` must offer ``activations(x)`` returning every layer's output, logits
    last (:class:`learner.network.PartialNetwork` does) and have a hidden layer.
    """
    activations = getattr(model, "activations", None)
    if activations is None:
        raise TypeError(f"{type(model).__name__} has no activations(x); FedLinked needs the "
                        "hidden layers of a learner.network.PartialNetwork")
    outs = activations(x)
    if len(outs) < 2:
        raise ValueError("FedLinked needs a network with at least one hidden layer; this one "
                         "maps inputs straight to logits")
    hidden: torch.Tensor = outs[-2]
    return hidden.flatten(1)


@torch.no_grad()
def public_representation(model: nn.Module, public_x: np.ndarray) -> np.ndarray:
    """The node's representation of the public split: a float32 (samples, features)
    matrix of last-hidden-layer activations, computed in eval mode (the model's
    train/eval mode is restored afterwards)."""
    x = np.asarray(public_x)
    if x.ndim != 2 or x.shape[0] < 2:
        raise RepresentationError(f"public_x: expected at least 2 public samples as rows, got "
                                  f"shape {x.shape}; set data.public_size")
    was_training = model.training
    model.eval()
    try:
        rep = representation_tensor(model, torch.from_numpy(np.ascontiguousarray(x, np.float32)))
    finally:
        model.train(was_training)
    return rep.numpy().astype(np.float32)


def _normalised(rep: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(centred rep / its Frobenius norm, column means, the norm)."""
    mean = rep.mean(axis=0)
    centred = rep - mean
    norm = float(np.linalg.norm(centred))
    if norm < _TINY:
        return np.zeros_like(centred), mean, 0.0
    return centred / norm, mean, norm


def alignment(peer: np.ndarray, own: np.ndarray) -> np.ndarray:
    """The orthogonal map ``B`` (own width x peer width) that best lines up `peer`'s
    representation with `own`'s (report eq. 3.13): ``B = V U^T`` from the SVD
    ``U S V^T`` of ``R = peer^T own``. Both are (public samples, features), taken
    as given (callers centre and scale them first); ``peer @ B.T`` is then in the
    node's feature space."""
    r = peer.T @ own
    u, _, vt = np.linalg.svd(r, full_matrices=False)
    b: np.ndarray = vt.T @ u.T
    return b


@dataclass(frozen=True)
class AlignedPeer:
    """A peer's representation mapped into the node's own space, and its similarity."""

    aligned: np.ndarray  # (samples, own features), at the node's own scale and mean
    similarity: float  # in [0, 1]: sum of singular values of the normalised R


def align(peer: np.ndarray, own: np.ndarray) -> AlignedPeer:
    """Centre and scale both representations, align `peer` to `own` (:func:`alignment`)
    and bring it to `own`'s norm and column means. The similarity is the aligned
    inner product of the normalised representations (0 for a constant one)."""
    own64 = check_representation(own, "own representation")
    peer64 = check_representation(peer, "peer representation", rows=own64.shape[0])
    own_n, own_mean, own_norm = _normalised(own64)
    peer_n, _, peer_norm = _normalised(peer64)
    if own_norm == 0.0 or peer_norm == 0.0:
        return AlignedPeer(np.broadcast_to(own_mean, own64.shape).copy(), 0.0)
    b = alignment(peer_n, own_n)
    mapped = peer_n @ b.T
    score = float(np.sum(mapped * own_n))
    return AlignedPeer(own_mean + mapped * own_norm, max(0.0, min(1.0, score)))


def similarity(peer: np.ndarray, own: np.ndarray) -> float:
    """How well `peer`'s representation matches `own` up to a rotation and a scale, in [0, 1]."""
    return align(peer, own).similarity


def utilities(similarities: Mapping[K, float], eta: float) -> dict[K, float]:
    """Report eq. 3.14 for one node: ``A_k = s_k / sqrt(sum_k s_k^2 / eta)``, so that
    the squared utilities sum to `eta`. All zero when every similarity is zero."""
    if not eta > 0:
        raise ValueError(f"eta: expected a number > 0, got {eta}")
    total = sum(s * s for s in similarities.values())
    if total <= 0.0:
        return {k: 0.0 for k in similarities}
    scale = float(np.sqrt(total / eta))
    return {k: s / scale for k, s in similarities.items()}


@dataclass(frozen=True)
class DistillationTarget(Generic[K]):
    """What a node distils towards: the target representation of the public split
    (float32, samples x own features), the utility of each peer that went into it
    and their similarities (peers with utility 0 do not contribute)."""

    target: np.ndarray
    utilities: dict[K, float]
    similarities: dict[K, float]


def distillation_target(own: np.ndarray, peers: Mapping[K, np.ndarray], *, eta: float = 1.0,
                        sharpness: float = 1.0) -> DistillationTarget[K]:
    """The report's ``f_j^* = sum_k A_kj alpha'_kj / sum_k A_kj`` from the node's own
    representation and its peers' (each (public samples, features); widths may differ).

    `sharpness` > 1 weighs peers by ``A_kj ** sharpness`` instead of ``A_kj`` (1: the
    report's weights); a larger value leans harder on the most useful peers. Raises
    ValueError when `peers` is empty.
    """
    if not peers:
        raise ValueError("distillation_target: no peer representations")
    if not sharpness >= 1.0:
        raise ValueError(f"sharpness: expected a number >= 1, got {sharpness}")
    aligned = {k: align(rep, own) for k, rep in peers.items()}
    sims = {k: a.similarity for k, a in aligned.items()}
    utility = utilities(sims, eta)
    weights = {k: max(0.0, u) ** sharpness for k, u in utility.items()}
    total = sum(weights.values())
    own64 = np.asarray(own, dtype=np.float64)
    if total <= 0.0:
        return DistillationTarget(own64.astype(np.float32), utility, sims)
    target = sum((w / total) * aligned[k].aligned for k, w in weights.items() if w > 0.0)
    return DistillationTarget(np.asarray(target, dtype=np.float32), utility, sims)


def distillation_loss(representation: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Report eq. 3.6 per sample: the mean over samples of the squared Euclidean
    distance between the node's representation and the target (both (samples,
    features)). Differentiable in `representation`; `target` is a constant."""
    if representation.shape != target.shape:
        raise ValueError(f"distillation_loss: representation has shape "
                         f"{tuple(representation.shape)}, target {tuple(target.shape)}")
    diff = representation - target.detach()
    return (diff * diff).sum(dim=1).mean()
