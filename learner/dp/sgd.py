"""DP-SGD: per-sample gradients, clipping, Gaussian noise, Poisson batches.

One step of :class:`PrivateSGD` (Abadi et al., CCS 2016): a Poisson batch (each
sample joins with probability ``q = batch_size / n``, as the accountant
assumes); every sample's gradient through :mod:`torch.func` (``vmap(grad)`` of
``functional_call``), clipped to L2 norm ``clip_norm`` over all trainable
parameters; their sum plus Gaussian noise of standard deviation
``noise_multiplier * clip_norm``, divided by ``q * n``; then the configured
optimizer steps. Everything after the noisy gradient is post-processing. Noise
and sampling use the operating system's randomness unless seeded (only the
synchronous reference seeds them). Batch normalisation cannot be clipped per
sample; :mod:`learner.network` builds none.

See docs/guide/data-and-training.md ("DP-SGD") and docs/design/trust.md.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from learner.dp.accounting import HistoryEntry, PrivacyAccountant, PrivacySpent
from learner.dp.config import DPConfig

__all__ = [
    "CHUNK",
    "PrivacyBudgetSpent",
    "PrivateSGD",
    "clip_and_sum",
    "per_sample_gradients",
    "private_gradient",
]

logger = logging.getLogger(__name__)

#: Samples whose gradients are held in memory at once (bounds memory for large batches).
CHUNK = 256
_NORM_FLOOR = 1e-6  # keeps the clipping factor finite for a zero gradient

Params = dict[str, torch.Tensor]


class PrivacyBudgetSpent(RuntimeError):
    """A DP trainer was asked for steps that would spend more than its epsilon budget."""


def _trainable(model: nn.Module) -> Params:
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def per_sample_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor
                         ) -> tuple[Params, torch.Tensor]:
    """Each sample's cross-entropy gradient with respect to every trainable parameter.

    Returns ``(grads, losses)``: ``grads[name]`` has shape ``(len(x), *param.shape)``
    and ``losses`` holds each sample's loss. The model's parameters and their
    ``.grad`` are left untouched.
    """
    params = {name: p.detach() for name, p in _trainable(model).items()}
    buffers = {name: b.detach() for name, b in model.named_buffers()}

    def loss_of(p: Params, xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        logits = functional_call(model, (p, buffers), (xi.unsqueeze(0),))
        return F.cross_entropy(logits, yi.unsqueeze(0))

    grads, losses = vmap(grad_and_value(loss_of), in_dims=(None, 0, 0))(params, x, y)
    return grads, losses


def clip_and_sum(grads: Params, clip_norm: float) -> tuple[Params, torch.Tensor]:
    """Scale each sample's gradient to an L2 norm of at most ``clip_norm`` (over all
    parameters together) and sum over samples; returns ``(sums, norms before clipping)``."""
    squares = torch.stack([g.flatten(1).pow(2).sum(dim=1) for g in grads.values()])
    norms = squares.sum(dim=0).sqrt()
    factors = (clip_norm / (norms + _NORM_FLOOR)).clamp(max=1.0)
    sums = {name: torch.einsum("b,b...->...", factors, g) for name, g in grads.items()}
    return sums, norms


def private_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, clip_norm: float,
                     noise_multiplier: float, expected_batch: float,
                     generator: torch.Generator | None) -> tuple[Params, float]:
    """The DP-SGD gradient of ``model`` on the batch ``(x, y)`` (which may be empty).

    Clipped per-sample gradients are summed, Gaussian noise of standard deviation
    ``noise_multiplier * clip_norm`` is added, and the result is divided by
    ``expected_batch``. Returns the gradient per trainable parameter and the
    batch's mean loss (NaN for an empty batch).
    """
    params = _trainable(model)
    sums = {name: torch.zeros_like(p) for name, p in params.items()}
    total_loss = 0.0
    for start in range(0, len(x), CHUNK):
        grads, losses = per_sample_gradients(model, x[start:start + CHUNK],
                                             y[start:start + CHUNK])
        chunk_sums, _ = clip_and_sum(grads, clip_norm)
        for name, s in chunk_sums.items():
            sums[name] += s
        total_loss += float(losses.sum())
    std = noise_multiplier * clip_norm
    out: Params = {}
    for name, s in sums.items():
        if std > 0:
            s = s + torch.normal(0.0, std, size=s.shape, generator=generator, dtype=s.dtype)
        out[name] = s / expected_batch
    return out, (total_loss / len(x) if len(x) else float("nan"))


def _entropy_seed() -> int:
    return secrets.randbits(63)


class PrivateSGD:
    """DP-SGD steps on one shard, with their privacy accounting.

    ``batch_size`` is the expected batch (the sample rate is ``batch_size / n``,
    at most 1). ``seed`` seeds the Poisson sampling and the noise (None: the
    operating system's randomness, as a daemon must). ``history`` resumes the
    accountant's count from a checkpoint.
    """

    def __init__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, config: DPConfig,
                 batch_size: int, *, seed: int | None = None,
                 history: Iterable[Iterable[object]] = ()) -> None:
        if batch_size < 1:
            raise ValueError(f"PrivateSGD: batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.config = config
        self._x, self._y = x, y
        n = int(y.numel())
        if n == 0:
            raise ValueError("PrivateSGD: no samples")
        self.sample_rate = min(1.0, batch_size / n)
        self.expected_batch = self.sample_rate * n
        seed = _entropy_seed() if seed is None else seed
        self._rng = np.random.default_rng(np.random.SeedSequence([seed, 0xD9]))
        self._noise = torch.Generator().manual_seed(
            int(np.random.SeedSequence([seed, 0x401CE]).generate_state(1, np.uint64)[0] >> 1))
        self.accountant = PrivacyAccountant(config.delta, history)
        # the first epsilon costs a fraction of a second (opacus' series): pay it here,
        # not in whoever asks first (an admin command on the event loop)
        self.accountant.epsilon_after(config.noise_multiplier, self.sample_rate, 1)

    @property
    def history(self) -> tuple[HistoryEntry, ...]:
        """The accountant's step history (what a checkpoint stores)."""
        return self.accountant.history

    def epsilon(self) -> float:
        """Epsilon spent so far at the configured delta."""
        return self.accountant.epsilon()

    def allows(self, steps: int) -> bool:
        """Whether ``steps`` more steps stay within the epsilon budget (always, without one)."""
        budget = self.config.epsilon_budget
        if budget is None:
            return True
        return self.accountant.epsilon_after(self.config.noise_multiplier, self.sample_rate,
                                             steps) <= budget

    def spent(self, next_steps: int) -> PrivacySpent:
        """The epsilon spent so far and whether ``next_steps`` more would exceed the budget."""
        c = self.config
        return PrivacySpent(epsilon=self.epsilon(), delta=c.delta,
                            noise_multiplier=c.noise_multiplier, clip_norm=c.clip_norm,
                            sample_rate=self.sample_rate, steps=self.accountant.steps,
                            budget=c.epsilon_budget, budget_spent=not self.allows(next_steps))

    def sample_batch(self) -> torch.Tensor:
        """Indices of the next batch: each sample joins with probability ``sample_rate``."""
        n = int(self._y.numel())
        if self.sample_rate >= 1.0:
            return torch.arange(n)
        return torch.from_numpy(np.flatnonzero(self._rng.random(n) < self.sample_rate))

    def step(self, optimizer: torch.optim.Optimizer) -> float:
        """One DP-SGD step through ``optimizer``; the batch's mean loss (NaN if empty)."""
        index = self.sample_batch()
        grads, loss = private_gradient(
            self.model, self._x[index], self._y[index], clip_norm=self.config.clip_norm,
            noise_multiplier=self.config.noise_multiplier, expected_batch=self.expected_batch,
            generator=self._noise)
        optimizer.zero_grad(set_to_none=True)
        for name, p in _trainable(self.model).items():
            p.grad = grads[name]
        optimizer.step()
        # the noisy gradient is out (in the parameters): count the step
        self.accountant.record(self.config.noise_multiplier, self.sample_rate)
        return loss
