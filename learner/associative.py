"""The thesis' associative network (ch. 3 IV.2, V.5): a non-SGD learner over partial models.

A visible layer of ``V`` binary neurons and a hidden layer of ``H`` form a
complete bipartite graph; a neuron fires when the weighted sum of the other
layer's outputs reaches its fixed threshold (Algorithm 4). Learning is Hebbian
(Algorithm 5), keeping weights in ``[-1, 1]``. The parameters are laid out as a
``V=H=V`` MLP (:class:`learner.layout.ModelLayout`, thresholds in the bias
slots), so partial models are declared, owned and moved in and out
(:meth:`AssociativeNetwork.extract` / :meth:`AssociativeNetwork.assign`) as for
the MLP, through the interface :class:`gossip.model_sync.ModelSync` needs.
numpy in float64: the rule needs no gradient.

How it works: docs/design/partial-models.md ("The associative network").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from learner.layout import VECTOR_DTYPE, ModelLayout
from learner.spec import NetworkSpec

__all__ = ["AssociativeNetwork", "AssociativeSettings", "associative_network_spec"]

logger = logging.getLogger(__name__)

#: Bounds of every parameter (weights and thresholds).
PARAMETER_BOUND = 1.0


@dataclass(frozen=True)
class AssociativeSettings:
    """The associative network's hyperparameters (thesis V.5: 0.1 and 0.5)."""

    learning_rate: float = 0.1
    threshold: float = 0.5

    def __post_init__(self) -> None:
        # above 2 an update would overshoot the bound it moves towards
        if not 0.0 < self.learning_rate <= 2.0:
            raise ValueError(f"associative learning_rate {self.learning_rate} is not in (0, 2]")
        if not -PARAMETER_BOUND <= self.threshold <= PARAMETER_BOUND:
            raise ValueError(f"associative threshold {self.threshold} is not in [-1, 1]")


def _product(rows: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """``rows @ weight.T`` without BLAS: these products are tiny, and a multi-threaded
    BLAS on a busy machine spends ten times the work spinning its threads."""
    return np.einsum("nj,ij->ni", rows, weight)


def associative_network_spec(visible: int, hidden: int) -> NetworkSpec:
    """The ``visible=hidden=visible`` network an associative network's layout is cut from."""
    return NetworkSpec((int(visible), int(hidden), int(visible)))


class AssociativeNetwork:
    """An associative (Hebbian, threshold) network whose parameters are split into partial models.

    Args:
        layout: the node's layout over a ``V=H=V`` dense network
            (:func:`associative_network_spec`).
        seed: the node's own seed; it initialises the local weights. Every
            shared model starts from a seed derived from its fingerprint, so all
            holders start from identical values (as :class:`PartialNetwork`).
        settings: learning rate and threshold.

    Weights start uniform in ``[-1, 1]`` (at zero no hidden neuron would ever
    fire and the rule could only push the weights down); thresholds start, and
    stay, at ``settings.threshold``.
    """

    def __init__(self, layout: ModelLayout, seed: int,
                 settings: AssociativeSettings | None = None) -> None:
        if not isinstance(layout, ModelLayout):
            raise TypeError(f"layout: expected ModelLayout, got {type(layout).__name__}")
        network = layout.network
        sizes = network.sizes
        if network.is_convolutional or len(sizes) != 3 or sizes[0] != sizes[2]:
            raise ValueError(f"associative network: layout network {network.notation()} is not "
                             f"visible=hidden=visible (dense, output as wide as the input)")
        self.layout = layout
        self.seed = int(seed)
        self.settings = settings or AssociativeSettings()
        self.flat = np.zeros(layout.total_parameters, dtype=VECTOR_DTYPE)
        hidden_slot, visible_slot = layout.layers
        self.visible_size = sizes[0]
        self.hidden_size = sizes[1]
        # views of ``flat``: writing them writes the parameters
        self.hidden_weight = self.flat[hidden_slot.weight_offset:hidden_slot.bias_offset] \
            .reshape(self.hidden_size, self.visible_size)
        self.hidden_threshold = self.flat[
            hidden_slot.bias_offset:hidden_slot.bias_offset + self.hidden_size]
        self.visible_weight = self.flat[visible_slot.weight_offset:visible_slot.bias_offset] \
            .reshape(self.visible_size, self.hidden_size)
        self.visible_threshold = self.flat[
            visible_slot.bias_offset:visible_slot.bias_offset + self.visible_size]
        self.reset_parameters()

    # ---------------------------------------------------------------- init
    def reset_parameters(self) -> None:
        """Re-initialise: local weights from ``seed``, shared models from their fingerprints."""
        rng = np.random.Generator(np.random.PCG64(self.seed))
        self.hidden_weight[...] = rng.uniform(-1.0, 1.0, size=self.hidden_weight.shape)
        self.visible_weight[...] = rng.uniform(-1.0, 1.0, size=self.visible_weight.shape)
        self.hidden_threshold[...] = self.settings.threshold
        self.visible_threshold[...] = self.settings.threshold
        for name in self.layout.shared_models:
            self.assign(name, self.initial_values(name))

    def initial_values(self, name: str, seed: int | None = None) -> np.ndarray:
        """Shared model ``name``'s initial canonical vector.

        By default drawn from the model's fingerprint seed, the same on every
        holder; with ``seed``, drawn from that seed instead (holders starting
        apart, as peers that initialise their whole network themselves).
        """
        n = self.layout.vector_length(name)
        start = self.layout.init_seed(name) if seed is None else int(seed)
        rng = np.random.Generator(np.random.PCG64(start))
        values = rng.uniform(-1.0, 1.0, size=n)
        for block in self.layout.blocks(name):
            if block.bias:
                values[block.vector_offset:block.vector_offset + block.size] = \
                    self.settings.threshold
        return values

    # -------------------------------------------------------- computation
    def _binary(self, x: np.ndarray, width: int, what: str) -> np.ndarray:
        rows = np.asarray(x)
        if rows.ndim == 1:
            rows = rows[None, :]
        if rows.ndim != 2 or rows.shape[1] != width:
            raise ValueError(f"associative network {what}: shape {np.shape(x)}, expected "
                             f"(n, {width}) or ({width},)")
        if not np.all((rows == 0) | (rows == 1)):
            raise ValueError(f"associative network {what}: values must be 0 or 1")
        return rows.astype(VECTOR_DTYPE)

    def hidden(self, visible: np.ndarray) -> np.ndarray:
        """Hidden outputs (0/1) for visible outputs ``visible`` (rows of 0/1)."""
        v = self._binary(visible, self.visible_size, "visible input")
        return (_product(v, self.hidden_weight) >= self.hidden_threshold).astype(VECTOR_DTYPE)

    def complete(self, visible: np.ndarray) -> np.ndarray:
        """Algorithm 4: the visible outputs (0/1) the network returns for input rows ``visible``."""
        h = self.hidden(visible)
        return (_product(h, self.visible_weight) >= self.visible_threshold).astype(VECTOR_DTYPE)

    def learn(self, vectors: np.ndarray) -> None:
        """Algorithm 5 on each complete vector of ``vectors`` in turn (a mini-batch)."""
        rows = self._binary(vectors, self.visible_size, "training vector")
        rate = self.settings.learning_rate
        for v in rows:
            h = self.hidden(v)[0]
            on_v = v == 1
            on_h = h == 1
            # hidden weights from active visible neurons: up if the hidden neuron fired
            w = self.hidden_weight[:, on_v]
            self.hidden_weight[:, on_v] = np.where(
                on_h[:, None], w + (1.0 - w) / 2.0 * rate, w - (1.0 + w) / 2.0 * rate)
            # visible weights from active hidden neurons: up if the visible neuron is on
            w = self.visible_weight[:, on_h]
            self.visible_weight[:, on_h] = np.where(
                on_v[:, None], w + (1.0 - w) / 2.0 * rate, w - (1.0 + w) / 2.0 * rate)
        # the rule stays in [-1, 1] in exact arithmetic; rounding must not leave it
        np.clip(self.flat, -PARAMETER_BOUND, PARAMETER_BOUND, out=self.flat)

    # ------------------------------------------------------- extract / assign
    def _index(self, name: str) -> np.ndarray:
        if name not in self.layout.shared_models:
            held = ", ".join(self.layout.shared_models) or "none"
            raise KeyError(f"partial model {name!r} is not a shared model of this network; "
                           f"shared models: {held}")
        return self.layout.owned_indices(name)

    def extract(self, name: str, out: np.ndarray | None = None) -> np.ndarray:
        """Canonical vector of shared model ``name``: a float64 copy (or written into ``out``)."""
        index = self._index(name)
        if out is None:
            return self.flat[index]
        if out.dtype != VECTOR_DTYPE or out.shape != index.shape:
            raise ValueError(f"extract({name!r}): out must be float64 of shape {index.shape}, "
                             f"got {out.dtype} {out.shape}")
        np.take(self.flat, index, out=out)
        return out

    def assign(self, name: str, vector: np.ndarray) -> None:
        """Write the canonical vector of shared model ``name`` into the parameters.

        Values are clipped to ``[-1, 1]`` (an average of in-range values only
        leaves it by rounding). Raises ValueError (naming the model) on a wrong
        shape or dtype or a non-finite value; the parameters are then untouched.
        """
        index = self._index(name)
        vec = np.asarray(vector)
        if vec.ndim != 1 or vec.shape != index.shape:
            raise ValueError(f"assign({name!r}): vector has shape {vec.shape}, expected "
                             f"{index.shape} for partial model {name!r}")
        if vec.dtype.kind not in "fiu":
            raise ValueError(f"assign({name!r}): vector dtype {vec.dtype} is not numeric")
        finite = np.isfinite(vec)
        if not finite.all():
            bad = int(np.flatnonzero(~finite)[0])
            raise ValueError(f"assign({name!r}): value at index {bad} ({vec[bad]}) is not "
                             f"finite; partial model {name!r} left unchanged")
        self.flat[index] = np.clip(vec, -PARAMETER_BOUND, PARAMETER_BOUND)

    def __repr__(self) -> str:
        return (f"AssociativeNetwork(network={self.layout.network.notation()}, "
                f"shared={list(self.layout.shared_models)}, seed={self.seed}, "
                f"settings={self.settings})")
