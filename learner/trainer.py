"""Mini-batch training and evaluation of a classifier network (synchronous, no networking).

The trainer only needs a torch module mapping float32 rows to class logits.
Between calls to `train_steps` the model's parameters may be overwritten in
place (the node merges averaged partial models there); the optimizer keeps
its state (momentum buffers, Adam moments) across such overwrites.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from learner.train_config import OPTIMIZERS, TrainConfig, TrainConfigError

__all__ = [
    "OPTIMIZERS",
    "Evaluation",
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
    """

    def __init__(self, model: nn.Module, train_x: np.ndarray, train_y: np.ndarray,
                 config: TrainConfig) -> None:
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

    def _next_batch(self) -> torch.Tensor:
        if self._cursor + self._batch > self._order.size:
            self._order = self._rng.permutation(self._y.numel())
            self._cursor = 0
        index = self._order[self._cursor : self._cursor + self._batch]
        self._cursor += self._batch
        return torch.from_numpy(index)

    def train_steps(self, steps: int) -> float:
        """Run `steps` mini-batch updates; return their mean training loss."""
        if steps < 1:
            raise ValueError(f"train_steps: expected steps >= 1, got {steps}")
        self.model.train()
        total = 0.0
        for _ in range(steps):
            index = self._next_batch()
            self.optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(self.model(self._x[index]), self._y[index])
            loss.backward()
            self.optimizer.step()
            total += float(loss.detach())
        self.steps_done += steps
        return total / steps

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
