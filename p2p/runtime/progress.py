"""What the trainer has done (read by the admin commands) and the lines it logs.

One line per evaluation, so a foreground node shows how it learns, and one when
a DP node's privacy budget stops its training. The lines keep the node's logger
name (``p2p.runtime.node``) so that operators' log filters stay as they were.
See docs/guide/operations.md.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from learner.dp.accounting import PrivacySpent

__all__ = ["Progress", "log_budget_spent", "log_progress"]

logger = logging.getLogger("p2p.runtime.node")


@dataclass
class Progress:
    """What the trainer has done; read by the admin commands."""

    round: int = 0
    steps: int = 0
    loss: float | None = None
    accuracy: float | None = None
    test_loss: float | None = None
    # the test set's metrics at the last evaluation (accuracy, or the user's metrics hook)
    metrics: dict[str, float] = field(default_factory=dict)
    # (time, round, accuracy) of recent evaluations; bounded for long-lived daemons
    history: deque[tuple[float, int, float]] = field(default_factory=lambda: deque(maxlen=1000))
    finished: bool = False


class ProgressSource(Protocol):
    """The node as these lines read it."""

    progress: Progress
    cores: Any

    def model_counters(self, name: str) -> dict[str, int]: ...

    def privacy_spent(self) -> PrivacySpent | None: ...

    @property
    def started_sampler(self) -> Any: ...


def log_budget_spent(node: ProgressSource) -> None:
    """Say once why a DP node stopped training while it keeps gossiping."""
    spent = node.privacy_spent()
    if spent is None:
        return
    logger.warning(
        "privacy budget spent: epsilon %.4g of %g (delta %g) after %d DP-SGD steps; another "
        "round would go past it, so training stops at round %d. The node keeps averaging "
        "with its peers: pushing the model it holds reveals nothing new about its data",
        spent.epsilon, spent.budget, spent.delta, spent.steps, node.progress.round,
        extra={"epsilon": spent.epsilon, "epsilon_budget": spent.budget,
               "dp_steps": spent.steps, "round": node.progress.round})


def log_progress(node: ProgressSource) -> None:
    """One line per evaluation: losses, accuracy, view size and pushes so far."""
    p = node.progress
    totals = {"pushes_sent": 0, "pushes_received": 0}
    for name in node.cores:
        counters = node.model_counters(name)
        for key in totals:
            totals[key] += counters[key]
    sampler = node.started_sampler
    view = 0 if sampler is None else len(sampler.view())
    train = "-" if p.loss is None else f"{p.loss:.4g}"
    test = "-" if p.test_loss is None else f"{p.test_loss:.4g}"
    logger.info(
        "round %d: train loss %s, test accuracy %.1f%% (test loss %s), %d peers in view, "
        "pushes %d sent / %d received", p.round, train, 100 * (p.accuracy or 0.0), test, view,
        totals["pushes_sent"], totals["pushes_received"],
        extra={"round": p.round, "train_loss": p.loss, "test_accuracy": p.accuracy,
               "test_loss": p.test_loss, "view_size": view,
               "pushes_sent": totals["pushes_sent"],
               "pushes_received": totals["pushes_received"]},
    )
