"""FedCurv's maths: diagonal Fisher, the elastic penalty through two sums, gossiped sums.

FedCurv (Shoham et al. 2019; paper 004) adds to node i's loss
``lambda * sum_{j != i} (w - w_j)' diag(F_j) (w - w_j)``, whose gradient needs
only ``A = sum F_j`` and ``B = sum F_j * w_j``:
``penalty(w) = lambda * (w' diag(A) w - 2 B' w)`` up to a constant
(:func:`penalty`). Nodes push-sum ``F_i``, ``F_i * w_i`` and a count slot
(:func:`totals`, :func:`contribute`); :func:`estimated_pull` takes only ratios
of one core's estimates, in which push-sum's weights cancel: the target
``est(F w) / est(F)``, a convex mean of the anchors while every mix is
non-negative (so contributions are only ever added), and ``A`` from the mean
Fisher times the number of other nodes.

Torch and numpy only (the node's side is :mod:`p2p.strategies.fedcurv.node`).
How it works: docs/design/strategies.md ("FedCurv").
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

__all__ = [
    "GossipedSum",
    "contribute",
    "estimated_pull",
    "exact_penalty",
    "fisher_diagonal",
    "others",
    "capped",
    "penalty",
    "penalty_gradient",
    "totals",
]

FISHER_CHUNK = 64  # samples whose gradients are taken at once (bounds memory)


class GossipedSum(Protocol):
    """What :func:`contribute` needs of a push-sum core."""

    @property
    def values(self) -> np.ndarray: ...

    @property
    def weight(self) -> float: ...

    def set_values(self, values: np.ndarray) -> None: ...


def contribute(core: GossipedSum, delta: np.ndarray) -> None:
    """Change this node's contribution to the sum ``core`` gossips by ``delta``: the
    sum over holders of ``weight * values`` (push-sum's conserved mass) moves by
    exactly ``delta``. A negative ``delta`` keeps the sums exact but not the node's
    mix non-negative (see the module docstring)."""
    core.set_values(core.values + np.asarray(delta, dtype=np.float64) / core.weight)


def totals(fisher_estimate: np.ndarray, weighted_estimate: np.ndarray,
           max_nodes: float = 1e9) -> tuple[np.ndarray, np.ndarray, float] | None:
    """``(sum F_j, sum F_j * w_j, N)`` from the two push-sum estimates (the first with
    the count slot last); None while the counter's share has not mixed in far enough
    to say ``N <= max_nodes`` (dividing by a tiny share would blow the sums up)."""
    share = float(fisher_estimate[-1])
    if not share * max_nodes >= 1.0:
        return None
    return fisher_estimate[:-1] / share, weighted_estimate / share, 1.0 / share


def estimated_pull(fisher_estimate: np.ndarray, weighted_estimate: np.ndarray,
                   max_nodes: float = 1e9) -> tuple[np.ndarray, np.ndarray, float] | None:
    """``(A, B, N)`` for the penalty, from one core's estimates (the Fisher part with the
    count slot last, and the ``F w`` part): ``A = mean F * (N - 1)``, ``B = A * t`` with
    ``t = est(F w) / est(F)`` (see the module docstring). A coordinate whose Fisher
    estimate is not positive gets no pull. None while the count says more than
    ``max_nodes`` nodes (its share has not mixed in yet)."""
    share = float(fisher_estimate[-1])
    if not share * max_nodes >= 1.0:
        return None
    n = 1.0 / share
    f = fisher_estimate[:-1]
    on = f > 0.0
    safe = np.where(on, f, 1.0)
    a = np.where(on, f / share * ((n - 1.0) / n), 0.0)
    target = np.where(on, weighted_estimate / safe, 0.0)
    return a, a * target, n


def others(total_f: np.ndarray, total_fw: np.ndarray, own_f: np.ndarray,
           own_fw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(A, B)``: the sums over the *other* nodes from *exact* totals (a check of the
    maths; the node uses :func:`estimated_pull`, see the module docstring). A coordinate whose ``A`` comes out
    negative (the estimate not yet mixed) gets no pull at all (``A = B = 0``): a
    negative curvature would make the penalty unbounded below."""
    a = total_f - own_f
    b = total_fw - own_fw
    off = a <= 0.0
    a[off] = 0.0
    b[off] = 0.0
    return a, b


def capped(a: np.ndarray, b: np.ndarray, lam: float, lr: float, bound: float = np.inf
           ) -> tuple[np.ndarray, np.ndarray]:
    """``(A, B)`` made safe for SGD with step ``lr``, keeping the pull's direction.

    The pull on a coordinate is ``2 lam A (w - t)`` towards the target ``t = B / A``
    (the Fisher-weighted mean parameters). The stiffness ``lam * A`` is capped at
    ``1 / (4 lr)``: the penalty's curvature ``2 lam A`` is then at most ``1 / (2 lr)``,
    so a plain SGD step by the pull alone moves at most halfway to the target, leaving
    room below SGD's instability edge (curvature ``2 / lr``) for the data loss's own
    curvature. The former cap ``1 / (2 lr)`` made a step land exactly on the target,
    so any data-loss curvature pushed past the edge; stiffer pulls overshoot and
    diverge (lambda 100 did on digits). A coordinate whose target lies outside
    ``[-bound, bound]`` gets no pull at all: right after a contribution changes, the
    node's own estimates are not yet a mix of the holders' (``A`` small, ``B`` off),
    and their ratio can be far beyond any node's parameters. Clipping such a target to
    the bound instead fed back when the bound grows with the node's parameters: pulled
    to the bound, the parameters raised the next bound (runs diverged so). The node
    passes no bound any more: its targets are convex means of the anchors."""
    limit = 1.0 / (4.0 * lr * lam) if lam > 0 else np.inf
    safe = np.maximum(a, 1e-300)
    target = b / safe
    a = np.where(np.abs(target) <= bound, np.minimum(a, limit), 0.0)
    return a, np.where(a > 0, a * target, 0.0)


def penalty(w: torch.Tensor, a: torch.Tensor, b: torch.Tensor, lam: float) -> torch.Tensor:
    """``lam * (w' diag(a) w - 2 b' w)``: the FedCurv penalty up to a constant."""
    return lam * (a * w * w - 2.0 * b * w).sum()


def penalty_gradient(w: np.ndarray, a: np.ndarray, b: np.ndarray, lam: float) -> np.ndarray:
    """The gradient of :func:`penalty` (and of :func:`exact_penalty`): ``2 lam (a w - b)``."""
    return 2.0 * lam * (a * w - b)


def exact_penalty(w: torch.Tensor, fishers: list[torch.Tensor], anchors: list[torch.Tensor],
                  lam: float) -> torch.Tensor:
    """``lam * sum_j (w - w_j)' diag(F_j) (w - w_j)`` written out (for checks)."""
    total = torch.zeros((), dtype=w.dtype)
    for f, anchor in zip(fishers, anchors, strict=True):
        total = total + (f * (w - anchor) ** 2).sum()
    return lam * total


def fisher_diagonal(model: nn.Module, x: np.ndarray, y: np.ndarray, *, samples: int,
                    rng: np.random.Generator, parameter: str = "flat") -> np.ndarray:
    """The empirical diagonal Fisher of ``model``'s parameter ``parameter``: the mean over
    up to ``samples`` rows of (x, y), drawn without replacement, of the squared gradient
    of ``log p(y | x)``. float64, shaped as the parameter (flat for a
    :class:`~learner.network.PartialNetwork`)."""
    n = len(y)
    if n == 0:
        raise ValueError("fisher_diagonal: no samples")
    pick = rng.choice(n, size=min(samples, n), replace=False)
    xs = torch.from_numpy(np.ascontiguousarray(x[pick], dtype=np.float32))
    ys = torch.from_numpy(np.ascontiguousarray(y[pick], dtype=np.int64))
    theta = dict(model.named_parameters())[parameter].detach()

    def nll(p: torch.Tensor, xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        logits = functional_call(model, {parameter: p}, (xi.unsqueeze(0),))
        return F.cross_entropy(logits, yi.unsqueeze(0))

    per_sample = vmap(grad(nll), in_dims=(None, 0, 0))
    total = torch.zeros_like(theta, dtype=torch.float64)
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(ys), FISHER_CHUNK):
            g = per_sample(theta, xs[start:start + FISHER_CHUNK], ys[start:start + FISHER_CHUNK])
            total += (g.double() ** 2).sum(dim=0)
    finally:
        model.train(was_training)
    return (total / len(ys)).numpy()
