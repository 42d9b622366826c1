"""The push-sum state of one model and its arithmetic (see :mod:`gossip.pushsum`).

State: the trained values ``z``, the push-sum estimate ``x`` and the weight
``w``; with masking, the noise held apart in ``x - z`` and the training steps
made meanwhile (``held_steps``) until the fold.  Every change of mass goes
through one method here: a merged one-way push, a merged request and the
reply given for it, an ack with or without a reply, training, noise and the
fold.  Plain numpy, no checks: :class:`~gossip.pushsum.PushSum` validates
first and calls these only for what it accepted.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


class Estimate:
    """``z``, ``x`` and ``w`` of one core, and the masking phase they are in."""

    def __init__(self, values: np.ndarray, weight: float) -> None:
        self.n = int(values.shape[0])
        # x and z are one array while no noise is held apart (see hold_noise_apart):
        # updates then change both at once, with no copy per exchange
        self.z = values
        self.x = values
        self.w = weight
        self.noisy = False  # mask noise held apart in x - z
        self.noise_age = 0  # merges received since the youngest noise held arrived
        # training steps made while noise is held: kept out of the pushed estimate
        # until the fold (see train)
        self.held_steps: np.ndarray | None = None
        self._scratch: np.ndarray | None = None

    def buffer(self) -> np.ndarray:
        """A float64 scratch vector of the model's length, reused by every call.

        Its contents are only valid within one method call of the core; nothing
        kept (stored references, outstanding payloads, replies) may point into it.
        """
        if self._scratch is None:
            self._scratch = np.empty(self.n, dtype=np.float64)
        return self._scratch

    def hold_noise_apart(self) -> None:
        """Give x its own array before it moves away from z (noise arrives)."""
        if self.z is self.x:
            self.z = self.x.copy()

    def train(self, new: np.ndarray, step: np.ndarray) -> None:
        """Local training moved z to ``new`` (ours) by ``step``."""
        if self.noisy:
            # Held apart until the fold, not added to x: a push carries x, and two
            # pushes of one epoch with no merge between them carry the same noise,
            # so their difference would be exactly the local update.
            if self.held_steps is None:
                self.held_steps = step.copy()
            else:
                self.held_steps += step
            self.z = new
        else:
            self.x = self.z = new

    def reset(self, new: np.ndarray) -> None:
        """The trained values become ``new`` (ours), not by training: the estimate moves
        with them (the noise held apart, if any, stays)."""
        if self.noisy:
            self.x = self.x + (new - self.z)
        else:
            self.x = new
        self.z = new

    def add_noise(self, mass: np.ndarray, fresh: bool) -> None:
        """Add noise ``mass`` (ours) to the estimate; ``fresh`` restarts its age."""
        self.hold_noise_apart()
        mass /= self.w
        self.x += mass
        if fresh:
            self.noise_age = 0
            self.noisy = True
        elif not self.noisy:
            # a removal after the fold: it lands in the (averaged) trained values
            self.z = self.x

    def merge(self, y: np.ndarray, weight: float, *, noisy: bool, noise_age: int) -> bool:
        """Merge ``weight * y`` (a one-way push; ``y`` is ours).  True when one side held
        noise and the other had folded (a boundary merge, see ``boundary_fold_age``)."""
        new_w = self.w + weight
        a = weight / new_w
        boundary = noisy != self.noisy  # one side holds noise, the other has folded
        if noisy:
            self.hold_noise_apart()  # z keeps the trained values; the deviation is in x - z
            self.noise_age = min(self.noise_age, noise_age) if self.noisy else noise_age
            self.noisy = True
        elif self.noisy:
            self.z += a * (y - self.z)
        if self.noisy:
            # the held noise ages with the mass that comes in: only a merge mixes
            # others' estimates into ours (the min_peers collapse of issue 12:
            # counted by pushes made, a node that pushed into idle peers folded
            # its own unmixed noise into its trained values)
            self.noise_age += 1
        step = np.subtract(y, self.x, out=y)
        step *= a
        self.x += step
        self.w = new_w
        return boundary

    def answer(self, delta: np.ndarray, d: np.ndarray, s: float, r: float,
               midway: Callable[[np.ndarray], None]) -> None:
        """Merge a request ``q_A`` of share ``s`` and give away ``r`` of values ``q_A + d``.

        ``delta`` is ``x - q_A`` in :meth:`buffer`; no noise is held (x is z).
        ``midway`` gets ``delta``'s array once it is free (a scratch vector).
        """
        # mass: w x + s q_A - r (q_A + d), weight w + s - r (> 0: r < available),
        # that is x - ((s - r) / new_w) (x - q_A) - (r / new_w) d, in place (x is z)
        new_w = self.w + s - r
        delta *= (s - r) / new_w
        self.x -= delta
        midway(delta)
        d *= r / new_w
        self.x -= d
        self.w = new_w

    def give(self, sent: np.ndarray, share: float, masked: bool) -> None:
        """An ack without a reply: remove exactly the mass sent, ``share * sent``."""
        rest = self.w - share
        if masked:
            self.hold_noise_apart()  # the compensation stays here, held apart
        step = np.subtract(self.x, sent, out=self.buffer())
        step *= share / rest
        self.x += step
        if masked:
            self.noisy = True
            self.noise_age = 0
        self.w = rest

    def swap(self, sent: np.ndarray, d: np.ndarray, share: float, r: float) -> None:
        """An ack with a reply: remove ``share * q_A``, add ``r * q_B`` (``q_A = sent``,
        ``q_B = sent + d``; ``d`` is ours and is scaled in place)."""
        new_w = self.w - share + r
        a, b = share / new_w, r / new_w
        if self.noisy:  # noise arrived meanwhile: the reply is a clean merge for z
            self.z += b * (sent + d - self.z)
        # mass w x - s q_A + r q_B over weight w - s + r:
        # x + (a - b) (x - q_A) + b d, in place
        step = np.subtract(self.x, sent, out=self.buffer())
        step *= a - b
        self.x += step
        d *= b
        self.x += d
        self.w = new_w

    def fold(self) -> float:
        """Fold the held noise into the trained values; the norm of the training it adds."""
        jump = 0.0
        if self.held_steps is not None:
            jump = math.sqrt(float(np.einsum("i,i->", self.held_steps, self.held_steps)))
            self.x += self.held_steps  # the epoch's training joins the averaged values
            self.held_steps = None
        self.z = self.x  # one array again
        self.noisy = False
        return jump

    def pushed_estimate(self) -> np.ndarray:
        """A copy of the estimate with the training held out of it put back (checkpoints)."""
        if self.held_steps is not None:
            out: np.ndarray = self.x + self.held_steps
            return out
        return self.x.copy()
