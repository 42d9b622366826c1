"""Many nodes' training steps at once: one vectorised step over identical networks.

When a lock-step simulation's nodes share one architecture and optimizer
setting, :func:`train_steps_batched` stacks their parameters and runs one
``torch.func.vmap``-ed forward/backward per step for all of them. The results
match each trainer's ``train_steps`` (within float tolerance): each node draws
its own mini-batches, torch's optimizer formula is applied to the stacked
tensors with each trainer's optimizer state read and written back, and the new
values go into each node's parameter tensors in place. Trainers that cannot be
batched (DP-SGD, other optimizer settings, buffers or dropout, an unshared
architecture) train with their own loop; a debug log says which.

See docs/guide/simulation.md ("Lock-step training").
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from learner.network import PartialNetwork
from learner.trainer import Trainer

__all__ = ["batch_key", "train_steps_batched"]

logger = logging.getLogger(__name__)

_Params = dict[str, torch.Tensor]


def train_steps_batched(trainers: Sequence[Trainer], steps: int, *,
                        keys: Sequence[Hashable | str] | None = None) -> list[float]:
    """``[t.train_steps(steps) for t in trainers]``, with trainers that share an
    architecture and optimizer setting trained together in one vectorised step.

    Returns each trainer's mean training loss, in the order given. Each trainer
    and each model may appear once only (two trainers of one model would have
    to train one after the other). ``keys``: each trainer's :func:`batch_key`, if
    the caller has just worked them out (a lock-step runner does, to set apart
    the trainers that cannot be batched); None: worked out here.
    """
    if steps < 1:
        raise ValueError(f"train_steps_batched: expected steps >= 1, got {steps}")
    _check_distinct(trainers)
    if keys is None:
        keys = [batch_key(t) for t in trainers]
    elif len(keys) != len(trainers):
        raise ValueError(f"train_steps_batched: {len(keys)} keys for {len(trainers)} trainers")
    groups: dict[Hashable, list[int]] = {}
    plain: list[int] = []
    for i, key in enumerate(keys):
        if isinstance(key, str):
            logger.debug("trainer %d trains with the plain loop: %s", i, key)
            plain.append(i)
        else:
            groups.setdefault(key, []).append(i)
    losses = [math.nan] * len(trainers)
    for members in groups.values():
        if len(members) == 1:
            logger.debug("trainer %d trains with the plain loop: no other trainer shares "
                         "its architecture and optimizer settings", members[0])
            plain.extend(members)
            continue
        for i, loss in zip(members, _BatchedGroup([trainers[i] for i in members]).run(steps),
                           strict=True):
            losses[i] = loss
    for i in sorted(plain):
        losses[i] = trainers[i].train_steps(steps)
    return losses


def _check_distinct(trainers: Sequence[Trainer]) -> None:
    seen_trainers: set[int] = set()
    seen_models: set[int] = set()
    for i, trainer in enumerate(trainers):
        if not isinstance(trainer, Trainer):
            raise TypeError(f"train_steps_batched: trainer {i} is a {type(trainer).__name__}, "
                            "expected learner.trainer.Trainer")
        if id(trainer) in seen_trainers or id(trainer.model) in seen_models:
            raise ValueError(f"train_steps_batched: trainer {i} (or its model) appears twice; "
                             "train it in a separate call")
        seen_trainers.add(id(trainer))
        seen_models.add(id(trainer.model))


# ---------------------------------------------------------------- grouping
def batch_key(trainer: Trainer) -> Hashable | str:
    """What trainers must share to be batched together (a hashable tuple), or, as a
    ``str``, why this trainer cannot be batched.

    Every parameter is assumed to take part in the forward pass (as in
    :class:`~learner.network.PartialNetwork`): the batched step gives an unused
    parameter a zero gradient where the plain loop would skip it.
    """
    if trainer.privacy is not None:
        return "DP-SGD draws Poisson batches and clips per sample"
    if trainer.loss_term is not None:
        return "the trainer adds a loss term (a collaboration strategy's) to each step"
    if trainer.batches is not None:
        return "the trainer reads its batches through a DataLoader"
    if trainer.custom_loss or trainer.schedule is not None:
        return "the trainer has the user's loss or learning-rate schedule"
    if trainer.device.type != "cpu" or trainer.precision.name != "fp32":
        return "the trainer runs on another device or in mixed precision"
    model = trainer.model
    if any(True for _ in model.buffers()):
        return "the model has buffers (batch norm or similar)"
    if any(isinstance(m, nn.modules.dropout._DropoutNd) for m in model.modules()):
        return "the model has dropout (its randomness is not the plain loop's)"
    named = list(model.named_parameters())
    if not named or not all(p.requires_grad for _, p in named):
        return "the model has frozen parameters or none"
    optimizer = _optimizer_key(trainer.optimizer, [p for _, p in named])
    if isinstance(optimizer, str):
        return optimizer
    if isinstance(model, PartialNetwork):
        # the forward pass is a function of the network spec alone (not of the partial models)
        architecture: Hashable = (PartialNetwork, model.layout.network)
    else:
        # a generic module: its class and printed structure stand for its forward pass
        architecture = (type(model), repr(model))
    shapes = tuple((name, tuple(p.shape), p.dtype) for name, p in named)
    data = (trainer._batch, tuple(trainer._x.shape[1:]), trainer._x.dtype)
    return architecture, shapes, data, optimizer


def _optimizer_key(optimizer: torch.optim.Optimizer,
                   params: list[nn.Parameter]) -> Hashable | str:
    if len(optimizer.param_groups) != 1:
        return "the optimizer has several parameter groups"
    group = optimizer.param_groups[0]
    if len(group["params"]) != len(params) or any(
            a is not b for a, b in zip(group["params"], params, strict=True)):
        return "the optimizer does not train exactly the model's parameters"
    if group.get("maximize") or group.get("differentiable") or group.get("fused") \
            or group.get("capturable"):
        return "the optimizer uses maximize/differentiable/fused/capturable"
    if type(optimizer) is torch.optim.SGD:
        if group["nesterov"] or group["dampening"] != 0:
            return "SGD with nesterov or dampening"
        return ("sgd", float(group["lr"]), float(group["momentum"]),
                float(group["weight_decay"]))
    if type(optimizer) is torch.optim.Adam:
        if group["amsgrad"] or group.get("decoupled_weight_decay"):
            return "Adam with amsgrad or decoupled weight decay"
        beta1, beta2 = group["betas"]
        return ("adam", float(group["lr"]), float(beta1), float(beta2), float(group["eps"]),
                float(group["weight_decay"]))
    return f"optimizer {type(optimizer).__name__} is not batched"


# ---------------------------------------------------------------- one group
def _per_node(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(N,) values shaped to broadcast against a stacked (N, ...) tensor."""
    return values.reshape(values.shape[0], *([1] * (like.dim() - 1)))


@dataclass
class _Update:
    """The optimizer's hyperparameters (one setting for the whole group)."""

    kind: str
    lr: float
    weight_decay: float
    momentum: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8


class _BatchedGroup:
    """Trainers with one architecture and one optimizer setting (see :func:`batch_key`)."""

    def __init__(self, trainers: list[Trainer]) -> None:
        self.trainers = trainers
        self.template = trainers[0].model
        self.names = [name for name, _ in self.template.named_parameters()]
        self.node_params = [dict(t.model.named_parameters()) for t in trainers]
        self._joined: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        group = trainers[0].optimizer.param_groups[0]
        if type(trainers[0].optimizer) is torch.optim.Adam:
            beta1, beta2 = group["betas"]
            self.update = _Update("adam", float(group["lr"]), float(group["weight_decay"]),
                                  beta1=float(beta1), beta2=float(beta2), eps=float(group["eps"]))
        else:
            self.update = _Update("sgd", float(group["lr"]), float(group["weight_decay"]),
                                  momentum=float(group["momentum"]))

    # ------------------------------------------------------------ state in/out
    def _stack(self, get: Callable[[Trainer, nn.Parameter], torch.Tensor | None]) -> _Params:
        """One stacked tensor per parameter name; a missing state entry is zeros."""
        out: _Params = {}
        for name in self.names:
            rows = []
            for trainer, params in zip(self.trainers, self.node_params, strict=True):
                p = params[name]
                value = get(trainer, p)
                rows.append(torch.zeros_like(p) if value is None else value.detach())
            out[name] = torch.stack(rows)
        return out

    def _state_of(self, key: str) -> Callable[[Trainer, nn.Parameter], torch.Tensor | None]:
        def get(trainer: Trainer, p: nn.Parameter) -> torch.Tensor | None:
            value = trainer.optimizer.state.get(p, {}).get(key)
            return value if isinstance(value, torch.Tensor) else None
        return get

    def _adam_steps(self) -> torch.Tensor:
        """(N,) float32 step counts of the first parameter (torch keeps one per parameter;
        they agree for a single-group optimizer)."""
        steps = []
        for trainer, params in zip(self.trainers, self.node_params, strict=True):
            state = trainer.optimizer.state.get(params[self.names[0]], {})
            steps.append(float(state.get("step", 0.0)))
        return torch.tensor(steps, dtype=torch.float32)

    def _write_back(self, params: _Params, buffers: dict[str, _Params],
                    adam_steps: torch.Tensor | None) -> None:
        with torch.no_grad():
            for i, (trainer, node_params) in enumerate(
                    zip(self.trainers, self.node_params, strict=True)):
                for name in self.names:
                    p = node_params[name]
                    p.copy_(params[name][i])  # in place: views and the optimizer keep p
                    if not buffers:
                        continue
                    state = trainer.optimizer.state[p]
                    for key, stacked in buffers.items():
                        old = state.get(key)
                        if isinstance(old, torch.Tensor) and old.shape == p.shape:
                            old.copy_(stacked[name][i])
                        else:
                            state[key] = stacked[name][i].clone()
                    if adam_steps is not None:
                        state["step"] = torch.tensor(float(adam_steps[i]), dtype=torch.float32)

    # ------------------------------------------------------------ training
    def _loss(self, params: _Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(self.template, params, (x,)), y)

    def _draw(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every node's next mini-batch, drawn by its own trainer (same RNG use as its loop)."""
        if self._joined is not None:
            # no augmentation: one gather from all shards instead of one per node
            x_all, y_all, offsets = self._joined
            index = torch.stack([t._next_batch() for t in self.trainers])
            index += offsets
            return x_all[index], y_all[index]
        xs, ys = [], []
        for trainer in self.trainers:
            index = trainer._next_batch()
            xs.append(trainer._inputs(index))
            ys.append(trainer._y[index])
        return torch.stack(xs), torch.stack(ys)

    def _join_shards(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """All shards end to end and each one's offset, if no trainer augments its inputs."""
        if any(t.config.shift and t._image is not None for t in self.trainers):
            return None
        sizes = [int(t._y.numel()) for t in self.trainers]
        offsets = torch.tensor(np.cumsum([0, *sizes[:-1]]), dtype=torch.int64).unsqueeze(1)
        return (torch.cat([t._x for t in self.trainers]), torch.cat([t._y for t in self.trainers]),
                offsets)

    def run(self, steps: int) -> list[float]:
        for trainer in self.trainers:
            trainer.model.train()
        self._joined = self._join_shards()
        params = self._stack(lambda _t, p: p)
        u = self.update
        buffers: dict[str, _Params] = {}
        adam_steps: torch.Tensor | None = None
        if u.kind == "adam":
            buffers = {"exp_avg": self._stack(self._state_of("exp_avg")),
                       "exp_avg_sq": self._stack(self._state_of("exp_avg_sq"))}
            adam_steps = self._adam_steps()
        elif u.momentum != 0.0:
            # a node without a buffer yet: zeros give torch's first step (buf = grad) exactly
            buffers = {"momentum_buffer": self._stack(self._state_of("momentum_buffer"))}
        step_fn = vmap(grad_and_value(self._loss))
        total = torch.zeros(len(self.trainers), dtype=torch.float64)
        for _ in range(steps):
            x, y = self._draw()
            grads, loss = step_fn(params, x, y)
            total += loss.detach().double()
            with torch.no_grad():
                if adam_steps is not None:
                    adam_steps += 1
                for name in self.names:
                    self._apply(name, params[name], grads[name], buffers, adam_steps)
        self._write_back(params, buffers, adam_steps)
        for trainer in self.trainers:
            trainer.steps_done += steps
        return [float(v) / steps for v in total]

    def _apply(self, name: str, param: torch.Tensor, grad: torch.Tensor,
               buffers: dict[str, _Params], adam_steps: torch.Tensor | None) -> None:
        """torch's update (single-tensor form) on the stacked (N, ...) tensors, in place."""
        u = self.update
        if u.weight_decay != 0.0:
            grad = grad.add(param, alpha=u.weight_decay)
        if adam_steps is None:
            if u.momentum != 0.0:
                buf = buffers["momentum_buffer"][name]
                buf.mul_(u.momentum).add_(grad)
                grad = buf
            param.add_(grad, alpha=-u.lr)
            return
        exp_avg = buffers["exp_avg"][name]
        exp_avg_sq = buffers["exp_avg_sq"][name]
        exp_avg.lerp_(grad, 1 - u.beta1)
        exp_avg_sq.mul_(u.beta2).addcmul_(grad, grad, value=1 - u.beta2)
        # torch works these out in Python floats and the kernels round them to float32
        steps = adam_steps.double()
        step_size = _per_node((u.lr / (1 - u.beta1 ** steps)).float(), param)
        correction2_sqrt = _per_node(((1 - u.beta2 ** steps) ** 0.5).float(), param)
        denom = (exp_avg_sq.sqrt() / correction2_sqrt).add_(u.eps)
        param.sub_(step_size * exp_avg / denom)  # addcdiv's order: (value * t1) / t2
