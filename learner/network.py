"""A torch network (MLP or CNN) built from a :class:`~learner.layout.ModelLayout`.

All parameters live in one flat tensor (``PartialNetwork.flat``); the layer
weights and biases (dense or convolution) are views of it taken in
``forward``. So moving a partial model in or out is one gather (``extract``)
or one scatter (``assign``) through the layout's precomputed index array:
O(size), no per-parameter Python loop.

Canonical vectors are float64 numpy arrays (the gossip layer averages in
float64); parameters are stored as float32.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from learner.layout import VECTOR_DTYPE, Block, ModelLayout
from learner.spec import LOCAL_MODEL

__all__ = ["PartialMLP", "PartialNetwork", "assign", "extract"]

logger = logging.getLogger(__name__)

_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
}


_F32_MAX = float(np.finfo(np.float32).max)


def checked_vector(name: str, vector: np.ndarray, n: int) -> np.ndarray:
    """``vector`` as an array, checked before it is assigned to shared model ``name``
    of ``n`` values: ValueError (naming the model) on a wrong shape or dtype or a
    value that is not a finite float32."""
    vec = np.asarray(vector)
    if vec.ndim != 1 or vec.shape[0] != n:
        raise ValueError(f"assign({name!r}): vector has shape {vec.shape}, expected "
                         f"({n},) for partial model {name!r}")
    if vec.dtype.kind not in "fiu":
        raise ValueError(f"assign({name!r}): vector dtype {vec.dtype} is not numeric")
    if n:
        # min and max propagate NaN and need no temporary array
        lo, hi = vec.min(), vec.max()
        if not (-_F32_MAX <= lo and hi <= _F32_MAX):
            with np.errstate(over="ignore", invalid="ignore"):
                bad = int(np.flatnonzero(~np.isfinite(vec.astype(np.float32)))[0])
            raise ValueError(f"assign({name!r}): value at index {bad} ({vec[bad]}) is not "
                             f"a finite float32; partial model {name!r} left unchanged")
    return vec


@dataclass(frozen=True)
class _Copy:
    """One block of a canonical vector, ready for a strided numpy copy."""

    vec: slice  # where the block sits in the canonical vector
    layer: int  # 0-based index into the layer list
    bias: bool
    rows: slice
    cols: slice
    shape: tuple[int, ...]

    @classmethod
    def of(cls, b: Block) -> _Copy:
        # weights are viewed as (out, in * unit): a block is then a plain rectangle
        rows = slice(b.row_start, b.row_start + b.rows)
        cols = slice(b.col_start * b.unit, (b.col_start + b.cols) * b.unit)
        shape = (b.rows,) if b.bias else (b.rows, b.cols * b.unit)
        return cls(slice(b.vector_offset, b.vector_offset + b.size), b.layer - 1, b.bias,
                   rows, cols, shape)

    def view(self, arrays: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        weight, bias = arrays[self.layer]
        return bias[self.rows] if self.bias else weight[self.rows, self.cols]


class PartialNetwork(nn.Module):
    """A multi-layer perceptron or convolutional network whose parameters are
    split into partial models.

    Args:
        layout: the node's layout (network + partial models + ownership).
        seed: the node's own seed; it initialises the local parameters. Every
            shared model is initialised from a seed derived from its
            fingerprint, so all holders start from identical values.

    Initialisation is uniform in ``±1/sqrt(fan_in)`` (torch's ``nn.Linear``
    default; ``fan_in`` is input channels x kernel area for a convolution). For
    shared models ``fan_in`` counts only the previous-layer neurons of the model
    and its dependencies, which all holders agree on.

    Inputs are flat rows of ``network.input_features`` values; a network on
    images reads each row as ``C x H x W`` (channel-major, as numpy reshapes).
    """

    def __init__(self, layout: ModelLayout, seed: int) -> None:
        super().__init__()
        if not isinstance(layout, ModelLayout):
            raise TypeError(f"layout: expected ModelLayout, got {type(layout).__name__}")
        self.layout = layout
        self.seed = int(seed)
        self._act = _ACTIVATIONS[layout.network.activation]
        self.flat = nn.Parameter(torch.empty(layout.total_parameters, dtype=torch.float32))
        # int64 index tensors (for torch-side use); extract/assign use the blocks
        self._index: dict[str, torch.Tensor] = {
            name: torch.from_numpy(np.array(layout.owned_indices(name), dtype=np.int64))
            for name in (*layout.shared_models, LOCAL_MODEL)
        }
        self._plan: dict[str, tuple[_Copy, ...]] = {
            name: tuple(_Copy.of(b) for b in layout.blocks(name)) for name in layout.shared_models
        }
        # the flat layout is weight 1, bias 1, weight 2, ...: one split gives every view
        self._pieces = [n for s in layout.layers for n in (s.weight_size, s.out_features)]
        self.reset_parameters()

    # ---------------------------------------------------------------- init
    def reset_parameters(self) -> None:
        """Re-initialise: local parts from ``seed``, shared models from their fingerprints."""
        gen = torch.Generator().manual_seed(self.seed)
        with torch.no_grad():
            for slot in self.layout.layers:
                bound = 1.0 / float(np.sqrt(slot.in_features * slot.unit))
                part = self.flat[slot.weight_offset:slot.bias_offset + slot.out_features]
                part.uniform_(-bound, bound, generator=gen)
        for name in self.layout.shared_models:
            self.assign(name, self.initial_values(name))

    def relayout(self, layout: ModelLayout) -> None:
        """Cut the same network into other partial models, keeping every parameter.

        The flat parameter vector does not depend on how the network is cut,
        so only the ownership changes (a semi-local model added while the node
        runs: issue 16). ``layout`` must describe the same network; each
        model's values stay where they are.
        """
        if not isinstance(layout, ModelLayout):
            raise TypeError(f"layout: expected ModelLayout, got {type(layout).__name__}")
        if (layout.network != self.layout.network
                or layout.total_parameters != self.layout.total_parameters):
            raise ValueError(f"relayout: layout of {layout.network} does not describe this "
                             f"network ({self.layout.network})")
        self.layout = layout
        self._index = {
            name: torch.from_numpy(np.array(layout.owned_indices(name), dtype=np.int64))
            for name in (*layout.shared_models, LOCAL_MODEL)
        }
        self._plan = {
            name: tuple(_Copy.of(b) for b in layout.blocks(name)) for name in layout.shared_models
        }

    def initial_values(self, name: str) -> np.ndarray:
        """Shared model ``name``'s initial canonical vector (the same on every holder)."""
        rng = np.random.Generator(np.random.PCG64(self.layout.init_seed(name)))
        bounds = self.layout.init_bounds(name)
        return np.asarray(rng.uniform(-1.0, 1.0, size=bounds.size) * bounds)

    # ---------------------------------------------------------------- views
    def weight(self, layer: int) -> torch.Tensor:
        """Weight of ``layer`` (1..k), a view of ``flat``: shape ``(out, in)`` for a dense
        layer (``in`` = channels x feature-map area after a convolution) or ``(out, in,
        k, k)`` for a convolution."""
        s = self.layout.layers[layer - 1]
        return self._shaped(layer, self.flat[s.weight_offset:s.bias_offset])

    def _shaped(self, layer: int, values: torch.Tensor) -> torch.Tensor:
        s = self.layout.layers[layer - 1]
        conv = self.layout.network.conv(layer)
        if conv is not None:
            return values.view(s.out_features, s.in_features, conv.kernel, conv.kernel)
        return values.view(s.out_features, s.in_features * s.unit)

    def bias(self, layer: int) -> torch.Tensor:
        """Bias of ``layer`` (1..k): a view of ``flat``."""
        s = self.layout.layers[layer - 1]
        return self.flat[s.bias_offset:s.bias_offset + s.out_features]

    def owned_index_tensor(self, name: str) -> torch.Tensor:
        """int64 tensor of flat indices owned by ``name`` (shared model or ``"local"``).

        Shared models: canonical-vector order. Do not modify it.
        """
        if name not in self._index:
            self.layout.owned_indices(name)  # raises KeyError naming the model
        return self._index[name]

    def flat_parameters(self) -> torch.Tensor:
        """The single flat parameter tensor (what the optimizer trains)."""
        return self.flat

    # -------------------------------------------------------------- forward
    def activations(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Outputs of every layer after the input: hidden activations (feature maps
        ``(n, channels, h, w)`` after a convolution and its pooling), then logits."""
        network = self.layout.network
        n_in = network.input_features
        if x.shape[-1] != n_in:
            raise ValueError(f"{type(self).__name__} input: last dimension is {x.shape[-1]}, "
                             f"expected {n_in} (network {network.notation()})")
        outs: list[torch.Tensor] = []
        h = x
        image = network.input_image
        if image is not None:
            h = x.reshape(-1, *image)
        last = len(self.layout.layers)
        # one split rather than a slice per tensor: backward then assembles the flat
        # gradient once instead of adding a full-size zero-padded tensor per slice
        pieces = self.flat.split(self._pieces)
        for slot in self.layout.layers:
            conv = network.conv(slot.index)
            weight = self._shaped(slot.index, pieces[2 * slot.index - 2])
            bias = pieces[2 * slot.index - 1]
            if conv is not None:
                h = F.conv2d(h, weight, bias, stride=conv.stride, padding=conv.padding)
            else:
                h = F.linear(h.flatten(1) if h.dim() > 2 else h, weight, bias)
            if slot.index != last:
                h = self._act(h)
            if conv is not None and conv.pool > 1:
                h = F.max_pool2d(h, conv.pool)
            outs.append(h)
        return outs

    @property
    def input_image(self) -> tuple[int, int, int] | None:
        """``(channels, height, width)`` of an image input; None for a flat one."""
        return self.layout.network.input_image

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (no activation on the output layer)."""
        return self.activations(x)[-1]

    # ------------------------------------------------------- extract / assign
    def _steps(self, name: str) -> tuple[_Copy, ...]:
        plan = self._plan.get(name)
        if plan is None:
            held = ", ".join(self.layout.shared_models) or "none"
            raise KeyError(f"partial model {name!r} is not a shared model of this network; "
                           f"shared models: {held}")
        return plan

    def _device_index(self, name: str) -> torch.Tensor:
        """The model's flat indices on the parameters' device (kept there once moved)."""
        index = self._index[name]
        if index.device != self.flat.device:
            index = self._index[name] = index.to(self.flat.device)
        return index

    def _layer_arrays(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """numpy views (no copy) of every layer's weight and bias."""
        values = self.flat.detach().numpy()
        return [
            (values[s.weight_offset:s.bias_offset].reshape(s.out_features, s.in_features * s.unit),
             values[s.bias_offset:s.bias_offset + s.out_features])
            for s in self.layout.layers
        ]

    def extract(self, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """Canonical vector of shared model ``name``: a float64 copy.

        With ``out`` (float64, right length) the values are written there and
        nothing is allocated.
        """
        steps = self._steps(name)
        n = self.layout.vector_length(name)
        if out is None:
            out = np.empty(n, dtype=VECTOR_DTYPE)
        elif out.dtype != VECTOR_DTYPE or out.shape != (n,):
            raise ValueError(f"extract({name!r}): out must be float64 of shape ({n},), got "
                             f"{out.dtype} {out.shape}")
        if self.flat.device.type != "cpu":  # gathered on the device, one copy to the host
            index = self._device_index(name)
            np.copyto(out, self.flat.detach()[index].to(torch.float64).cpu().numpy())
            return out
        arrays = self._layer_arrays()
        for step in steps:  # one strided copy per block, widening float32 -> float64
            np.copyto(out[step.vec].reshape(step.shape), step.view(arrays))
        return out

    def assign(self, name: str, vector: np.ndarray) -> None:
        """Write the canonical vector of shared model ``name`` into the parameters.

        Raises ValueError (naming the model) on a wrong shape or dtype, or a
        value that is not a finite float32; the parameters are then untouched.
        """
        steps = self._steps(name)
        vec = checked_vector(name, vector, self.layout.vector_length(name))
        if self.flat.device.type != "cpu":  # one copy to the device, scattered there
            source = torch.from_numpy(np.ascontiguousarray(vec, dtype=np.float32))
            with torch.no_grad():
                self.flat[self._device_index(name)] = source.to(self.flat.device)
            return
        arrays = self._layer_arrays()
        for step in steps:
            np.copyto(step.view(arrays), vec[step.vec].reshape(step.shape), casting="same_kind")
        # numpy wrote behind autograd's back: mark the parameter as modified so a
        # stale graph cannot silently backpropagate through old values
        torch.autograd.graph.increment_version(self.flat)

    def extra_repr(self) -> str:
        return (f"network={self.layout.network}, shared={list(self.layout.shared_models)}, "
                f"seed={self.seed}")


#: The name this class had before it built convolutional networks too.
PartialMLP = PartialNetwork


def extract(model: PartialNetwork, name: str) -> np.ndarray:
    """Canonical float64 vector of shared model ``name`` of ``model``."""
    return model.extract(name)


def assign(model: PartialNetwork, name: str, vector: np.ndarray) -> None:
    """Write ``vector`` as shared model ``name`` of ``model``."""
    model.assign(name, vector)
