"""Where the module trains and in which precision (``training.device``, ``training.precision``).

``auto`` picks CUDA when a device is present, else the CPU; asking for ``cuda``
where none exists (or ``mps`` off Apple silicon) is a one-line
:class:`DeviceError` before anything is created. Mixed precision autocasts
the forward pass and the loss to bfloat16 (CPU and CUDA) or float16 (CUDA,
with a gradient scaler); parameters, optimizer state and the canonical
vectors stay float32/float64. ``mps`` is accepted but untested.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from learner.errors import FieldError

__all__ = ["DeviceError", "Precision", "resolve_device"]


class DeviceError(FieldError):
    """The configured device or precision cannot be used here; ``field`` is the config key."""


def resolve_device(text: str) -> torch.device:
    """The torch device ``training.device`` names, checked to exist."""
    kind, _, number = text.partition(":")
    if kind == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"{text!r} asked for, but this machine has no CUDA device (torch "
                              f"{torch.__version__} sees none); use \"cpu\" or \"auto\"",
                              field="training.device")
        index = int(number) if number else 0
        if index >= torch.cuda.device_count():
            raise DeviceError(f"{text!r}: this machine has {torch.cuda.device_count()} CUDA "
                              f"device(s), numbered from 0", field="training.device")
        return torch.device("cuda", index)
    if kind == "mps":
        if not torch.backends.mps.is_available():
            raise DeviceError("'mps' asked for, but Apple's Metal backend is not available "
                              'here; use "cpu" or "auto"', field="training.device")
        return torch.device("mps")
    if kind == "cpu":
        return torch.device("cpu")
    raise DeviceError(f"unknown device {text!r}; expected cpu, auto, cuda, cuda:N or mps",
                      field="training.device")


class Precision:
    """Autocast and gradient scaling for ``precision`` on ``device``."""

    def __init__(self, precision: str, device: torch.device) -> None:
        if precision not in ("fp32", "bf16", "fp16"):
            raise DeviceError(f"unknown precision {precision!r}; expected fp32, bf16 or fp16",
                              field="training.precision")
        if precision == "fp16" and device.type != "cuda":
            raise DeviceError(f'"fp16" needs a CUDA device (training on {device}); use "bf16"',
                              field="training.precision")
        self.name = precision
        self.device = device
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        self._dtype = dtype
        self.scaler: Any = (torch.amp.GradScaler("cuda") if precision == "fp16" else None)

    def autocast(self) -> contextlib.AbstractContextManager[object]:
        """The context the forward pass and the loss run in."""
        if self._dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self._dtype)

    def step(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer,
             after: Callable[[], None] | None = None) -> None:
        """Backpropagate ``loss`` and step ``optimizer`` (scaled for fp16)."""
        if self.scaler is None:
            loss.backward()
            optimizer.step()
        else:
            self.scaler.scale(loss).backward()
            self.scaler.step(optimizer)
            self.scaler.update()
        if after is not None:
            after()
