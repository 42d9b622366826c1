"""Training rounds that never leave a non-finite value behind.

Before each round :class:`FiniteGuard` keeps the network's and the optimizer's
state; after it, a non-finite loss (a NaN gradient, an overflow, a loss term
gone wrong) or a non-finite parameter or optimizer value is a *non-finite
event*: the kept state is put back, so the round is skipped, and the event is
reported. After ``limit`` events in a row the node stops training (it keeps
serving its peers) and ``p2p status`` says ``training: stopped (non-finite ...)``.
It wraps whatever trainer the node runs, so it stays in one place however
training is generalised. A DP-SGD round whose Poisson batches were all empty
reports no loss (NaN by the trainer's contract): not an event.
See docs/guide/operations.md (non-finite rounds).
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from gossip import LogLimiter

__all__ = ["NONFINITE_LIMIT", "FiniteGuard", "tensors_in"]

logger = logging.getLogger(__name__)

#: Non-finite rounds in a row after which training stops.
NONFINITE_LIMIT = 3


class FiniteGuard:
    """Keeps the last good state of ``network`` and ``optimizer`` (see the module docstring)."""

    def __init__(self, network: nn.Module, optimizer: torch.optim.Optimizer, *,
                 limit: int = NONFINITE_LIMIT) -> None:
        self.network = network
        self.optimizer = optimizer
        self.limit = limit
        self._kept: tuple[dict[str, torch.Tensor], dict[str, Any]] | None = None
        self.in_a_row = 0  # non-finite rounds since the last good one
        self.events = 0  # non-finite rounds in all
        self.stopped: str | None = None  # why training stopped, once it did
        self._lines = LogLimiter(logger)  # a model that fails every other round: one a minute

    def keep(self) -> None:
        """Remember the state before a round (call with the model lock held)."""
        self._kept = ({k: v.detach().clone() for k, v in self.network.state_dict().items()},
                      copy.deepcopy(self.optimizer.state_dict()))

    def problem(self, loss: float, *, no_loss_ok: bool = False) -> str | None:
        """What is not finite after a round, or None. ``no_loss_ok``: a NaN loss means
        "no batch ran" (DP-SGD's empty Poisson batches), not a failure."""
        for where, tensor in self._state():
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                bad = int((~torch.isfinite(tensor)).sum())
                return f"{where} holds {bad} non-finite value(s)"
        if math.isinf(loss) or (math.isnan(loss) and not no_loss_ok):
            return f"the training loss is {loss}"
        return None

    def rollback(self) -> None:
        """Put the state kept before the round back."""
        if self._kept is None:
            raise RuntimeError("FiniteGuard.rollback before keep")
        params, optimizer = self._kept
        self.network.load_state_dict(params)
        self.optimizer.load_state_dict(optimizer)

    def restore(self, round_number: int, problem: str, now: float) -> None:
        """Put the kept state back after a non-finite round and report it (at most a line
        a minute, ``now`` the time); stops training after ``limit`` such rounds in a row."""
        self.rollback()
        self.in_a_row += 1
        self.events += 1
        if self.in_a_row >= self.limit:
            self.stopped = (f"non-finite values in {self.in_a_row} rounds in a row, the last "
                            f"at round {round_number}: {problem}")
            logger.error("training stopped: %s. The state before those rounds is kept and the "
                         "node keeps serving its peers; lower training.lr, check the data "
                         "(p2p config checks it) or the strategy, then restart", self.stopped)
        else:
            self._lines.warning(now, "non-finite rounds",
                                "round %d skipped: %s; the state before the round is restored "
                                "(%d of %d non-finite rounds in a row before training stops)",
                                round_number, problem, self.in_a_row, self.limit)

    def good(self) -> None:
        """A round ended finite."""
        self.in_a_row = 0

    def _state(self) -> Iterator[tuple[str, torch.Tensor]]:
        for key, value in self.network.state_dict().items():
            yield f"parameter {key}", value
        yield from tensors_in(self.optimizer.state_dict().get("state", {}), "optimizer state")


def tensors_in(obj: object, where: str) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor inside nested dicts, lists and tuples, with where it sits
    (``where[key][0]``)."""
    if isinstance(obj, torch.Tensor):
        yield where, obj
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            yield from tensors_in(value, f"{where}[{key!r}]")
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            yield from tensors_in(value, f"{where}[{i}]")
