"""Mini-batch training and evaluation of a classifier network (synchronous, no networking).

The trainer only needs a torch module mapping float32 rows to class logits.
Between calls to `train_steps` the model's parameters may be overwritten in
place (the node merges averaged partial models there); the optimizer keeps
its state (momentum buffers, Adam moments) across such overwrites.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from learner.augment import check_shift, random_shifts
from learner.dp.accounting import PrivacySpent
from learner.dp.config import DPConfig
from learner.dp.sgd import PrivacyBudgetSpent, PrivateSGD
from learner.train_config import OPTIMIZERS, TrainConfig, TrainConfigError

__all__ = [
    "OPTIMIZERS",
    "DPConfig",
    "Evaluation",
    "PrivacyBudgetSpent",
    "TrainConfig",
    "TrainConfigError",
    "Trainer",
    "evaluate_model",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Evaluation:
    """Accuracy (share of argmax hits) and mean cross-entropy on a labelled set."""

    accuracy: float
    loss: float
    samples: int


def _make_optimizer(params: list[nn.Parameter], config: TrainConfig) -> torch.optim.Optimizer:
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
    momentum = config.momentum if config.optimizer == "momentum" else 0.0
    return torch.optim.SGD(params, lr=config.lr, momentum=momentum, weight_decay=config.weight_decay)


def _as_tensors(x: np.ndarray, y: np.ndarray, where: str) -> tuple[torch.Tensor, torch.Tensor]:
    x = np.asarray(x)
    y = np.asarray(y)
    if x.ndim != 2 or y.ndim != 1 or x.shape[0] != y.shape[0]:
        raise ValueError(
            f"{where}: expected x of shape (n, features) and y of shape (n,), got {x.shape} and {y.shape}"
        )
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), torch.from_numpy(
        np.ascontiguousarray(y, dtype=np.int64)
    )


class Trainer:
    """Mini-batch training of `model` on one node's shard.

    Mini-batches are drawn without replacement from a seeded shuffle of the
    shard, reshuffled after each pass, so a run is reproducible from
    `config.seed` (and the model's initial values).

    With `dp`, every step is a DP-SGD step instead (:class:`learner.dp.sgd.PrivateSGD`:
    Poisson batches of expected size `config.batch_size`, per-sample clipping,
    Gaussian noise) and `privacy` counts the epsilon spent; `noise_seed` seeds its
    sampling and noise (None: the operating system's randomness), `privacy_history`
    resumes its count from a checkpoint. Steps that would go past
    `dp.epsilon_budget` are refused (:class:`PrivacyBudgetSpent`).

    With `config.shift`, each training image is moved by up to that many pixels
    (:func:`learner.augment.random_shifts`); the model must say its image shape
    with an ``input_image`` attribute (:class:`learner.network.PartialNetwork` does).

    ``loss_term`` (settable later, e.g. by a collaboration strategy) is called at
    every non-DP step and its scalar tensor is added to the mini-batch loss that
    is backpropagated; the reported loss stays the cross-entropy alone. DP-SGD
    steps refuse it (a term outside per-sample clipping would escape the accounting).
    """

    #: An extra term added to each mini-batch's loss (None: cross-entropy alone).
    loss_term: Callable[[], torch.Tensor] | None = None

    def __init__(self, model: nn.Module, train_x: np.ndarray, train_y: np.ndarray,
                 config: TrainConfig, *, dp: DPConfig | None = None,
                 noise_seed: int | None = None,
                 privacy_history: tuple[tuple[float, float, int], ...] = ()) -> None:
        self.model = model
        self.config = config
        self._x, self._y = _as_tensors(train_x, train_y, "Trainer training data")
        if self._y.numel() == 0:
            raise ValueError("Trainer training data: no samples")
        self._batch = min(config.batch_size, int(self._y.numel()))
        self._rng = np.random.default_rng(np.random.SeedSequence([config.seed, 0x7EA1]))
        self._order = self._rng.permutation(self._y.numel())
        self._cursor = 0
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = _make_optimizer(params, config)
        self.steps_done = 0
        self._image = getattr(model, "input_image", None)  # (C, H, W) for image inputs
        check_shift(config.shift, self._image)
        # its own stream, so that shift = 0 leaves the mini-batch order as it was
        self._shift_rng = np.random.default_rng(np.random.SeedSequence([config.seed, 0x5A1F7]))
        self.privacy: PrivateSGD | None = None
        if dp is not None and config.shift:
            raise ValueError("shift with DP-SGD is not supported: DP-SGD steps draw their "
                             "own Poisson batches; set shift = 0 or train without dp")
        if dp is not None:
            self.privacy = PrivateSGD(model, self._x, self._y, dp, self._batch, seed=noise_seed,
                                      history=privacy_history)

    def _next_batch(self) -> torch.Tensor:
        if self._cursor + self._batch > self._order.size:
            self._order = self._rng.permutation(self._y.numel())
            self._cursor = 0
        index = self._order[self._cursor : self._cursor + self._batch]
        self._cursor += self._batch
        return torch.from_numpy(index)

    def _inputs(self, index: torch.Tensor) -> torch.Tensor:
        x = self._x[index]
        if self.config.shift and self._image is not None:
            x = random_shifts(x, self._image, self.config.shift, self._shift_rng)
        return x

    def train_steps(self, steps: int) -> float:
        """Run `steps` mini-batch updates; return their mean training loss."""
        if steps < 1:
            raise ValueError(f"train_steps: expected steps >= 1, got {steps}")
        if self.privacy is not None:
            if self.loss_term is not None:
                raise ValueError("a loss term cannot be added to DP-SGD steps: it would "
                                 "escape per-sample clipping and the privacy accounting")
            return self._private_steps(self.privacy, steps)
        self.model.train()
        total = 0.0
        term = self.loss_term
        for _ in range(steps):
            index = self._next_batch()
            self.optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(self.model(self._inputs(index)), self._y[index])
            if term is not None:
                (loss + term()).backward()
            else:
                loss.backward()
            self.optimizer.step()
            total += float(loss.detach())
        self.steps_done += steps
        return total / steps

    def _private_steps(self, privacy: PrivateSGD, steps: int) -> float:
        """`steps` DP-SGD steps; the mean loss of the non-empty batches (NaN if none)."""
        if not privacy.allows(steps):
            raise PrivacyBudgetSpent(
                f"{steps} more DP-SGD steps would spend more than the epsilon budget "
                f"{privacy.config.epsilon_budget} (spent {privacy.epsilon():.4g} at delta "
                f"{privacy.config.delta:g} after {privacy.accountant.steps} steps)")
        self.model.train()
        losses = []
        for _ in range(steps):
            loss = privacy.step(self.optimizer)
            if not math.isnan(loss):  # an empty Poisson batch has no loss
                losses.append(loss)
        self.steps_done += steps
        return float(np.mean(losses)) if losses else float("nan")

    def can_train(self, steps: int | None = None) -> bool:
        """Whether `steps` (default: a round's) more steps are allowed: always without
        differential privacy; within the epsilon budget with it."""
        steps = self.config.steps_per_round if steps is None else steps
        return self.privacy is None or self.privacy.allows(steps)

    def privacy_spent(self) -> PrivacySpent | None:
        """Epsilon spent so far and the DP settings (None without differential privacy)."""
        if self.privacy is None:
            return None
        return self.privacy.spent(self.config.steps_per_round)

    def train_round(self) -> float:
        """One round: `config.steps_per_round` mini-batches; returns their mean loss."""
        return self.train_steps(self.config.steps_per_round)

    @torch.no_grad()
    def evaluate(self, x: np.ndarray, y: np.ndarray) -> Evaluation:
        """Accuracy and mean cross-entropy of the current model on (x, y)."""
        return evaluate_model(self.model, x, y)


@torch.no_grad()
def evaluate_model(model: nn.Module, x: np.ndarray, y: np.ndarray) -> Evaluation:
    """Accuracy and mean cross-entropy of `model` on (x, y); leaves the model in eval mode."""
    xt, yt = _as_tensors(x, y, "evaluate")
    if yt.numel() == 0:
        return Evaluation(accuracy=float("nan"), loss=float("nan"), samples=0)
    model.eval()
    logits = model(xt)
    loss = float(F.cross_entropy(logits, yt))
    accuracy = float((logits.argmax(dim=1) == yt).double().mean())
    return Evaluation(accuracy=accuracy, loss=loss, samples=int(yt.numel()))
