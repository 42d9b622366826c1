"""Build a node's module from the user's factory: seeded, checked, cut into partial models.

The factory is called as ``factory(input_shape=..., num_classes=..., generator=...)``
(only the arguments its signature takes) under a seeded global RNG too, so a
factory that initialises with torch's defaults is as reproducible as one that
uses the generator. The module is checked on a batch of two zero inputs of
``input_shape`` (its output must have one value per class when the loss is
cross-entropy), traced when a model declares units, and wrapped in a
:class:`~learner.modules.partial.PartialModule`. A module object (the Python
API) is copied and re-initialised instead of rebuilt (:func:`factory_from_module`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from learner.module_spec import ModuleModelSpec
from learner.modules.layout import ModuleLayout
from learner.modules.partial import PartialModule, inventory_of
from learner.modules.trace import graph_digest, symbolic, trace_units
from learner.spec import SpecError
from learner.user_code import FactoryError, call_with, describe_type

__all__ = ["ModuleRecipe", "build_partial_module", "factory_from_module"]


@dataclass(frozen=True)
class ModuleRecipe:
    """How to build a node's module: the factory, what it is told, the declared models.

    ``key`` and ``text`` name the factory in errors (``network.factory``,
    ``"model.py:build"``); ``classes``: check that the output has ``num_classes``
    values per sample (the default cross-entropy loss needs it).
    """

    factory: Callable[..., object]
    input_shape: tuple[int, ...]
    num_classes: int
    models: tuple[ModuleModelSpec, ...] = ()
    key: str = "network.factory"
    text: str = "the model factory"
    classes: bool = True

    def build(self, seed: int) -> nn.Module:
        """A fresh module, initialised from ``seed`` (the generator and torch's global RNG)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            generator = torch.Generator().manual_seed(seed)
            module = call_with(self.factory, {"input_shape": self.input_shape,
                                              "num_classes": self.num_classes,
                                              "generator": generator},
                               key=self.key, text=self.text)
        if not isinstance(module, nn.Module):
            raise FactoryError(f"{self.text} returned {describe_type(module)}; expected a "
                               "torch.nn.Module", field=self.key)
        return module


def factory_from_module(module: nn.Module) -> Callable[..., nn.Module]:
    """A factory for a module object: a copy with every submodule that has
    ``reset_parameters`` re-initialised from the seeded global RNG (tensors set
    directly by the user's code keep the values of ``module``)."""

    def build(**_: object) -> nn.Module:
        fresh = copy.deepcopy(module)
        for sub in fresh.modules():
            reset = getattr(sub, "reset_parameters", None)
            if callable(reset):
                reset()
        return fresh

    build.__qualname__ = f"<{type(module).__name__} object>"
    return build


def _check_output(recipe: ModuleRecipe, module: nn.Module) -> None:
    batch = torch.zeros(2, *recipe.input_shape)
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            out = module(batch)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise FactoryError(f"{recipe.text}: the module fails on a batch of shape "
                           f"{tuple(batch.shape)} (the task's input shape "
                           f"{recipe.input_shape}): {type(exc).__name__}: {first}",
                           field=recipe.key) from None
    finally:
        module.train(was_training)
    if not isinstance(out, torch.Tensor):
        raise FactoryError(f"{recipe.text}: the module returns {describe_type(out)}; expected "
                           "a tensor of outputs", field=recipe.key)
    if recipe.classes and tuple(out.shape) != (2, recipe.num_classes):
        raise FactoryError(f"{recipe.text}: the module returns outputs of shape "
                           f"{tuple(out.shape)} for a batch of 2; expected (2, "
                           f"{recipe.num_classes}), one logit per class of the task",
                           field=recipe.key)


def _digest(module: nn.Module) -> str | None:
    """The traced graph's digest, or None when ``module`` cannot be traced."""
    try:
        return graph_digest(symbolic(copy.deepcopy(module)))
    except SpecError:
        return None


def module_layout(recipe: ModuleRecipe, module: nn.Module,
                  models: Sequence[ModuleModelSpec] | None = None) -> ModuleLayout:
    """``module`` cut into ``models`` (default: the recipe's); SpecError names the culprit."""
    models = recipe.models if models is None else tuple(models)
    inventory = inventory_of(module)
    by_units = [m.name for m in models if m.units is not None]
    if by_units:
        try:
            units = trace_units(module, recipe.input_shape)
        except SpecError as exc:
            exc.model = exc.model or by_units[0]  # reported under the first unit split
            raise
        return ModuleLayout(inventory, models, units=units)
    return ModuleLayout(inventory, models, graph_digest=_digest(module))


def build_partial_module(recipe: ModuleRecipe, seed: int) -> PartialModule:
    """The node's module: local parts from ``seed``, shared models from their fingerprints."""
    module = recipe.build(seed)
    _check_output(recipe, module)
    layout = module_layout(recipe, module)
    return PartialModule(module, layout, recipe.build, input_shape=recipe.input_shape,
                         seed=seed)
