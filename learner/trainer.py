"""Mini-batch training and evaluation of a node's network (synchronous, no networking).

The trainer takes any torch module (a notation network, or the user's module
with its ``input_shape``), in-memory tensors indexed by whole batches or a
:class:`~learner.batches.LoaderBatches` stream, a loss (cross-entropy by
default), the device and precision (:mod:`learner.devices`). Between calls to
`train_steps` the model's parameters may be overwritten in place (the node
merges averaged partial models there); the optimizer keeps its state
(momentum buffers, Adam moments) across such overwrites.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from learner.augment import check_shift, random_shifts
from learner.batches import LoaderBatches
from learner.devices import Precision
from learner.dp.accounting import PrivacySpent
from learner.dp.config import DPConfig
from learner.dp.sgd import PrivacyBudgetSpent, PrivateSGD
from learner.hooks import LossFn, Metrics, cross_entropy
from learner.train_config import OPTIMIZERS, TrainConfig, TrainConfigError

__all__ = [
    "OPTIMIZERS",
    "DPConfig",
    "Evaluation",
    "PrivacyBudgetSpent",
    "TrainConfig",
    "TrainConfigError",
    "Trainer",
    "evaluate_batches",
    "evaluate_model",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Evaluation:
    """Accuracy (share of argmax hits; NaN without class targets), the mean loss and
    every metric (``accuracy`` by default, else the user's) on a labelled set."""

    accuracy: float
    loss: float
    samples: int
    metrics: Mapping[str, float] = field(default_factory=dict)


def _make_optimizer(params: list[nn.Parameter], config: TrainConfig) -> torch.optim.Optimizer:
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
    momentum = config.momentum if config.optimizer == "momentum" else 0.0
    return torch.optim.SGD(params, lr=config.lr, momentum=momentum, weight_decay=config.weight_decay)


def _as_tensors(x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor, where: str,
                shape: tuple[int, ...] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Float32 inputs and targets (int64 class indices, or float for other targets); with
    ``shape`` each row is viewed as one input of that shape (the model's ``input_shape``)."""
    xt = torch.as_tensor(x)
    yt = torch.as_tensor(y)
    if xt.dim() < 2 or yt.dim() < 1 or xt.shape[0] != yt.shape[0]:
        raise ValueError(
            f"{where}: expected x of shape (n, features) and y of shape (n,), got "
            f"{tuple(xt.shape)} and {tuple(yt.shape)}")
    xt = xt.to(torch.float32).contiguous()
    yt = yt.to(torch.float32 if yt.is_floating_point() else torch.int64).contiguous()
    if shape is None:
        xt = xt.flatten(1)  # a notation network reads flat rows
    elif tuple(xt.shape[1:]) != shape:
        xt = xt.reshape(xt.shape[0], *shape)
    return xt, yt


def _rows(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``x`` as ``model`` reads it: flat rows for a notation network, else as given."""
    return x.flatten(1) if model_shape(model) is None and x.dim() > 2 else x


def model_shape(model: nn.Module) -> tuple[int, ...] | None:
    """The input shape a module declares (``input_shape``; None: flat rows, a notation network)."""
    shape = getattr(model, "input_shape", None)
    return None if shape is None else tuple(shape)


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

    With ``batches`` (and ``train_x``/``train_y`` None) the mini-batches come from a
    DataLoader stream instead of in-memory tensors. ``loss``: the loss hook (default
    cross-entropy); ``optimizer``/``schedule``: the user's factories, called with the
    trainable parameters and with the optimizer; ``device``/``precision``: where and
    how the steps run (:mod:`learner.devices`; the model is moved there).
    """

    #: An extra term added to each mini-batch's loss (None: cross-entropy alone).
    loss_term: Callable[[], torch.Tensor] | None = None

    def __init__(self, model: nn.Module, train_x: np.ndarray | torch.Tensor | None,
                 train_y: np.ndarray | torch.Tensor | None,
                 config: TrainConfig, *, dp: DPConfig | None = None,
                 noise_seed: int | None = None,
                 privacy_history: tuple[tuple[float, float, int], ...] = (),
                 batches: LoaderBatches | None = None, loss: LossFn | None = None,
                 optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None = None,
                 schedule: Callable[[torch.optim.Optimizer], object] | None = None,
                 device: torch.device | str = "cpu", precision: str = "fp32") -> None:
        self.model = model
        self.config = config
        self.device = torch.device(device)
        self.precision = Precision(precision, self.device)
        self.loss_fn: LossFn = cross_entropy if loss is None else loss
        self.custom_loss = loss is not None
        self.batches = batches
        if batches is None:
            if train_x is None or train_y is None:
                raise ValueError("Trainer: give train_x and train_y, or batches")
            self._x, self._y = _as_tensors(train_x, train_y, "Trainer training data",
                                           model_shape(model))
            samples = int(self._y.shape[0])
        else:
            self._x = self._y = torch.empty(0)
            samples = batches.size
        if samples == 0:
            raise ValueError("Trainer training data: no samples")
        self._batch = min(config.batch_size, samples)
        self._rng = np.random.default_rng(np.random.SeedSequence([config.seed, 0x7EA1]))
        self._order = self._rng.permutation(samples)
        self._cursor = 0
        model.to(self.device)
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = (_make_optimizer(params, config) if optimizer is None
                          else optimizer(params))
        self.schedule = None if schedule is None else schedule(self.optimizer)
        self.steps_done = 0
        # (C, H, W) for image inputs: a notation network says it, a module its input shape
        shape = model_shape(model)
        self._image = getattr(model, "input_image", None) or (
            shape if shape is not None and len(shape) == 3 else None)
        check_shift(config.shift, self._image)
        # its own stream, so that shift = 0 leaves the mini-batch order as it was
        self._shift_rng = np.random.default_rng(np.random.SeedSequence([config.seed, 0x5A1F7]))
        self.privacy: PrivateSGD | None = None
        if dp is not None and config.shift:
            raise ValueError("shift with DP-SGD is not supported: DP-SGD steps draw their "
                             "own Poisson batches; set shift = 0 or train without dp")
        if dp is not None and (batches is not None or self.custom_loss):
            raise ValueError("DP-SGD needs the training set in memory and the cross-entropy "
                             "loss (Poisson sampling over every sample); return a "
                             "TensorDataset and drop training.loss, or train without dp")
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
            x = random_shifts(x.reshape(x.shape[0], -1), self._image, self.config.shift,
                              self._shift_rng).view_as(x)
        return x

    def _next_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next mini-batch on the training device: indexed from memory, or the loader's."""
        if self.batches is None:
            index = self._next_batch()
            x, y = self._inputs(index), self._y[index]
        else:
            x, y = self.batches.next()
            x = _rows(self.model, x)
            if self.config.shift and self._image is not None:
                x = random_shifts(x.reshape(x.shape[0], -1).float(), self._image,
                                  self.config.shift, self._shift_rng).view_as(x)
        if self.device.type == "cpu":
            return x, y
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

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
            x, y = self._next_data()
            self.optimizer.zero_grad(set_to_none=True)
            with self.precision.autocast():
                loss = self.loss_fn(self.model(x), y)
            step_loss = loss + term() if term is not None else loss
            self.precision.step(step_loss, self.optimizer, self._after_step)
            total += float(loss.detach())
        self.steps_done += steps
        return total / steps

    def _after_step(self) -> None:
        if self.schedule is not None:
            self.schedule.step()  # type: ignore[attr-defined]

    #: Key of the schedule's state inside :meth:`optimizer_state` (the optimizer ignores it).
    SCHEDULE_KEY = "p2p_schedule"

    def optimizer_state(self) -> dict[str, object]:
        """The optimizer's ``state_dict``, with the learning-rate schedule's when there is one."""
        state: dict[str, object] = dict(self.optimizer.state_dict())
        if self.schedule is not None:
            state[self.SCHEDULE_KEY] = self.schedule.state_dict()  # type: ignore[attr-defined]
        return state

    def load_optimizer_state(self, state: dict[str, object]) -> None:
        """Resume :meth:`optimizer_state` (a schedule's part is applied if both have one)."""
        state = dict(state)
        schedule = state.pop(self.SCHEDULE_KEY, None)
        self.optimizer.load_state_dict(state)
        if self.schedule is not None and schedule is not None:
            self.schedule.load_state_dict(schedule)  # type: ignore[attr-defined]

    def first_batch_loss(self) -> torch.Tensor:
        """The loss of one forward pass on a first mini-batch (no step is taken): what
        the node checks before it starts, so that bad items fail in one line then."""
        self.model.train()
        x, y = self._next_data()
        with self.precision.autocast():
            loss = self.loss_fn(self.model(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        return loss

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
    def evaluate(self, x: np.ndarray | torch.Tensor, y: np.ndarray | torch.Tensor,
                 metrics: Metrics | None = None) -> Evaluation:
        """Loss and metrics of the current model on (x, y) (accuracy by default)."""
        if not self.custom_loss and metrics is None and self.device.type == "cpu" \
                and self.precision.name == "fp32":
            return evaluate_model(self.model, x, y)
        xt, yt = _as_tensors(x, y, "evaluate", model_shape(self.model))
        size = max(self.config.batch_size, 256)
        chunks = ((xt[i:i + size], yt[i:i + size]) for i in range(0, int(yt.shape[0]), size))
        return self.evaluate_batches(chunks, metrics)

    @torch.no_grad()
    def evaluate_batches(self, batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
                         metrics: Metrics | None = None) -> Evaluation:
        """Loss and metrics over ``batches`` (a test set read in order) on the trainer's
        device, precision and loss."""
        return evaluate_batches(self.model, batches, loss=self.loss_fn,
                                metrics=metrics or Metrics(classes=not self.custom_loss),
                                device=self.device, precision=self.precision)


@torch.no_grad()
def evaluate_model(model: nn.Module, x: np.ndarray | torch.Tensor,
                   y: np.ndarray | torch.Tensor) -> Evaluation:
    """Accuracy and mean cross-entropy of `model` on (x, y); leaves the model in eval mode."""
    xt, yt = _as_tensors(x, y, "evaluate", model_shape(model))
    if yt.numel() == 0:
        return Evaluation(accuracy=float("nan"), loss=float("nan"), samples=0)
    model.eval()
    logits = model(xt)
    loss = float(cross_entropy(logits, yt))
    accuracy = float((logits.argmax(dim=1) == yt).double().mean())
    return Evaluation(accuracy=accuracy, loss=loss, samples=int(yt.numel()),
                      metrics={"accuracy": accuracy})


@torch.no_grad()
def evaluate_batches(model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], *,
                     loss: LossFn = cross_entropy, metrics: Metrics | None = None,
                     device: torch.device | None = None,
                     precision: Precision | None = None) -> Evaluation:
    """Mean loss (weighted by batch size) and ``metrics`` of ``model`` over ``batches``;
    leaves the model in eval mode."""
    metrics = metrics or Metrics()
    run = metrics.start()
    model.eval()
    total, samples = 0.0, 0
    for x, y in batches:
        if device is not None and device.type != "cpu":
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with precision.autocast() if precision is not None else _no_context():
            outputs = model(_rows(model, x))
            value = loss(outputs, y)
        n = int(y.shape[0]) if y.dim() else 1
        total += float(value) * n
        samples += n
        run.update(outputs.float(), y)
    values = run.compute()
    if not samples:
        return Evaluation(accuracy=float("nan"), loss=float("nan"), samples=0, metrics=values)
    return Evaluation(accuracy=values.get("accuracy", float("nan")), loss=total / samples,
                      samples=samples, metrics=values)


def _no_context() -> contextlib.AbstractContextManager[object]:
    return contextlib.nullcontext()
