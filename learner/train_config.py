"""Training settings as a validated value object (no torch: the node's config builds it)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from learner.errors import FieldError

__all__ = ["OPTIMIZERS", "TrainConfig", "TrainConfigError"]

#: Optimizers a node may train with.
OPTIMIZERS: tuple[str, ...] = ("sgd", "momentum", "adam")


class TrainConfigError(FieldError):
    """A training setting is out of range; the message names the field and the expected form."""

    prefix = "train"


@dataclass(frozen=True)
class TrainConfig:
    """Training settings.

    lr: learning rate; batch_size: samples per mini-batch (capped at the shard
    size); steps_per_round: mini-batches per `train_round`; optimizer: "sgd"
    (plain), "momentum" (SGD with `momentum`) or "adam"; weight_decay: L2
    penalty; shift: move each training image by up to this many pixels
    (:mod:`learner.augment`; networks on images only, 0 = off); seed: drives
    the mini-batch order (and the shifts).

    The defaults are the daemon's (``[training]`` of a node's config). The
    papers used plain SGD with learning rate 0.1, a sigmoid network and mean
    loss: that is this config with ``lr=0.1`` and a sigmoid network.
    """

    lr: float = 0.05
    batch_size: int = 32
    steps_per_round: int = 10
    optimizer: str = "sgd"
    momentum: float = 0.9
    weight_decay: float = 0.0
    shift: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise TrainConfigError(f"expected a finite number > 0, got {self.lr}", field="lr")
        if self.batch_size < 1:
            raise TrainConfigError(f"expected an integer >= 1, got {self.batch_size}",
                                   field="batch_size")
        if self.steps_per_round < 1:
            raise TrainConfigError(f"expected an integer >= 1, got {self.steps_per_round}",
                                   field="steps_per_round")
        if self.optimizer not in OPTIMIZERS:
            raise TrainConfigError(f"unknown {self.optimizer!r}; expected one of "
                                   f"{', '.join(OPTIMIZERS)}", field="optimizer")
        if not 0.0 <= self.momentum < 1.0:
            raise TrainConfigError(f"expected a number >= 0 and < 1, got {self.momentum}",
                                   field="momentum")
        if not self.weight_decay >= 0.0:
            raise TrainConfigError(f"expected a number >= 0, got {self.weight_decay}",
                                   field="weight_decay")
        if not (isinstance(self.shift, int) and self.shift >= 0):
            raise TrainConfigError(f"expected an integer >= 0 (pixels), got {self.shift!r}",
                                   field="shift")
