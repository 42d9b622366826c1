"""The loss a node trains with and the metrics it reports (``training.loss``, ``training.metrics``).

The default is classification: cross-entropy, and accuracy on the test set.
A user's ``loss(outputs, targets)`` returns the batch's mean loss as a scalar
tensor. A user's ``metrics`` is either a function ``(outputs, targets) ->
{name: value}`` of one test batch (the node reports each value's mean over the
test set, weighted by batch size) or a class whose instances take
``update(outputs, targets)`` per batch and give ``compute() -> {name: value}``
(for what a mean of batch means cannot give, such as perplexity). The
values appear in ``p2p status``, ``p2p metrics`` and the swarm's JSON.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from learner.user_code import FactoryError, describe_type

__all__ = ["LossFn", "Metrics", "check_loss", "cross_entropy"]

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def cross_entropy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The default loss: mean cross-entropy of logits against class indices."""
    return F.cross_entropy(outputs, targets)


def check_loss(value: object, text: str) -> torch.Tensor:
    """``value`` if it is a finite scalar tensor a loss hook may return (FactoryError if not)."""
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        shape = "" if not isinstance(value, torch.Tensor) else f" of shape {tuple(value.shape)}"
        raise FactoryError(f"{text} returned {describe_type(value)}{shape}; expected a scalar "
                           "tensor (the batch's mean loss)", field="training.loss")
    if not value.requires_grad:
        raise FactoryError(f"{text} returned a tensor that does not depend on the outputs "
                           "(no gradient); compute it from them with torch operations",
                           field="training.loss")
    return value


def _number(value: object, name: str, text: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach())
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise FactoryError(f"{text}: metric {name!r} is {describe_type(value)}; expected a number",
                       field="training.metrics")


def _values(result: object, text: str) -> dict[str, float]:
    if not isinstance(result, Mapping):
        raise FactoryError(f"{text} returned {describe_type(result)}; expected a dict "
                           "{name: number}", field="training.metrics")
    return {str(k): _number(v, str(k), text) for k, v in result.items()}


class Metrics:
    """What a node measures on its test set: accuracy by default, or ``hook``'s values."""

    def __init__(self, hook: Callable[..., Any] | None = None, *, text: str = "",
                 classes: bool = True) -> None:
        self.hook = hook
        self.text = text
        self.classes = classes

    def start(self) -> MetricsRun:
        """A fresh accumulation for one pass over the test set."""
        stateful = None
        if isinstance(self.hook, type):
            stateful = self.hook()
            for method in ("update", "compute"):
                if not callable(getattr(stateful, method, None)):
                    raise FactoryError(f"{self.text} is a class without {method}(); expected "
                                       "update(outputs, targets) and compute()",
                                       field="training.metrics")
        return MetricsRun(self, stateful)


class MetricsRun:
    """One evaluation's running sums."""

    def __init__(self, metrics: Metrics, stateful: Any) -> None:
        self._metrics = metrics
        self._stateful = stateful
        self._sums: dict[str, float] = {}
        self._samples = 0

    def update(self, outputs: torch.Tensor, targets: torch.Tensor) -> None:
        n = int(targets.shape[0]) if targets.dim() else 1
        self._samples += n
        m = self._metrics
        if m.hook is None:
            if m.classes:
                hits = float((outputs.argmax(dim=1) == targets).double().sum())
                self._sums["accuracy"] = self._sums.get("accuracy", 0.0) + hits
            return
        if self._stateful is not None:
            self._stateful.update(outputs, targets)
            return
        for name, value in _values(m.hook(outputs, targets), m.text).items():
            self._sums[name] = self._sums.get(name, 0.0) + value * n

    def compute(self) -> dict[str, float]:
        """Each metric over the whole pass (NaN when no sample was seen)."""
        if self._stateful is not None:
            return _values(self._stateful.compute(), self._metrics.text)
        if not self._samples:
            return {name: math.nan for name in self._sums}
        return {name: total / self._samples for name, total in self._sums.items()}
