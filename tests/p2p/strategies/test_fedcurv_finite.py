"""Issue 30: FedCurv never kills a node (the cause of its "NaN" on loaded daemons).

The cause: the pull ``A``, ``B`` the loss term reads were updated *in place*
(``copy_``, ``zero_``) by :meth:`FedCurvStrategy.refresh`, which the event loop
runs while the trainer's worker thread is between a mini-batch's forward and
backward pass (a Fisher estimate applied outside the model lock). Autograd then
refuses the backward ("one of the variables needed for gradient computation has
been modified by an inplace operation ... check_nan=False"), and the error
stopped the node. Only a loaded machine stretched that window enough to hit it;
the test below opens it deterministically. Now ``refresh`` puts new tensors in
place, so a backward in flight keeps the ones its forward read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from p2p.config import StrategyConfig
from p2p.strategies.fedcurv.node import FedCurvStrategy, start_generation, vector_of
from p2p.testing import MemoryNetwork, fast_spec, memory_node

STRATEGY = StrategyConfig(name="fedcurv", fedcurv_lambda=1.0, fedcurv_every=2,
                          fedcurv_samples=16)


def _node(tmp_path: Path) -> tuple[object, FedCurvStrategy]:
    node = memory_node(MemoryNetwork(), tmp_path / "n0", fast_spec(), 0, "10.0.0.1:7000",
                       strategy=STRATEGY)
    strategy = node.strategy
    assert isinstance(strategy, FedCurvStrategy)
    return node, strategy


def _estimates(strategy: FedCurvStrategy, scale: float) -> None:
    """Give the gossiped sums of ``global`` estimates with a pull (two holders counted)."""
    m = strategy._models["global"]
    n = m.own_f.size
    f = np.full(n, scale)
    start_generation(m.core, vector_of(f, np.full(n, 0.25), count=0.5, generation=0))


def test_a_refresh_during_a_training_step_leaves_its_backward_intact(tmp_path: Path) -> None:
    node, strategy = _node(tmp_path)
    _estimates(strategy, 1.0)
    strategy.refresh()
    term = node.learning.trainer.loss_term  # type: ignore[attr-defined]
    assert term is not None
    loss = term()  # the forward of a mini-batch (the worker thread)
    assert float(loss.detach()) != 0.0
    _estimates(strategy, 3.0)  # meanwhile a new estimate is applied on the event loop
    strategy.refresh()
    loss.backward()  # before the fix: RuntimeError (a tensor it saved was modified in place)
    flat = node.learning.network.flat_parameters()  # type: ignore[attr-defined]
    assert flat.grad is not None and bool(torch.isfinite(flat.grad).all())
    # and the next step reads the new pull
    assert float(term().detach()) != float(loss.detach())
