"""Where each partial model lives in a node's network, and who owns each parameter.

:class:`ModelLayout` is pure numpy (no torch): it validates a node's network and
the partial models it implements, assigns neurons to models, applies the
ownership rule (DESIGN 3.3, thesis ch. 3 II.4 ``R(pi)``) and precomputes, for
every shared model, the index array mapping its canonical vector onto the
node's flat parameter vector. The flat layout is torch's own memory order, per
layer the weights ``(sizes[l], sizes[l-1], unit)`` then the biases, with
``unit`` from :meth:`NetworkSpec.weights_per_pair` (1 between dense layers, the
kernel area for a convolution).

How it works: docs/design/partial-models.md ("Neurons", "Who owns a parameter").
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from learner.fingerprint import ModelDescription, fingerprint_of, init_seed_of
from learner.model_graph import ModelGraph
from learner.module_spec import ModuleModelSpec
from learner.spec import LOCAL_MODEL, NetworkSpec, PartialModelSpec, SpecError

__all__ = ["Block", "CROSS_SEPARATOR", "LayerSlot", "ModelLayout", "VECTOR_DTYPE"]

logger = logging.getLogger(__name__)

#: dtype of canonical vectors (what extract returns and gossip averages).
VECTOR_DTYPE = np.dtype(np.float64)

#: Joins the two model names of a synthetic cross model, e.g. ``"A+B"``.
CROSS_SEPARATOR = "+"


@dataclass(frozen=True)
class LayerSlot:
    """Where layer ``index`` (1..k) keeps its parameters in the flat vector.

    ``in_features`` and ``out_features`` count neurons (channels for a
    convolution); ``unit`` is the number of weights per (target, source) pair.
    """

    index: int
    in_features: int
    out_features: int
    weight_offset: int
    bias_offset: int
    unit: int = 1

    @property
    def weight_size(self) -> int:
        return self.in_features * self.out_features * self.unit


@dataclass(frozen=True)
class Block:
    """A rectangle of one layer's parameters, stored contiguously in a canonical vector.

    Weights: rows ``row_start:row_start+rows`` (target neurons) and columns
    ``col_start:col_start+cols`` (source neurons) of the layer's weights, each
    (row, column) pair holding ``unit`` consecutive values (kernel or feature
    map; 1 for dense layers). Bias (``bias=True``): entries
    ``row_start:row_start+rows`` (``cols == 1``, ``unit == 1``). Models hold
    contiguous neurons, so a model's vector is a few such blocks.
    """

    vector_offset: int
    layer: int
    bias: bool
    row_start: int
    rows: int
    col_start: int
    cols: int
    unit: int = 1

    @property
    def size(self) -> int:
        return self.rows * self.cols * self.unit


def _units(network: NetworkSpec, layer: int) -> str:
    """What layer ``layer`` counts: channels (image input, convolutions) or neurons."""
    if network.is_convolutional and layer <= len(network.convs):
        return "channels"
    return "neurons"


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


class ModelLayout:
    """A node's network cut into partial models, with parameter ownership.

    Args:
        network: the node's network.
        models: declarations of partial models. By default the node implements
            all of them; with ``implements`` they are a catalogue (e.g. every
            model of the swarm) and the node implements the named subset.
        cross_models: enable the cross-model extension (thesis Algorithm 3):
            weights between two models with no dependency relation become a
            synthetic shared model ``"A+B"`` instead of staying local.
        implements: names of the models this node implements (optional).

    Raises:
        SpecError: on any inconsistency (unknown or missing dependency, cycle,
            counts not matching the network, models overfilling a layer, ...).

    Models take neurons at the start of each layer in dependency order
    (dependencies first, otherwise declaration order); the remaining neurons
    form the node's local model.
    """

    def __init__(
        self,
        network: NetworkSpec,
        models: Sequence[object],
        *,
        cross_models: bool = False,
        implements: Sequence[str] | None = None,
    ) -> None:
        if not isinstance(network, NetworkSpec):
            raise SpecError(f"network: expected a NetworkSpec, got {type(network).__name__}")
        if isinstance(models, PartialModelSpec):
            models = [models]
        for i, m in enumerate(models):
            if isinstance(m, ModuleModelSpec):
                raise SpecError(f"partial model {m.name!r} is declared by parameter names or "
                                "units, which split a network.factory module; a notation "
                                'network\'s models give neurons (e.g. "64-40-24-10")',
                                field="counts", model=m.name, index=i)
        self._network = network
        self._cross_enabled = bool(cross_models)
        # anything else is refused by the graph, naming what it got
        graph: ModelGraph[PartialModelSpec] = ModelGraph(cast(list[PartialModelSpec],
                                                              list(models)))
        self._graph = graph
        impl = self._check_implements(graph, implements)
        self._check_counts(network, graph, impl)

        decl_rank = {n: i for i, n in enumerate(graph.names)}
        order = graph.topological(impl, tie=decl_rank)
        self._declared: tuple[str, ...] = tuple(order)
        self._assign_neurons(order)
        self._build_ownership(order)
        self._build_shared()
        logger.debug("layout %s: %s", network.notation(), ", ".join(self.shared_models) or "-")

    # ------------------------------------------------------------- validation
    @staticmethod
    def _check_implements(graph: ModelGraph, implements: Sequence[str] | None) -> list[str]:
        if implements is None:
            impl = list(graph.names)
        else:
            if isinstance(implements, str):
                raise SpecError(f"implements must be a list of model names, not the string "
                                f"{implements!r}")
            impl = []
            for n in implements:
                if n == LOCAL_MODEL:
                    raise SpecError(f"implements: {LOCAL_MODEL!r} is implicit; list only "
                                    "declared models")
                if n not in graph:
                    known = ", ".join(graph.names) or "none"
                    raise SpecError(f"implements: unknown partial model {n!r} (declared "
                                    f"models: {known})")
                if n in impl:
                    raise SpecError(f"implements: partial model {n!r} listed twice")
                impl.append(n)
        chosen = set(impl)
        for n in impl:
            missing = sorted(d for d in graph.closure(n) if d not in chosen)
            if missing:
                raise SpecError(f"node implements partial model {n!r} but not its "
                                f"dependenc{'y' if len(missing) == 1 else 'ies'} "
                                f"{', '.join(repr(d) for d in missing)}; a node must implement "
                                "every dependency of each model it implements")
        return impl

    @staticmethod
    def _check_counts(network: NetworkSpec, graph: ModelGraph, impl: Sequence[str]) -> None:
        sizes = network.sizes
        for n in impl:
            counts = graph[n].counts
            if len(counts) != len(sizes):
                what = ("one count per layer" if not network.is_convolutional else
                        "one count per part: input channels, each convolution's channels, "
                        "then each dense layer's neurons")
                raise SpecError(f"partial model {n!r} has {len(counts)} counts "
                                f"({graph[n].notation()}) but network {network.notation()} has "
                                f"{len(sizes)} layers; expected {what}",
                                field="counts", model=n)
            for layer, (c, s) in enumerate(zip(counts, sizes, strict=True)):
                if c > s:
                    raise SpecError(f"partial model {n!r} wants {c} {_units(network, layer)} in "
                                    f"layer {layer} "
                                    f"but network {network.notation()} has only {s} there; "
                                    f"expected <= {s}", field="counts", model=n)
            if sum(counts[1:]) == 0:
                # weights belong to the model of the neuron they feed: input neurons own none
                raise SpecError(f"partial model {n!r} ({graph[n].notation()}) owns no parameters "
                                "(only input neurons); expected at least one non-input neuron",
                                field="counts", model=n)
        for layer, s in enumerate(sizes):
            total = sum(graph[n].counts[layer] for n in impl)
            if total > s:
                parts = ", ".join(f"{n}={graph[n].counts[layer]}" for n in impl
                                  if graph[n].counts[layer])
                raise SpecError(f"layer {layer}: the partial models together want {total} "
                                f"{_units(network, layer)} ({parts}) but network {network.notation()} has only "
                                f"{s} there; expected the models' counts per layer to sum to "
                                f"<= {s}")

    # --------------------------------------------------------------- building
    def _assign_neurons(self, order: Sequence[str]) -> None:
        sizes = self._network.sizes
        start = [0] * len(sizes)
        pos: dict[str, tuple[np.ndarray, ...]] = {}
        for n in order:
            counts = self._graph[n].counts
            arrays = []
            for layer, c in enumerate(counts):
                arrays.append(_readonly(np.arange(start[layer], start[layer] + c, dtype=np.int64)))
                start[layer] += c
            pos[n] = tuple(arrays)
        pos[LOCAL_MODEL] = tuple(
            _readonly(np.arange(start[layer], s, dtype=np.int64)) for layer, s in enumerate(sizes)
        )
        self._positions = pos

    def _build_ownership(self, order: Sequence[str]) -> None:
        graph = self._graph
        sizes = self._network.sizes
        names = list(order) + [LOCAL_MODEL]
        local_id = len(order)
        # owner id of a weight between a neuron of model i and one of model j
        table = np.full((len(names), len(names)), local_id, dtype=np.int64)
        cross_names: list[str] = []
        for i, a in enumerate(order):
            for j, b in enumerate(order):
                if a == b or graph.depends(a, b):
                    table[i, j] = table[j, i] = i
                elif j > i and not graph.comparable(a, b) and self._cross_enabled:
                    cid = len(names) + len(cross_names)
                    cross_names.append(CROSS_SEPARATOR.join(sorted((a, b))))
                    table[i, j] = table[j, i] = cid
        all_names = names + cross_names
        self._table = table
        self._ids = {n: i for i, n in enumerate(all_names)}
        self._all_names = all_names

        # model id of every neuron, per layer
        neuron_model = []
        for layer, s in enumerate(sizes):
            ids = np.empty(s, dtype=np.int64)
            for n in names:
                ids[self._positions[n][layer]] = self._ids[n]
            neuron_model.append(ids)

        slots: list[LayerSlot] = []
        owner_parts: list[np.ndarray] = []
        offset = 0
        for layer in range(1, len(sizes)):
            fan_in, fan_out = sizes[layer - 1], sizes[layer]
            unit = self._network.weights_per_pair(layer)
            slot = LayerSlot(layer, fan_in, fan_out, offset, offset + fan_in * fan_out * unit,
                             unit)
            slots.append(slot)
            offset = slot.bias_offset + fan_out
            w_owner = table[neuron_model[layer][:, None], neuron_model[layer - 1][None, :]]
            # every weight of a (target, source) pair's kernel or feature map shares its owner
            owner_parts.append(np.repeat(w_owner.ravel(), unit))
            owner_parts.append(neuron_model[layer])  # a bias belongs to its neuron's model
        self._slots = tuple(slots)
        self._total = offset
        self._owner = _readonly(np.concatenate(owner_parts))
        counts = np.bincount(self._owner, minlength=len(all_names))
        # a cross model with no weight (its models never touch) is not a model
        self._cross = tuple(sorted(c for c in cross_names if counts[self._ids[c]] > 0))
        self._owned_counts = {n: int(counts[self._ids[n]]) for n in all_names}

    def _involved(self, name: str) -> list[str]:
        """Models whose neurons a shared model's vector can touch, in canonical order."""
        if name in self._cross:
            return self._graph.canonical_order(name.split(CROSS_SEPARATOR))
        return self._graph.canonical_order(self._graph.closure(name) | {name})

    def _build_shared(self) -> None:
        self._blocks: dict[str, tuple[Block, ...]] = {}
        self._index: dict[str, np.ndarray] = {}
        self._bounds: dict[str, np.ndarray] = {}
        self._fingerprint: dict[str, bytes] = {}
        self._description: dict[str, ModelDescription] = {}
        for name in self.shared_models:
            mid = self._ids[name]
            involved = self._involved(name)
            is_cross = name in self._cross
            blocks: list[Block] = []
            idx_parts: list[np.ndarray] = []
            bound_parts: list[np.ndarray] = []
            offset = 0
            for slot in self._slots:
                # canonical fan-in: node-independent, so holders initialise identically
                fan_in = sum(self._graph[m].counts[slot.index - 1] for m in involved) * slot.unit
                bound = 1.0 / np.sqrt(max(1, fan_in))
                layer_start = offset
                # weights: one rectangle per (target model, source model) pair it owns,
                # pairs in canonical order, each rectangle row-major
                for tgt in involved:
                    rows = self._positions[tgt][slot.index]
                    for src in involved:
                        cols = self._positions[src][slot.index - 1]
                        if rows.size == 0 or cols.size == 0:
                            continue
                        if self._table[self._ids[tgt], self._ids[src]] != mid:
                            continue
                        blk = Block(offset, slot.index, False, int(rows[0]), int(rows.size),
                                    int(cols[0]), int(cols.size), slot.unit)
                        blocks.append(blk)
                        pair = rows[:, None] * slot.in_features + cols[None, :]
                        idx_parts.append((slot.weight_offset + pair[:, :, None] * slot.unit
                                          + np.arange(slot.unit)).ravel())
                        offset += blk.size
                if not is_cross and self._positions[name][slot.index].size:
                    rows = self._positions[name][slot.index]
                    blk = Block(offset, slot.index, True, int(rows[0]), int(rows.size), 0, 1)
                    blocks.append(blk)
                    idx_parts.append(slot.bias_offset + rows)
                    offset += blk.size
                bound_parts.append(np.full(offset - layer_start, bound))
            index = (np.concatenate(idx_parts) if idx_parts
                     else np.empty(0, dtype=np.int64)).astype(np.int64)
            # the blocks must cover exactly what the ownership table gives the model
            if index.size != self._owned_counts[name] or not np.all(self._owner[index] == mid):
                raise AssertionError(f"internal error: blocks of {name!r} disagree with ownership")
            self._blocks[name] = tuple(blocks)
            self._index[name] = _readonly(index)
            self._bounds[name] = _readonly(np.concatenate(bound_parts))
            desc = ModelDescription(
                name=name,
                cross=is_cross,
                num_layers=self._network.num_layers,
                activation=self._network.activation,
                involved=tuple(self._graph[m] for m in involved),
                vector_length=int(index.size),
                dtype=VECTOR_DTYPE.name,
                structure=self._network.structure(),
            )
            self._description[name] = desc
            self._fingerprint[name] = fingerprint_of(desc)
        self._index[LOCAL_MODEL] = _readonly(
            np.flatnonzero(self._owner == self._ids[LOCAL_MODEL]).astype(np.int64)
        )

    # ------------------------------------------------------------------ access
    def _require(self, name: str, *, allow_local: bool) -> None:
        if name == LOCAL_MODEL and allow_local:
            return
        if name not in self._fingerprint:
            held = ", ".join(self.shared_models) or "none"
            extra = f" (or {LOCAL_MODEL!r})" if allow_local else ""
            raise KeyError(f"partial model {name!r} is not a shared model of this node; "
                           f"shared models: {held}{extra}")

    @property
    def network(self) -> NetworkSpec:
        """The node's network."""
        return self._network

    @property
    def cross_models_enabled(self) -> bool:
        """Whether the cross-model extension is on."""
        return self._cross_enabled

    @property
    def declared_models(self) -> tuple[str, ...]:
        """Implemented declared models, dependencies first (neuron assignment order)."""
        return self._declared

    @property
    def cross_models(self) -> tuple[str, ...]:
        """Synthetic cross models (``"A+B"``) that own at least one weight, sorted."""
        return self._cross

    @property
    def shared_models(self) -> tuple[str, ...]:
        """Every model averaged with peers: declared models then synthetic cross models."""
        return self._declared + self._cross

    @property
    def layers(self) -> tuple[LayerSlot, ...]:
        """Per-layer offsets into the flat parameter vector."""
        return self._slots

    @property
    def total_parameters(self) -> int:
        """Number of parameters of the whole network."""
        return self._total

    def spec(self, name: str) -> PartialModelSpec:
        """Declaration of an implemented declared model."""
        if name not in self._declared:
            raise KeyError(f"partial model {name!r} is not declared on this node; declared: "
                           f"{', '.join(self._declared) or 'none'}")
        return self._graph[name]

    def dependencies(self, name: str) -> frozenset[str]:
        """Transitive dependencies of a declared model (all declared models for local)."""
        if name == LOCAL_MODEL:
            return frozenset(self._declared)
        self.spec(name)
        return self._graph.closure(name)

    def involved_models(self, name: str) -> tuple[str, ...]:
        """Declared models whose neurons a shared model's vector touches, canonical order."""
        self._require(name, allow_local=False)
        return tuple(self._involved(name))

    def neurons(self, name: str) -> tuple[np.ndarray, ...]:
        """Per layer, the positions of the model's neurons in this network (fresh copies).

        For a cross model, the neurons of both its models (canonical order).
        """
        if name in self._positions:
            return tuple(p.copy() for p in self._positions[name])
        self._require(name, allow_local=False)
        involved = self._involved(name)
        return tuple(
            np.concatenate([self._positions[m][layer] for m in involved])
            for layer in range(self._network.num_layers)
        )

    def fingerprint(self, name: str) -> bytes:
        """32-byte sha256 identifying a shared model's canonical vector."""
        self._require(name, allow_local=False)
        return self._fingerprint[name]

    def canonical_description(self, name: str) -> bytes:
        """The exact bytes the fingerprint hashes (canonical JSON)."""
        self._require(name, allow_local=False)
        return self._description[name].to_bytes()

    def init_seed(self, name: str) -> int:
        """Seed from which every holder initialises a shared model identically."""
        return init_seed_of(self.fingerprint(name))

    def init_bounds(self, name: str) -> np.ndarray:
        """Per canonical entry, the half-width of its uniform initialisation."""
        self._require(name, allow_local=False)
        return self._bounds[name]

    def vector_length(self, name: str) -> int:
        """Length of a shared model's canonical vector."""
        self._require(name, allow_local=False)
        return int(self._index[name].size)

    def owned_indices(self, name: str) -> np.ndarray:
        """Flat-parameter indices of the model's parameters (read-only).

        For a shared model, in canonical-vector order; for ``"local"``, ascending.
        The array is shared and read-only (index torch tensors with
        ``PartialNetwork.owned_index_tensor`` or a copy).
        """
        self._require(name, allow_local=True)
        return self._index[name]

    def blocks(self, name: str) -> tuple[Block, ...]:
        """The rectangles making up a shared model's canonical vector, in order."""
        self._require(name, allow_local=False)
        return self._blocks[name]

    def owned_parameter_count(self, name: str) -> int:
        """How many parameters the model owns on this node (``"local"`` accepted)."""
        self._require(name, allow_local=True)
        return self._owned_counts[name]

    def owner_of_parameters(self) -> tuple[np.ndarray, tuple[str, ...]]:
        """Per flat parameter, an index into the returned tuple of model names."""
        return self._owner, tuple(self._all_names)

    def model_kind(self, name: str) -> str:
        """``"global"``, ``"semi-local"`` or ``"local"``.

        An explicit ``kind`` on the declaration wins. Otherwise a model without
        dependencies that holds the whole input and output layers is global; any
        other declared or cross model is semi-local.
        """
        if name == LOCAL_MODEL:
            return "local"
        self._require(name, allow_local=False)
        if name in self._cross:
            return "semi-local"
        spec = self._graph[name]
        if spec.kind is not None:
            return spec.kind
        sizes = self._network.sizes
        if (not spec.depends_on and spec.counts[0] == sizes[0]
                and spec.counts[-1] == sizes[-1]):
            return "global"
        return "semi-local"

    def describe(self, name: str) -> str:
        """One-line human summary of a model on this node."""
        n = self.owned_parameter_count(name)
        if name == LOCAL_MODEL:
            counts = "-".join(str(p.size) for p in self._positions[LOCAL_MODEL])
            return f"{LOCAL_MODEL} (local): neurons {counts}, {n} parameters, not shared"
        kind = self.model_kind(name)
        fp = self._fingerprint[name].hex()[:16]
        if name in self._cross:
            return (f"{name} (cross model, {kind}): weights between "
                    f"{' and '.join(self._involved(name))}, {n} parameters, fingerprint {fp}")
        spec = self._graph[name]
        deps = ", ".join(sorted(self._graph.closure(name))) or "none"
        return (f"{name} ({kind}): neurons {spec.notation()}, depends on {deps}, "
                f"{n} parameters, fingerprint {fp}")

    def __repr__(self) -> str:
        return (f"ModelLayout({self._network}, shared={list(self.shared_models)}, "
                f"parameters={self._total})")
