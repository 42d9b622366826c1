"""The unit structure of a module, found by tracing it with ``torch.fx``.

Each value flowing through the traced graph carries where its units lie: the
class of units of the ``Linear``/``Conv`` layer that made it (along a
dimension; a flattened feature map spreads each channel over ``area``
columns), the module's input, or "unknown" with the operation that lost
track. Activations, pooling, dropout and normalisation keep a value's units;
an addition ties the units of its two operands (a residual connection: they
must belong to the same models); a layer starts a new class. What the walk
does not know (attention, concatenation, indexing, a functional layer) makes
its result unknown, and a layer reading an unknown value cannot be split: the
layout refuses it naming the layer (:mod:`learner.modules.layout`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import fx, nn
from torch.fx.passes.shape_prop import ShapeProp

from learner.modules.layout import INPUT, UnitGraph, UnitLayer
from learner.spec import SpecError

__all__ = ["graph_digest", "trace_units"]

_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d)
_KEEP_MODULES = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.GELU, nn.SiLU, nn.ELU, nn.SELU, nn.CELU,
                 nn.Sigmoid, nn.Tanh, nn.Softplus, nn.Hardswish, nn.Hardtanh, nn.Mish,
                 nn.Identity, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.AlphaDropout)
_POOL_MODULES = (nn.MaxPool1d, nn.MaxPool2d, nn.AvgPool1d, nn.AvgPool2d, nn.AdaptiveAvgPool1d,
                 nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d)
_KEEP_FUNCTIONS = {"relu", "relu_", "relu6", "sigmoid", "tanh", "gelu", "silu", "leaky_relu",
                   "elu", "selu", "celu", "softplus", "hardswish", "hardtanh", "mish", "dropout",
                   "contiguous", "clone"}
_POOL_FUNCTIONS = {"max_pool1d", "max_pool2d", "_max_pool1d", "_max_pool2d", "avg_pool1d",
                   "avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
                   "adaptive_max_pool1d", "adaptive_max_pool2d", "_adaptive_max_pool2d"}
_BINARY = {operator.add, operator.iadd, operator.sub, operator.isub, operator.mul,
           operator.imul, operator.truediv, torch.add, torch.sub, torch.mul}
_REDUCE_METHODS = {"mean", "sum", "amax"}


@dataclass(frozen=True)
class _Units:
    """Units of class ``space`` (or :data:`INPUT`) along ``dim``, ``area`` columns each."""

    space: int
    dim: int
    area: int = 1


@dataclass(frozen=True)
class _Unknown:
    note: str


_Feat = _Units | _Unknown | None


def _name(target: object) -> str:
    return str(getattr(target, "__name__", target))


def _qualified(target: object) -> str:
    return f"{getattr(target, '__module__', '') or ''}.{_name(target)}"


def graph_digest(gm: fx.GraphModule) -> str:
    """sha256 over the traced operations: kind, target (a layer with its settings), inputs."""
    rows = []
    for node in gm.graph.nodes:
        if node.op == "call_module":
            module = gm.get_submodule(node.target)
            target = f"{node.target}:{type(module).__qualname__}({module.extra_repr()})"
        elif node.op == "call_function":
            target = _qualified(node.target)
        else:
            target = str(node.target)
        args = fx.node.map_arg((node.args, node.kwargs),
                               lambda n: f"%{n.name}")
        rows.append([node.op, node.name, target, repr(args)])
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def symbolic(module: nn.Module) -> fx.GraphModule:
    """``torch.fx.symbolic_trace``; its failure is one SpecError line."""
    try:
        return fx.symbolic_trace(module)
    except Exception as exc:  # fx raises TraceError, TypeError, NotImplementedError...
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise SpecError(f"cannot trace {type(module).__name__} with torch.fx ({first}); a unit "
                        "split needs a traceable forward (no data-dependent control flow): "
                        "declare its models by params instead", field="units") from None


class _Walk:
    """One pass over the traced graph, in order."""

    def __init__(self, gm: fx.GraphModule) -> None:
        self.gm = gm
        self.parent: dict[int, int] = {}
        self.layers: list[UnitLayer] = []
        self.followers: list[tuple[str, int | None]] = []
        self.outputs: set[int] = set()
        self.feats: dict[fx.Node, _Feat] = {}
        self.called: set[str] = set()

    # union-find over unit classes
    def find(self, space: int) -> int:
        while self.parent.get(space, space) != space:
            space = self.parent[space]
        return space

    def new_space(self) -> int:
        space = len(self.parent)
        self.parent[space] = space
        return space

    def run(self) -> UnitGraph:
        for node in self.gm.graph.nodes:
            self.feats[node] = self.visit(node)
        layers = tuple(
            UnitLayer(layer.name, layer.units, self.find(layer.space),
                      layer.source if layer.source in (None, INPUT) else self.find(layer.source),
                      layer.area, layer.weight, layer.bias,
                      self.find(layer.space) in {self.find(s) for s in self.outputs},
                      layer.note)
            for layer in self.layers)
        followers = tuple((t, None if s is None else self.find(s)) for t, s in self.followers)
        return UnitGraph(layers, followers, graph_digest(self.gm))

    @staticmethod
    def shape(node: fx.Node) -> tuple[int, ...] | None:
        meta = node.meta.get("tensor_meta")
        return tuple(meta.shape) if meta is not None and hasattr(meta, "shape") else None

    def inputs(self, node: fx.Node) -> list[_Feat]:
        found: list[_Feat] = []

        def collect(n: fx.Node) -> fx.Node:
            found.append(self.feats[n])
            return n

        fx.node.map_arg((node.args, node.kwargs), collect)
        return found

    def visit(self, node: fx.Node) -> _Feat:
        if node.op == "placeholder":
            return _Units(INPUT, 1)
        if node.op == "get_attr":
            return None
        if node.op == "output":
            for feat in self.inputs(node):
                if isinstance(feat, _Units) and feat.space != INPUT:
                    self.outputs.add(feat.space)
            return None
        inputs = self.inputs(node)
        unknown = next((f for f in inputs if isinstance(f, _Unknown)), None)
        known = [f for f in inputs if isinstance(f, _Units)]
        if node.op == "call_module":
            return self.module(node, known, unknown)
        if unknown is not None:
            return unknown
        if not known:
            return None
        if node.op == "call_function":
            return self.function(node, known)
        return self.method(node, known)

    def lost(self, node: fx.Node, what: str) -> _Unknown:
        return _Unknown(f"its input passes through {node.name!r} ({what}), which tracing "
                        "cannot follow")

    def module(self, node: fx.Node, known: list[_Units], unknown: _Unknown | None) -> _Feat:
        path = str(node.target)
        module = self.gm.get_submodule(path)
        first: _Feat = unknown if unknown is not None else (known[0] if known else None)
        if isinstance(module, _LAYERS + (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm)):
            if path in self.called:
                raise SpecError(f"layer {path!r} is called more than once in forward; a unit "
                                "split cannot give one layer two inputs: declare the models "
                                "by params instead", field="units")
            self.called.add(path)
        if isinstance(module, _LAYERS):
            return self.layer(node, path, module, first)
        if isinstance(module, nn.BatchNorm1d | nn.BatchNorm2d | nn.LayerNorm):
            return self.norm(node, path, module, first)
        if isinstance(module, _KEEP_MODULES):
            return first
        if isinstance(module, _POOL_MODULES):
            return self.pooled(node, first, type(module).__name__)
        if isinstance(module, nn.Flatten):
            return self.flatten(node, first, module.start_dim, module.end_dim)
        if first is None:
            return None
        return _Unknown(f"its input passes through {path!r} ({type(module).__name__}), a "
                        "layer tracing does not know")

    def layer(self, node: fx.Node, path: str, module: nn.Module, first: _Feat) -> _Units:
        source: int | None
        area = 1
        note = ""
        in_shape = self.shape(node.args[0]) if isinstance(node.args[0], fx.Node) else None
        if isinstance(first, _Unknown):
            source, note = None, first.note
        elif first is None or in_shape is None:
            source, note = None, "tracing found no input units for it"
        elif isinstance(module, nn.Linear):
            if first.dim != len(in_shape) - 1:
                source, note = None, "its input's units are not along the dimension it reads"
            else:
                source, area = first.space, first.area
        elif getattr(module, "groups", 1) != 1 or first.dim != 1 or first.area != 1:
            source, note = None, "it is a grouped convolution or reads a flattened input"
        else:
            source = first.space
        if source is not None and source != INPUT:
            source = self.find(source)
        units = getattr(module, "out_features" if isinstance(module, nn.Linear)
                        else "out_channels")
        space = self.new_space()
        weight = f"{path}.weight" if getattr(module, "weight", None) is not None else None
        bias = f"{path}.bias" if getattr(module, "bias", None) is not None else None
        self.layers.append(UnitLayer(path, int(units), space, source, area, weight, bias,
                                     note=note))
        out_shape = self.shape(node)
        dim = 1 if not isinstance(module, nn.Linear) else (
            len(out_shape) - 1 if out_shape is not None else 1)
        return _Units(space, dim)

    def norm(self, node: fx.Node, path: str, module: nn.Module, first: _Feat) -> _Feat:
        shape = self.shape(node)
        if isinstance(module, nn.LayerNorm):
            fits = (isinstance(first, _Units) and shape is not None
                    and len(module.normalized_shape) == 1 and first.dim == len(shape) - 1)
        else:
            fits = isinstance(first, _Units) and first.dim == 1
        follows = (first.space if fits and isinstance(first, _Units) and first.area == 1
                   and first.space != INPUT else None)
        names = [f"{path}.{leaf}" for leaf, value in
                 [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]
                 if value is not None and value.is_floating_point()]
        self.followers += [(name, follows) for name in names]
        if first is None or isinstance(first, _Unknown) or fits:
            return first
        return _Unknown(f"{path!r} ({type(module).__name__}) normalises across the units")

    def pooled(self, node: fx.Node, first: _Feat, what: str) -> _Feat:
        if isinstance(first, _Units) and (first.dim != 1 or first.area != 1):
            return self.lost(node, what)
        return first

    def flatten(self, node: fx.Node, first: _Feat, start: int, end: int) -> _Feat:
        if not isinstance(first, _Units):
            return first
        source = node.args[0]
        in_shape = self.shape(source) if isinstance(source, fx.Node) else None
        if in_shape is None or start != 1 or end not in (-1, len(in_shape) - 1):
            return self.lost(node, f"flatten({start}, {end})")
        if first.dim != 1 or len(in_shape) < 2:
            return self.lost(node, "a flatten of units not along dimension 1")
        return _Units(first.space, 1, first.area * math.prod(in_shape[2:]))

    def function(self, node: fx.Node, known: list[_Units]) -> _Feat:
        target = node.target
        name = _name(target)
        if target in _BINARY:
            return self.binary(node, known)
        if name in _KEEP_FUNCTIONS:
            return known[0]
        if name in _POOL_FUNCTIONS:
            return self.pooled(node, known[0], name)
        if target is torch.flatten:
            start = node.args[1] if len(node.args) > 1 else node.kwargs.get("start_dim", 0)
            end = node.args[2] if len(node.args) > 2 else node.kwargs.get("end_dim", -1)
            return self.flatten(node, known[0], int(start), int(end))  # type: ignore[arg-type]
        return self.lost(node, _qualified(target))

    def binary(self, node: fx.Node, known: list[_Units]) -> _Feat:
        if len(known) == 1:
            return known[0]
        a, b = known[0], known[1]
        if (a.dim, a.area) != (b.dim, b.area):
            return self.lost(node, "an operation between values of different unit layouts")
        if INPUT in (a.space, b.space):
            if a.space == b.space:
                return a
            return self.lost(node, "an addition of the module's input to a layer's output")
        root_a, root_b = self.find(a.space), self.find(b.space)
        if root_a != root_b:
            self.parent[max(root_a, root_b)] = min(root_a, root_b)
        return _Units(self.find(a.space), a.dim, a.area)

    def method(self, node: fx.Node, known: list[_Units]) -> _Feat:
        name = str(node.target)
        first = known[0]
        in_shape = self.shape(node.args[0]) if isinstance(node.args[0], fx.Node) else None
        out_shape = self.shape(node)
        if name in _KEEP_FUNCTIONS:
            return first
        if name == "flatten":
            start = node.args[1] if len(node.args) > 1 else node.kwargs.get("start_dim", 0)
            end = node.args[2] if len(node.args) > 2 else node.kwargs.get("end_dim", -1)
            return self.flatten(node, first, int(start), int(end))  # type: ignore[arg-type]
        if name in ("view", "reshape") and in_shape is not None and out_shape is not None:
            if out_shape == in_shape:
                return first
            if (len(out_shape) == 2 and len(in_shape) > 2 and out_shape[0] == in_shape[0]
                    and out_shape[1] == math.prod(in_shape[1:])):
                return self.flatten(node, first, 1, -1)
        if (name in _REDUCE_METHODS and in_shape is not None and out_shape is not None
                and first.dim == 1 and first.area == 1 and len(in_shape) > 2
                and out_shape in (in_shape[:2], in_shape[:2] + (1,) * (len(in_shape) - 2))):
            return first
        return self.lost(node, f".{name}()")


def trace_units(module: nn.Module, input_shape: Sequence[int]) -> UnitGraph:
    """The split layers, followers and graph digest of ``module`` (SpecError if untraceable).

    Traces a copy in eval mode and propagates a zero batch of two ``input_shape``
    samples through it for the shapes (the module itself is not touched).
    """
    probe = copy.deepcopy(module).eval()
    gm = symbolic(probe)
    with torch.no_grad():
        try:
            ShapeProp(gm).propagate(torch.zeros(2, *input_shape))
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
            raise SpecError(f"tracing {type(module).__name__} on inputs of shape "
                            f"{tuple(input_shape)} failed: {first}", field="units") from None
    return _Walk(gm).run()
