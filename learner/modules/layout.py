"""Who owns each tensor of a user's module, and the canonical vector of every shared model.

Pure numpy (no torch): the module is described by its :class:`Inventory` (dotted
names, shapes and dtypes of its parameters and buffers) and, for unit splits,
by the :class:`UnitGraph` that :mod:`learner.modules.trace` finds. The rules
(DESIGN 3.3 and 3.5): a glob gives whole tensors to its model; a unit split
gives each layer's output units to models in dependency order, a weight to the
lower of the models owning its two units, a bias or a normalisation's values
to their channel's model; a float buffer no rule covers follows its module's
parameters; everything else is local. A model's vector is its share of each
tensor, tensors in name order; the fingerprint covers every tensor's name and
shape, the traced graph, the model's and its dependencies' declarations.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

import numpy as np

from learner.fingerprint import init_seed_of
from learner.model_graph import ModelGraph
from learner.module_spec import ModuleModelSpec, UnitAmount
from learner.spec import LOCAL_MODEL, SpecError

__all__ = ["FORMAT", "INPUT", "Inventory", "ModuleLayout", "Piece", "TensorInfo", "UnitGraph",
           "UnitLayer"]

#: Version tag of the description a module model's fingerprint hashes.
FORMAT = "p2p-gossip-learning/module-model/v1"
#: ``UnitLayer.source`` of a layer reading the module's input (its units belong to every model).
INPUT = -1


@dataclass(frozen=True)
class TensorInfo:
    """One parameter or buffer of the module."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    parameter: bool
    floating: bool

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def module(self) -> str:
        return self.name.rpartition(".")[0]


@dataclass(frozen=True)
class Inventory:
    """Every parameter and buffer of a module, in the module's own order."""

    tensors: tuple[TensorInfo, ...]

    def as_json(self) -> list[list[object]]:
        return [[t.name, list(t.shape), t.dtype, "parameter" if t.parameter else "buffer"]
                for t in sorted(self.tensors, key=lambda t: t.name)]


@dataclass(frozen=True)
class UnitLayer:
    """A layer whose output units a unit split shares out (``Linear``, ``Conv1d/2d``).

    ``space``: its output units' class (layers added together share one);
    ``source``: the class of the units it reads (:data:`INPUT`: the module's input;
    None: tracing could not tell, ``note`` says why); ``area``: input columns per
    source unit (a flattened feature map's height x width).
    """

    name: str
    units: int
    space: int
    source: int | None
    area: int
    weight: str | None
    bias: str | None
    output: bool = False
    note: str = ""


@dataclass(frozen=True)
class UnitGraph:
    """What tracing found: the split layers, the tensors that follow a unit class along
    their first dimension (normalisation weights and statistics; None: unknown class),
    and a digest of the traced operations."""

    layers: tuple[UnitLayer, ...]
    followers: tuple[tuple[str, int | None], ...]
    digest: str


@dataclass(frozen=True)
class Piece:
    """A model's share of one tensor: all of it (``index`` None) or these flat indices."""

    tensor: str
    index: np.ndarray | None
    size: int
    offset: int


def _expand(owner: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """An owner array over a tensor's leading dimensions, spread over all of its elements."""
    view = owner.reshape(owner.shape + (1,) * (len(shape) - owner.ndim))
    return np.broadcast_to(view, shape).reshape(-1)


def _count(amount: UnitAmount, units: int) -> int:
    return int(round(amount * units)) if isinstance(amount, float) else int(amount)


class ModuleLayout:
    """A module's tensors cut into partial models (the counterpart of
    :class:`learner.layout.ModelLayout` for any ``nn.Module``).

    Raises :class:`SpecError` naming the model, glob, layer or tensor at fault.
    """

    def __init__(self, inventory: Inventory, models: Sequence[ModuleModelSpec], *,
                 units: UnitGraph | None = None, graph_digest: str | None = None) -> None:
        for i, m in enumerate(models):
            if not isinstance(m, ModuleModelSpec):
                raise SpecError(f"partial model {getattr(m, 'name', m)!r} gives neurons per "
                                "layer, which only a notation network has; a network.factory "
                                "module's models give params (globs) and/or units",
                                field="params", model=getattr(m, "name", None), index=i)
        self._inventory = inventory
        self._tensors = {t.name: t for t in inventory.tensors}
        self._graph: ModelGraph[ModuleModelSpec] = ModelGraph(list(models))
        rank = {n: i for i, n in enumerate(self._graph.names)}
        self._order = tuple(self._graph.topological(self._graph.names, tie=rank))
        self._ids = {n: i for i, n in enumerate(self._order)}
        self._local = len(self._order)
        self._digest = graph_digest if graph_digest is not None else (
            units.digest if units is not None else None)
        owners: dict[str, int | np.ndarray] = {}
        wants_units = [n for n in self._order if self._graph[n].units is not None]
        if wants_units:
            if units is None:
                raise SpecError(f"partial model {wants_units[0]!r} declares units but the "
                                "module was not traced; declare it by params instead",
                                field="units", model=wants_units[0])
            self._unit_owners(units, owners)
        self._glob_owners(owners)
        self._buffers_follow(owners)
        self._owners = owners
        self._build_vectors()

    # ------------------------------------------------------------- ownership
    def _lower(self) -> np.ndarray:
        """``table[i, j]``: owner of a weight between a unit of model i and one of model j."""
        n = len(self._order)
        table = np.full((n + 1, n + 1), self._local, dtype=np.int64)
        for i, a in enumerate(self._order):
            for j, b in enumerate(self._order):
                if a == b or self._graph.depends(a, b):
                    table[i, j] = table[j, i] = i
        return table

    def _amount(self, spec: ModuleModelSpec, layer: UnitLayer) -> int | None:
        """Units of ``layer`` that ``spec`` asks for (None: it says nothing about it)."""
        units = spec.units
        if units is None:
            return None
        if isinstance(units, tuple):
            for glob, amount in units:
                if fnmatchcase(layer.name, glob):
                    count = _count(amount, layer.units)
                    break
            else:
                return None
        elif layer.output:  # the shorthand: outputs whole to a model without dependencies
            count = 0 if spec.depends_on else layer.units
        else:
            count = _count(units, layer.units)
        if count > layer.units:
            raise SpecError(f"partial model {spec.name!r}: units asks for {count} of layer "
                            f"{layer.name!r}, which has {layer.units}", field="units",
                            model=spec.name)
        return count

    def _unit_owners(self, graph: UnitGraph, owners: dict[str, int | np.ndarray]) -> None:
        for spec in (self._graph[n] for n in self._order):
            if isinstance(spec.units, tuple):
                for glob, _ in spec.units:
                    if not any(fnmatchcase(layer.name, glob) for layer in graph.layers):
                        raise SpecError(f"partial model {spec.name!r}: units glob {glob!r} "
                                        "matches no Linear or Conv layer; traced layers: "
                                        f"{_some(layer.name for layer in graph.layers)}",
                                        field="units", model=spec.name)
        sizes: dict[int, int] = {}
        counts: dict[tuple[int, str], tuple[int, str]] = {}
        for layer in graph.layers:
            sizes.setdefault(layer.space, layer.units)
            for name in self._order:
                count = self._amount(self._graph[name], layer)
                if count is None:
                    continue
                seen = counts.setdefault((layer.space, name), (count, layer.name))
                if seen[0] != count:
                    raise SpecError(f"partial model {name!r}: layers {seen[1]!r} and "
                                    f"{layer.name!r} are added together (a residual "
                                    f"connection) so they share units, but units gives them "
                                    f"{seen[0]} and {count}; give both the same",
                                    field="units", model=name)
        unit_model: dict[int, np.ndarray] = {}
        for space, size in sizes.items():
            ids = np.full(size, self._local, dtype=np.int64)
            start = 0
            for name in self._order:
                count = counts.get((space, name), (0, ""))[0]
                if start + count > size:
                    where = next(layer.name for layer in graph.layers if layer.space == space)
                    raise SpecError(f"layer {where!r}: the partial models together want "
                                    f"{start + count} of its {size} units; expected at most "
                                    f"{size}", field="units", model=name)
                ids[start:start + count] = self._ids[name]
                start += count
            unit_model[space] = ids
        table = self._lower()
        for layer in graph.layers:
            out = unit_model[layer.space]
            if layer.source is None:
                shared = out[out != self._local]
                if shared.size:
                    raise SpecError(f"cannot split the units of layer {layer.name!r}: "
                                    f"{layer.note}; declare the model by params (globs over "
                                    "parameter names) instead", field="units",
                                    model=self._order[int(shared[0])])
                continue
            if layer.weight is not None:
                if layer.source == INPUT:
                    owners[layer.weight] = out.copy()
                else:
                    source = np.repeat(unit_model[layer.source], layer.area)
                    owners[layer.weight] = table[out[:, None], source[None, :]]
            if layer.bias is not None:
                owners[layer.bias] = out.copy()
        for tensor, follows in graph.followers:
            if follows is not None:
                owners[tensor] = unit_model[follows].copy()
        for tensor in list(owners):
            owner = owners[tensor]
            info = self._tensors.get(tensor)
            if info is not None and not info.parameter:
                # a model whose buffers stay local keeps its channels' statistics apart
                for name in self._order:
                    if self._graph[name].buffers == "local":
                        np.place(np.asarray(owner), np.asarray(owner) == self._ids[name],
                                 self._local)
            if isinstance(owner, np.ndarray) and np.all(owner == self._local):
                del owners[tensor]

    def _glob_owners(self, owners: dict[str, int | np.ndarray]) -> None:
        floating = [t for t in self._inventory.tensors if t.floating]
        claimed = {name: "units" for name in owners}
        for name in self._order:
            spec = self._graph[name]
            for glob in spec.params:
                matches = [t for t in floating if fnmatchcase(t.name, glob)]
                if not matches:
                    raise SpecError(f"partial model {name!r}: params glob {glob!r} matches no "
                                    "parameter or floating-point buffer; names are like "
                                    f"{_some(t.name for t in floating)}", field="params",
                                    model=name)
                for t in matches:
                    if not t.parameter and spec.buffers == "local":
                        continue
                    other = claimed.get(t.name)
                    if other is not None and other != name:
                        by = ("a unit split" if other == "units" else f"partial model {other!r}")
                        raise SpecError(f"partial model {name!r}: {t.name!r} (matched by "
                                        f"{glob!r}) is already claimed by {by}; every "
                                        "parameter belongs to one model", field="params",
                                        model=name)
                    claimed[t.name] = name
                    owners[t.name] = self._ids[name]

    def _buffers_follow(self, owners: dict[str, int | np.ndarray]) -> None:
        """A float buffer no rule covered goes with its module's parameters (one model)."""
        for t in self._inventory.tensors:
            if t.parameter or not t.floating or t.name in owners:
                continue
            held: set[int] = set()
            for s in self._inventory.tensors:
                if s.parameter and s.module == t.module:
                    owner = owners.get(s.name, self._local)
                    held.add(-1 if isinstance(owner, np.ndarray) else int(owner))
            if not held or held == {self._local}:
                continue
            if len(held) > 1:
                raise SpecError(f"buffer {t.name!r} follows its module's parameters, which "
                                "belong to different models; give it to one with params or "
                                'declare buffers = "local"', field="buffers")
            owner = int(next(iter(held)))
            if self._graph[self._order[owner]].buffers == "follow":
                owners[t.name] = owner

    # ---------------------------------------------------------------- vectors
    def _build_vectors(self) -> None:
        self._pieces: dict[str, tuple[Piece, ...]] = {}
        self._fingerprint: dict[str, bytes] = {}
        self._description: dict[str, bytes] = {}
        owned = {name: 0 for name in self._order}
        names = sorted(self._owners)
        for name in self._order:
            mid = self._ids[name]
            pieces: list[Piece] = []
            offset = 0
            for tensor in names:
                info = self._tensors[tensor]
                owner = self._owners[tensor]
                if isinstance(owner, np.ndarray):
                    index = np.flatnonzero(_expand(owner, info.shape) == mid).astype(np.int64)
                    if index.size == 0:
                        continue
                    piece = Piece(tensor, None if index.size == info.size else index,
                                  int(index.size), offset)
                elif owner == mid:
                    piece = Piece(tensor, None, info.size, offset)
                else:
                    continue
                pieces.append(piece)
                offset += piece.size
            if offset == 0:
                raise SpecError(f"partial model {name!r} holds no parameter: its params and "
                                "units leave it empty; give it at least one",
                                field="params", model=name)
            owned[name] = offset
            self._pieces[name] = tuple(pieces)
            involved = self._graph.canonical_order(self._graph.closure(name) | {name})
            doc = {
                "format": FORMAT,
                "model": name,
                "involved": [self._graph[m].as_json() for m in involved],
                "module": self._inventory.as_json(),
                "graph": self._digest,
                "vector": [[p.tensor, p.size] for p in pieces],
                "vector_length": offset,
                "dtype": "float64",
            }
            text = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")
            self._description[name] = text
            self._fingerprint[name] = hashlib.sha256(text).digest()
        self._owned = owned
        self._total = sum(t.size for t in self._inventory.tensors if t.floating)

    # ----------------------------------------------------------------- access
    def _require(self, name: str) -> None:
        if name not in self._fingerprint:
            raise KeyError(f"partial model {name!r} is not a shared model of this node; "
                           f"shared models: {', '.join(self._order) or 'none'}")

    @property
    def inventory(self) -> Inventory:
        return self._inventory

    @property
    def declared_models(self) -> tuple[str, ...]:
        return self._order

    @property
    def shared_models(self) -> tuple[str, ...]:
        return self._order

    @property
    def cross_models(self) -> tuple[str, ...]:
        return ()

    @property
    def cross_models_enabled(self) -> bool:
        return False

    @property
    def total_parameters(self) -> int:
        """Floating-point values of the whole module (parameters and float buffers)."""
        return self._total

    @property
    def graph_digest(self) -> str | None:
        """Digest of the traced operations (None: the module could not be traced)."""
        return self._digest

    def spec(self, name: str) -> ModuleModelSpec:
        return self._graph[name]

    def pieces(self, name: str) -> tuple[Piece, ...]:
        self._require(name)
        return self._pieces[name]

    def fingerprint(self, name: str) -> bytes:
        self._require(name)
        return self._fingerprint[name]

    def canonical_description(self, name: str) -> bytes:
        self._require(name)
        return self._description[name]

    def init_seed(self, name: str) -> int:
        return init_seed_of(self.fingerprint(name))

    def vector_length(self, name: str) -> int:
        self._require(name)
        return self._owned[name]

    def owned_parameter_count(self, name: str) -> int:
        if name == LOCAL_MODEL:
            return self._total - sum(self._owned.values())
        self._require(name)
        return self._owned[name]

    def model_kind(self, name: str) -> str:
        if name == LOCAL_MODEL:
            return "local"
        spec = self._graph[name]
        if spec.kind is not None:
            return spec.kind
        return "semi-local" if spec.depends_on else "global"

    def owner_of(self, tensor: str) -> str | None:
        """The model holding all of ``tensor`` (``"local"``), or None when it is split."""
        owner = self._owners.get(tensor, self._local)
        if isinstance(owner, np.ndarray):
            return None
        return LOCAL_MODEL if owner == self._local else self._order[owner]

    def describe(self, name: str) -> str:
        n = self.owned_parameter_count(name)
        if name == LOCAL_MODEL:
            return f"{LOCAL_MODEL} (local): {n} values, not shared"
        spec = self._graph[name]
        deps = ", ".join(sorted(self._graph.closure(name))) or "none"
        return (f"{spec} ({self.model_kind(name)}), depends on {deps}, {n} values, fingerprint "
                f"{self._fingerprint[name].hex()[:16]}")

    def __repr__(self) -> str:
        return f"ModuleLayout(shared={list(self._order)}, values={self._total})"


def _some(names: Iterable[str], limit: int = 6) -> str:
    listed = list(names)
    text = ", ".join(repr(n) for n in listed[:limit])
    return text + (", ..." if len(listed) > limit else "") if listed else "none"
